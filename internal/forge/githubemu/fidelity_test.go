package githubemu

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-github/v62/github"
)

// GitHub's ETags vary with the credential (Vary: Authorization): an ETag got
// with one token does not answer 304 to another. An App's installation token
// changes every hour, so the first poll after a renewal is a full, counted
// answer (github/docs#34689).
func TestETagIsPerCredential(t *testing.T) {
	s, repo, c, _ := setup(t, Options{})
	s.AddToken("other-token", "fleet-bot")
	repo.OpenPR(PR{HeadSHA: sha(1)})
	req, _ := c.NewRequest(http.MethodGet, "repos/acme/fleet/pulls", nil)
	resp, err := c.Do(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	etag := resp.Header.Get("ETag")
	c2 := client(t, s, "other-token")
	req, _ = c2.NewRequest(http.MethodGet, "repos/acme/fleet/pulls", nil)
	req.Header.Set("If-None-Match", etag)
	resp, err = c2.Do(t.Context(), req, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("another token with the first one's ETag: %v %v", resp, err)
	}
	if resp.Header.Get("ETag") == etag {
		t.Error("two credentials got the same ETag")
	}
	req, _ = c.NewRequest(http.MethodGet, "repos/acme/fleet/pulls", nil)
	req.Header.Set("If-None-Match", etag)
	if resp, _ = c.Do(t.Context(), req, nil); resp == nil || resp.StatusCode != http.StatusNotModified {
		t.Errorf("the same token again: %v", resp)
	}
}

// "there is a limit of 1000 statuses per sha and context within a
// repository. Attempts to create more than 1000 statuses will result in a
// validation error."
func TestStatusesPerCommitAndContextAreCapped(t *testing.T) {
	_, repo, c, _ := setup(t, Options{})
	repo.AddCommit(sha(1))
	ctx := t.Context()
	for i := 0; i < 1000; i++ {
		st := "pending"
		if i%2 == 1 {
			st = "failure"
		}
		if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String(st), Context: github.String("fleet-agent/apply")}); err != nil {
			t.Fatalf("status %d: %v", i+1, err)
		}
	}
	_, resp, err := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String("success"), Context: github.String("fleet-agent/apply")})
	var er *github.ErrorResponse
	if resp == nil || resp.StatusCode != http.StatusUnprocessableEntity || !errors.As(err, &er) || len(er.Errors) == 0 ||
		er.Errors[0].Message != "This SHA and context has reached the maximum number of statuses." {
		t.Errorf("status 1001: %v", err)
	}
	if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "fleet", sha(1), &github.RepoStatus{State: github.String("success"), Context: github.String("fleet-agent/drift")}); err != nil {
		t.Errorf("another context: %v", err)
	}
}

// GitHub does not always send Retry-After with a secondary limit ("Otherwise,
// wait for at least one minute before retrying"); SecondaryLimitNext with no
// duration answers so.
func TestSecondaryLimitWithoutRetryAfter(t *testing.T) {
	s, repo, c, _ := setup(t, Options{})
	repo.OpenPR(PR{HeadSHA: sha(1)})
	s.SecondaryLimitNext(1, 0)
	_, resp, err := c.PullRequests.List(t.Context(), "acme", "fleet", nil)
	var ab *github.AbuseRateLimitError
	if !errors.As(err, &ab) || resp.Header.Get("Retry-After") != "" {
		t.Errorf("secondary without Retry-After: %v %v", err, resp.Header)
	}
}
