package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/forge"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// switchChecker fails every call with the refusal it holds (nil: passes).
type switchChecker struct{ fail atomic.Pointer[refusal.Error] }

func (c *switchChecker) CheckCall(context.Context, plan.Call) error {
	if e := c.fail.Load(); e != nil {
		return e
	}
	return nil
}

// withChecker rewires the world's agent with a checker the test controls.
func (w *ghWorld) withChecker(c apply.Checker) {
	g, err := forge.New(forge.Config{Repository: "acme/fleet", APIURL: w.emu.URL(), Token: "secret://gh",
		Resolver: secretsMap{"secret://gh": canaryToken}, Clock: w.clk})
	if err != nil {
		w.t.Fatal(err)
	}
	w.ag = agent.New(agent.Config{Branch: "main", RequireReviewedPlan: true, Prefix: "fleet-agent"},
		agent.Options{Store: w.store, Repo: w.repo, Forge: agentForge{g}, Outbox: agentOutbox{w.box}, Clock: w.clk, Log: zerolog.New(w.log),
			LiveFor: func(*inventory.Snapshot) (plan.Live, apply.Checker) { return plan.Offline{}, c }})
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
