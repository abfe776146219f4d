package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// On GitHub: a main that already holds a fleet is refused with the apply
// command (real commit prefix and hash) in its fleet-agent/apply status;
// adopted, a pull request is planned; a break-glass edit re-plans it, and
// its plan comment and status follow.
func TestBootstrapOnGitHub(t *testing.T) {
	w := newGHWorld(t)
	w.work.Git(t, "checkout", "-q", "-B", "main")
	boot := w.push("main", poolDoc, "the fleet as it is")
	w.step()
	w.clk.Advance(agent.MergeLinkGrace)
	w.step()
	p, _, err := w.ag.PlanCommit(t.Context(), boot)
	if err != nil {
		t.Fatal(err)
	}
	st := w.lastStatus(boot, "apply")
	want := "pushed directly; adopt: fleet-agent apply --commit " + boot[:12] + " --plan-hash " + p.PlanHash
	if st.State != "failure" || st.Description != want || utf8.RuneCountInString(st.Description) > 140 {
		t.Fatalf("apply status %+v, want %q", st, want)
	}
	if _, _, err := w.ag.ApplyCommit(t.Context(), boot, p.PlanHash, "ops@box"); err != nil {
		t.Fatal(err)
	}
	head := w.openPR(3, boot, pool8Doc)
	w.step()
	first := w.planComments(3)
	if len(first) != 1 || w.lastStatus(head, "plan").State != "success" {
		t.Fatalf("plan comment %+v, status %+v", first, w.lastStatus(head, "plan"))
	}
	w.clk.Advance(time.Minute)
	if err := apply.ApplyEdit(w.store, apply.Edit{Kind: inventory.Pool, Name: "vps", Set: map[string]any{"gpuModel": "L4"}, Who: "ops@box", Now: w.clk.Now}); err != nil {
		t.Fatal(err)
	}
	w.step()
	after := w.planComments(3)
	if len(after) != 1 || after[0].Body == first[0].Body || !strings.Contains(after[0].Body, "gpuModel") {
		t.Fatalf("the plan comment did not follow the edit:\nbefore %s\nafter %+v", first[0].Body, after)
	}
}
