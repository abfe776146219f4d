package forge_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
)

// The request that spends the last of the primary budget is answered 200
// with X-RateLimit-Remaining: 0. GitHub refuses everything after it until
// X-RateLimit-Reset, and requests sent while limited count against the
// integration: the forge must not send the next one.
func TestSpentBudgetStopsRequestsBeforeThe403(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	ctx := t.Context()
	e.emu.SetRateBudget(1)
	reset := e.emu.RateReset()
	if _, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "pending"}); err != nil {
		t.Fatal(err)
	}
	e.emu.ResetLog()
	_, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "success"})
	fe := classOf(t, err)
	if fe.Class != forge.ClassRateLimited || !fe.RetryAt(epoch).Equal(reset) {
		t.Errorf("after the last request of the budget: %v", err)
	}
	if n := e.emu.Counters().Total; n != 0 {
		t.Errorf("%d request(s) sent with the budget known to be spent", n)
	}
	e.clk.Advance(time.Hour)
	if _, err := e.forge.SetStatus(ctx, sha(1), forge.Status{Context: "plan", State: "success"}); err != nil {
		t.Errorf("after the reset: %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// GitHub Enterprise Server (and github.com before the rename) answers a
// secondary limit as a 403 whose documentation_url ends in
// "#abuse-rate-limits", with the older "abuse detection" message and not
// always a Retry-After. It is a limit to wait out, not a missing permission:
// classed forbidden, the outbox would drop the post.
func TestSecondaryLimitKnownByItsDocumentationURL(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.cfg.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body := `{"message":"You have triggered an abuse detection mechanism. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/enterprise-server@3.0/rest/overview/resources-in-the-rest-api#abuse-rate-limits"}`
		h := http.Header{"Content-Type": {"application/json; charset=utf-8"},
			"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"4990"}, "X-Ratelimit-Used": {"10"},
			"X-Ratelimit-Reset": {"1777640400"}}
		return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Header: h,
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	})
	g := e.restart(t)
	_, err := g.AddComment(t.Context(), 1, "hello")
	fe := classOf(t, err)
	if fe.Class != forge.ClassSecondaryRateLimited || !fe.Retryable() || !fe.RetryAt(epoch).Equal(epoch.Add(forge.DefaultSecondaryRetryDelay)) {
		t.Errorf("abuse-rate-limits 403: %v", err)
	}
}

// Without Retry-After and with budget left, GitHub asks for at least a
// minute's wait.
func TestSecondaryLimitWithoutRetryAfterWaitsAMinute(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	n := e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	e.emu.SecondaryLimitNext(1, 0)
	_, err := e.forge.AddComment(t.Context(), n, "hello")
	fe := classOf(t, err)
	if fe.Class != forge.ClassSecondaryRateLimited || !fe.RetryAt(epoch).Equal(epoch.Add(forge.DefaultSecondaryRetryDelay)) {
		t.Errorf("secondary without Retry-After: %v", err)
	}
}

// An App's next installation token does not match the last one's ETags: the
// first poll after a renewal is a full answer, and it must be taken as one.
func TestPollAfterTokenRenewal(t *testing.T) {
	e := newEnv(t, githubemu.Options{})
	e.repo.OpenPR(githubemu.PR{HeadSHA: sha(1)})
	key, pemText := pemKey(t)
	e.emu.AddApp("4242", 77, &key.PublicKey)
	e.sec.set("secret://app-key", pemText)
	e.cfg.Token = ""
	e.cfg.App = &forge.App{ID: "4242", InstallationID: 77, PrivateKey: "secret://app-key"}
	g := e.restart(t)
	ctx := t.Context()
	if _, err := g.OpenPullRequests(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(56 * time.Minute)
	e.repo.PushHead(1, sha(2))
	e.emu.ResetLog()
	prs, err := g.OpenPullRequests(ctx, "main")
	if err != nil || len(prs) != 1 || prs[0].HeadSHA != sha(2) {
		t.Fatalf("after renewal: %+v %v", prs, err)
	}
	if e.emu.TokensMinted() != 2 {
		t.Fatalf("minted %d", e.emu.TokensMinted())
	}
	e.emu.ResetLog()
	if _, err := g.OpenPullRequests(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	if c := e.emu.Counters(); c.Counted != 0 || c.NotModified != 1 {
		t.Errorf("idle poll on the new token: %+v", c)
	}
}
