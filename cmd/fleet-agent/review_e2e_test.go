package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/config"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// switchChecker fails every call with the refusal it holds (nil: passes).
type switchChecker struct {
	plan.Offline
	fail atomic.Pointer[refusal.Error]
}

// For makes the switch every plan's checks.
func (c *switchChecker) For(*inventory.Snapshot) plan.Checks { return c }

func (c *switchChecker) CheckCall(context.Context, plan.Call) error {
	if e := c.fail.Load(); e != nil {
		return e
	}
	return nil
}

// withChecker rewires the world's agent with a checker the test controls.
func (w *ghWorld) withChecker(c *switchChecker) {
	g, err := forge.New(forge.Config{Repository: "acme/fleet", APIURL: w.emu.URL(), Token: "secret://gh",
		Resolver: secretsMap{"secret://gh": canaryToken}, Clock: w.clk})
	if err != nil {
		w.t.Fatal(err)
	}
	w.ag = agent.New(agent.Config{Branch: "main", RequireReviewedPlan: true, Prefix: "fleet-agent"},
		agent.Options{Store: w.store, Repo: w.repo, Forge: agentForge{g}, Outbox: w.box, Clock: w.clk, Log: zerolog.New(w.log), Live: c})
}

// A tip whose apply waits (a provider down) shows apply pending; when the
// branch moves on before it could be applied, that pending is resolved.
func TestPendingApplyOfASupersededTipIsResolved(t *testing.T) {
	w := newGHWorld(t)
	chk := &switchChecker{}
	w.withChecker(chk)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot := w.push("main", emptyDoc, "an empty fleet")
	w.step()
	head := w.openPR(1, boot, poolDoc)
	w.step()
	chk.fail.Store(refusal.New(refusal.Unavailable, "the provider does not answer"))
	w.merge(1, head)
	w.step()
	if s := w.lastStatus(head, "apply"); s.State != "pending" {
		t.Fatalf("while the provider is down: %+v", s)
	}
	// main moves on (a direct push, refused) before head could be applied.
	w.work.Git(t, "checkout", "-q", "-B", "main", head)
	direct := w.push("main", pool8Doc, "direct push")
	w.step()
	w.clk.Advance(agent.MergeLinkGrace + time.Second)
	w.step()
	if s := w.lastStatus(direct, "apply"); s.State != "failure" {
		t.Fatalf("direct push: %+v", s)
	}
	if s := w.lastStatus(head, "apply"); s.State == "pending" {
		t.Fatalf("the superseded tip's apply status stays pending: %+v", s)
	}
}

// An apply by hand that fails leaves no pending status behind.
func TestFailedApplyByHandLeavesNoPending(t *testing.T) {
	w := newGHWorld(t)
	chk := &switchChecker{}
	w.withChecker(chk)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot := w.push("main", emptyDoc, "an empty fleet")
	w.step()
	direct := w.push("main", poolDoc, "direct push")
	w.step()
	w.clk.Advance(agent.MergeLinkGrace + time.Second)
	w.step()
	if s := w.lastStatus(direct, "apply"); s.State != "failure" {
		t.Fatalf("direct push: %+v", s)
	}
	p, _, err := w.ag.PlanCommit(t.Context(), direct)
	if err != nil {
		t.Fatal(err)
	}
	for _, why := range []*refusal.Error{
		refusal.New(refusal.InvalidState, "permission denied"),
		refusal.New(refusal.Unavailable, "the provider does not answer"),
	} {
		chk.fail.Store(why)
		if _, _, err := w.ag.ApplyCommit(t.Context(), direct, p.PlanHash, "ops@box"); err == nil {
			t.Fatal("applied through a failing checker")
		}
		if err := w.box.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if s := w.lastStatus(direct, "apply"); s.State == "pending" {
			t.Fatalf("a failed apply by hand (%s) left: %+v", why.Code, s)
		}
	}
	_ = boot
}

// A fleet applied from the command line (no commit) and then followed by
// an agent on GitHub: drift is still recorded.
func TestDriftOfAnApplyWithoutCommitOnGitHub(t *testing.T) {
	w := newGHWorld(t)
	doc, errs := fleet.Validate("fleet.json", []byte(poolDoc))
	if errs != nil {
		t.Fatal(errs)
	}
	if _, err := apply.Apply(t.Context(), w.store, doc, apply.Options{AppliedBy: "ops@box"}); err != nil {
		t.Fatal(err)
	}
	if err := apply.ApplyEdit(w.store, apply.Edit{Kind: inventory.OwnerQuota, Name: "vps:gpu", Set: map[string]any{"max": 2}, Who: "ops@box"}); err != nil {
		t.Fatal(err)
	}
	err := w.ag.DriftCheck(t.Context())
	v, _ := agent.Status(w.store, "root")
	if err != nil || v.Drift == nil || !strings.Contains(string(v.Drift.Changes), "vps:gpu") {
		t.Fatalf("drift not recorded: %v %+v", err, v.Drift)
	}
}

// A reload changes only what a reload can change: the running config the
// local API answers with keeps the keys that need a restart, and a later
// reload still says they need one.
func TestReloadKeepsKeysThatNeedARestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const base = "git:\n  url: https://example.com/acme/fleet.git\n"
	write(base)
	env := func(string) (string, bool) { return "", false }
	running, err := config.Load(path, env)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := zerolog.New(&logs)
	a := &app{lookupEnv: env}
	a.running.Store(running)
	var reconfigured *config.Config
	a.reconfigure = func(c *config.Config) { reconfigured = c }

	write("tenant: acme\ngit:\n  url: https://example.com/acme/other.git\ndrift:\n  every: 5m\n")
	a.reload(path, log, "test")
	if reconfigured == nil || reconfigured.Drift.Every != 5*time.Minute {
		t.Fatalf("drift.every not reloaded: %+v\n%s", reconfigured, logs.String())
	}
	if got := a.running.Load(); got.Tenant != running.Tenant || got.Git.URL != running.Git.URL || got.Drift.Every != 5*time.Minute {
		t.Fatalf("running config after reload: tenant %q url %q every %v", got.Tenant, got.Git.URL, got.Drift.Every)
	}
	logs.Reset()
	a.reload(path, log, "test again")
	if !strings.Contains(logs.String(), `"tenant"`) || !strings.Contains(logs.String(), "after a restart") {
		t.Fatalf("a second reload forgets that tenant needs a restart:\n%s", logs.String())
	}
}
