package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/gitsync"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
	"github.com/fleet-agent/fleet-agent/internal/testutil/gitserver"
)

type secretMap map[string]string

func (m secretMap) Resolve(_ context.Context, ref string) (string, error) {
	if v, ok := m[ref]; ok {
		return v, nil
	}
	return "", errors.New("no secret " + ref)
}

const (
	docV1 = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}]}`
	docV2 = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"vps","site":"fra","class":"vps-host","ownerQuota":{"gpu":4}}]}`
	docV3 = `{"version":1,"sites":[{"name":"fra","kind":"shared","region":"eu"}],"pools":[{"name":"vps","site":"fra","class":"vps-host","ownerQuota":{"gpu":8}}]}`
)

// world is a git server with one repository, a working copy, a state file
// and an agent following the repository without GitHub.
type world struct {
	srv   *gitserver.Server
	remo  *gitserver.Repo
	work  *gitserver.Work
	store *state.Store
	clk   *clock.Fake
	repo  *gitsync.Repo
	agent *agent.Agent
	log   *lockedLog
}

func newWorld(t *testing.T, cfg agent.Config) *world {
	t.Helper()
	w := &world{srv: gitserver.Start(t), clk: clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), log: &lockedLog{}}
	w.remo = w.srv.NewRepo(t, "fleet")
	w.work = w.remo.Clone(t)
	w.store = statetest.Open(t)
	repo, err := gitsync.Open(gitsync.Config{URL: w.remo.URL, Auth: gitsync.Auth{Token: "secret://git"},
		Secrets: secretMap{"secret://git": w.srv.Password}, Dir: t.TempDir(), Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	w.repo = repo
	if cfg.Branch == "" {
		cfg.Branch = "main"
	}
	w.agent = agent.New(cfg, agent.Options{Store: w.store, Repo: repo, Clock: w.clk, Log: zerolog.New(w.log)})
	return w
}

func (w *world) commit(t *testing.T, branch, doc, msg string) string {
	t.Helper()
	w.work.Git(t, "checkout", "-B", branch)
	w.work.Write(t, "fleet.json", doc)
	sha := w.work.CommitAll(t, msg)
	w.work.Push(t, "--force", "HEAD:refs/heads/"+branch)
	return sha
}

func (w *world) tick(t *testing.T) {
	t.Helper()
	_ = w.agent.Tick(t.Context())
}

func (w *world) applied(t *testing.T) *state.Applied {
	t.Helper()
	var ap *state.Applied
	if err := w.store.View(func(tx *state.Tx) (err error) { ap, err = tx.Applied(); return }); err != nil {
		t.Fatal(err)
	}
	return ap
}

func (w *world) audit(t *testing.T, action string) int {
	t.Helper()
	n := 0
	_ = w.store.View(func(tx *state.Tx) error {
		rows, err := tx.Audit()
		for _, r := range rows {
			if r.Action == action {
				n++
			}
		}
		return err
	})
	return n
}

func TestProposalsWithoutGitHub(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: true})
	boot := w.commit(t, "main", docV1, "bootstrap")
	w.tick(t)
	// The first tip makes calls and nobody reviewed it: refused, reported
	// in the log, applied by hand.
	if ap := w.applied(t); ap != nil {
		t.Fatalf("an unreviewed tip was applied: %+v", ap)
	}
	if !strings.Contains(w.log.String(), "was never proposed") {
		t.Fatalf("refusal not logged:\n%s", w.log.String())
	}
	p, full, err := w.agent.PlanCommit(t.Context(), boot[:10])
	if err != nil || full != boot || len(p.Calls) != 1 {
		t.Fatalf("plan --commit: %v %v", p, err)
	}
	if _, _, err := w.agent.ApplyCommit(t.Context(), boot, strings.Repeat("0", 64), "ops@box"); !refusal.Is(err, refusal.ConfigDrift) {
		t.Fatalf("a wrong hash by hand: %v", err)
	}
	if _, n, err := w.agent.ApplyCommit(t.Context(), boot, p.PlanHash, "ops@box"); err != nil || n != 1 {
		t.Fatalf("apply --commit: %d %v", n, err)
	}
	if ap := w.applied(t); ap == nil || ap.Commit != boot || ap.AppliedBy != "ops@box" {
		t.Fatalf("applied record %+v", ap)
	}

	// A branch is a proposal: planned and recorded, never applied.
	w.work.Git(t, "checkout", "-B", "grow", boot)
	head := w.commit(t, "grow", docV2, "add a pool")
	w.tick(t)
	props, err := w.agent.Proposals()
	if err != nil || len(props) != 1 || props[0].Ref != "refs/heads/grow" || props[0].Commit != head || props[0].Summary.Create != 2 {
		t.Fatalf("proposals %+v %v", props, err)
	}
	snap, _ := w.store.Snapshot()
	if _, ok := snap.ByName(inventory.Pool, "vps"); ok {
		t.Fatal("a proposal was applied")
	}
	// Merging it (fast-forward) applies exactly that plan.
	w.work.Push(t, "--force", head+":refs/heads/main")
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != head || ap.AppliedBy != "agent" || ap.PlanHash != props[0].PlanHash {
		t.Fatalf("merge not applied: %+v\n%s", ap, w.log.String())
	}
	// An idle tick changes nothing.
	applies := w.audit(t, "apply")
	w.tick(t)
	if w.audit(t, "apply") != applies {
		t.Fatal("an idle tick applied again")
	}
	// A direct push that was never proposed is refused and reported once.
	direct := w.commit(t, "main", docV3, "direct push")
	w.tick(t)
	w.tick(t)
	if ap := w.applied(t); ap.Commit != head {
		t.Fatalf("a direct push was applied: %+v", ap)
	}
	if strings.Count(w.log.String(), "was never proposed") != 2 { // boot and direct
		t.Fatalf("refusal not reported exactly once:\n%s", w.log.String())
	}
	// A force-push that rewinds main is refused.
	w.work.Push(t, "--force", boot+":refs/heads/main")
	w.tick(t)
	if ap := w.applied(t); ap.Commit != head {
		t.Fatal("a rewind was applied")
	}
	if !strings.Contains(w.log.String(), "does not descend from the applied commit") {
		t.Fatalf("rewind not reported:\n%s", w.log.String())
	}
	_ = direct
	// A proposal branch deleted is forgotten.
	w.work.Git(t, "push", "origin", "--delete", "grow")
	w.tick(t)
	if props, _ := w.agent.Proposals(); len(props) != 0 {
		t.Fatalf("deleted branch still a proposal: %+v", props)
	}
}

func TestEmptyPlanTipIsFollowed(t *testing.T) {
	// A fleet bootstrapped by hand: the tip plans no calls, so it is
	// recorded as applied without review and followed from there.
	w := newWorld(t, agent.Config{RequireReviewedPlan: true})
	if err := w.store.Update(func(tx *state.Tx) error {
		return tx.PutObject(inventory.Object{Kind: inventory.Site, ID: inventory.ID("root", inventory.Site, "fra"),
			Spec: map[string]any{"name": "fra", "kind": "shared", "region": "eu"}}, "fra")
	}); err != nil {
		t.Fatal(err)
	}
	tip := w.commit(t, "main", docV1, "describe what exists")
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != tip || ap.AppliedBy != "agent" {
		t.Fatalf("empty-plan tip not recorded: %+v\n%s", ap, w.log.String())
	}
}

func TestInvalidDocumentOnBranchIsRefused(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: false})
	w.commit(t, "main", `{"version":1,"sites":[{"name":"fra","kind":"huge","region":"eu"}]}`, "bad")
	w.tick(t)
	if ap := w.applied(t); ap != nil {
		t.Fatal("an invalid document was applied")
	}
	if !strings.Contains(w.log.String(), "/sites/0/kind") {
		t.Fatalf("pointer not reported:\n%s", w.log.String())
	}
	// Without review required, a valid tip applies directly.
	tip := w.commit(t, "main", docV1, "fix")
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != tip {
		t.Fatalf("%+v\n%s", ap, w.log.String())
	}
}

func TestHousekeepingDropsOldRecords(t *testing.T) {
	w := newWorld(t, agent.Config{RequireReviewedPlan: true})
	boot := w.commit(t, "main", docV1, "bootstrap")
	w.tick(t) // refused: unreviewed
	count := func(space string) int {
		n := 0
		_ = w.store.View(func(tx *state.Tx) error {
			return tx.ForEach(space, func(string, []byte) error { n++; return nil })
		})
		return n
	}
	if count("refused") != 1 {
		t.Fatalf("%d refusals", count("refused"))
	}
	w.clk.Advance(agent.KeepRecords - time.Hour)
	w.tick(t)
	if count("refused") != 1 {
		t.Fatal("a young refusal was dropped")
	}
	// Still the tip: its refusal stays, or it would be reported again.
	w.clk.Advance(25 * time.Hour)
	w.tick(t)
	if count("refused") != 1 {
		t.Fatal("the refusal of the current tip was dropped")
	}
	// A new tip (refused too); the old refusal goes at the next daily run.
	w.commit(t, "main", docV2, "another unreviewed change")
	w.tick(t)
	w.clk.Advance(25 * time.Hour)
	w.tick(t)
	if count("refused") != 1 {
		t.Fatalf("%d refusals; want only the new tip's", count("refused"))
	}
	_ = boot
}

// lockedLog is the agent's log in a test: the loop and the proposed
// policies' worker write it at once.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
