package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// deadlineForge answers that no pull request exists and records whether
// each call came with a deadline: every GitHub read is a network call.
type deadlineForge struct {
	mu         sync.Mutex
	calls      int
	noDeadline []string
}

func (f *deadlineForge) note(what string, ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if _, ok := ctx.Deadline(); !ok {
		f.noDeadline = append(f.noDeadline, what)
	}
}

func (f *deadlineForge) OpenPullRequests(ctx context.Context, _ string) ([]agent.PullRequest, error) {
	f.note("OpenPullRequests", ctx)
	return nil, nil
}

func (f *deadlineForge) MergedPullRequest(ctx context.Context, _ string) (agent.PullRequest, bool, error) {
	f.note("MergedPullRequest", ctx)
	return agent.PullRequest{}, false, nil
}

func TestEveryGitHubReadHasADeadline(t *testing.T) {
	w := newWorld(t, agent.Config{})
	f := &deadlineForge{}
	ag := agent.New(agent.Config{Branch: "main", RequireReviewedPlan: false},
		agent.Options{Store: w.store, Repo: w.repo, Forge: f, Clock: w.clk, Log: zerolog.New(w.log)})
	// A refused tip (invalid document) looks up its pull request; so does
	// an applied one without requireReviewedPlan.
	w.commit(t, "main", `{"version":1,"sites":[{"name":"fra","kind":"huge","region":"eu"}]}`, "bad")
	_ = ag.Tick(t.Context())
	w.commit(t, "main", docV1, "fix")
	_ = ag.Tick(t.Context())
	if ap := w.applied(t); ap == nil {
		t.Fatalf("not applied:\n%s", w.log.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls < 3 {
		t.Fatalf("only %d GitHub read(s)", f.calls)
	}
	if len(f.noDeadline) > 0 {
		t.Fatalf("GitHub reads without a deadline: %v", f.noDeadline)
	}
}

func TestRefusalIsLoggedOnce(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: true})
	w.commit(t, "main", docV1, "never proposed")
	w.tick(t)
	w.tick(t)
	if n := strings.Count(w.log.String(), "was never proposed"); n != 1 {
		t.Fatalf("the refusal is in the log %d times:\n%s", n, w.log.String())
	}
}

// failingChecker refuses every call, as a provider that lost a permission.
type failingChecker struct{ plan.Offline }

func (f failingChecker) For(*inventory.Snapshot) plan.Checks { return f }

func (failingChecker) CheckCall(context.Context, plan.Call) error {
	return refusal.New(refusal.InvalidState, "permission denied on the provider")
}

func TestHealThatFailsStillReportsDrift(t *testing.T) {
	w := newWorld(t, agent.Config{})
	tip := w.commit(t, "main", docV2, "a pool")
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != tip {
		t.Fatalf("not applied: %+v\n%s", ap, w.log.String())
	}
	if err := apply.ApplyEdit(w.store, apply.Edit{Kind: inventory.OwnerQuota, Name: "vps:gpu", Set: map[string]any{"max": 2}, Who: "ops@box"}); err != nil {
		t.Fatal(err)
	}
	healer := agent.New(agent.Config{Branch: "main", Heal: true}, agent.Options{Store: w.store, Repo: w.repo, Clock: w.clk, Log: zerolog.New(w.log),
		Live: failingChecker{}})
	t.Log(healer.DriftCheck(t.Context()))
	v, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if v.Drift == nil || !strings.Contains(string(v.Drift.Changes), `vps:gpu`) {
		t.Fatalf("a heal that failed left the drift unreported: %+v\n%s", v.Drift, w.log.String())
	}
}

func TestPlanCommitWhileReloading(t *testing.T) {
	w := newWorld(t, agent.Config{})
	tip := w.commit(t, "main", docV1, "sites")
	w.tick(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 20 {
			w.agent.Reconfigure(func(c *agent.Config) { c.Prune = i%2 == 0 })
		}
	})
	for range 20 {
		if _, _, err := w.agent.PlanCommit(t.Context(), tip); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// flakyForge fails every read while down; the tip was merged by #7.
type flakyForge struct {
	mu   sync.Mutex
	down bool
}

func (f *flakyForge) OpenPullRequests(context.Context, string) ([]agent.PullRequest, error) {
	return nil, nil
}

func (f *flakyForge) MergedPullRequest(context.Context, string) (agent.PullRequest, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return agent.PullRequest{}, false, refusal.New(refusal.Unavailable, "GitHub does not answer")
	}
	return agent.PullRequest{Number: 7, Author: "alice", Merged: true}, true, nil
}

// A refusal made while GitHub cannot say which pull request merged the
// commit waits for it: the refusal's comment must reach the pull request.
func TestRefusalWaitsForItsPullRequest(t *testing.T) {
	w := newWorld(t, agent.Config{})
	f := &flakyForge{down: true}
	ag := agent.New(agent.Config{Branch: "main"}, agent.Options{Store: w.store, Repo: w.repo, Forge: f, Clock: w.clk, Log: zerolog.New(w.log)})
	tip := w.commit(t, "main", `{"version":1,"sites":[{"name":"fra","kind":"huge","region":"eu"}]}`, "bad")
	_ = ag.Tick(t.Context())
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	_ = ag.Tick(t.Context())
	var r localapi.Refused
	if err := w.store.View(func(tx *state.Tx) error { _, err := tx.Get("refused", tip, &r); return err }); err != nil {
		t.Fatal(err)
	}
	if r.PR != 7 {
		t.Fatalf("the refusal was recorded without its pull request: %+v\n%s", r, w.log.String())
	}
}
