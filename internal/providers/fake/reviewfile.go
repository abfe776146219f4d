package fake

import "time"

// ReviewFile answers a TokenReview from a fake's state file, read-only, the
// way Fake.Review does in the fake's own process: for a helper that plays
// the cloud's authenticator next to an agent running the fake (make demo).
// The file is read whole on each call; the fake replaces it by rename, so a
// reader sees either the old state or the new one. A missing file refuses.
func ReviewFile(path, token string, now time.Time) (user string, ok bool, err error) {
	st, found, err := load(path)
	if err != nil || !found {
		return "", false, err
	}
	user, ok = st.review(token, now)
	return user, ok, nil
}
