package fake

import (
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

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
	ic, minted := st.Credentials[tokenHash(token)]
	if !minted || ic.Revoked || !now.Before(ic.ExpiresAt) {
		return "", false, nil
	}
	c := st.Clusters[ic.ClusterID]
	if c == nil || c.Status == providers.ClusterDeleting {
		return "", false, nil
	}
	return "fake:" + ic.Account, true, nil
}
