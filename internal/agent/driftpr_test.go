package agent_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// driftWorld is a world whose applied document is the odd-looking file of
// testdata/drift, with drift proposals on and reviewed plans required: the
// bootstrap is proposed on a branch, then merged.
func driftWorld(t *testing.T, revert bool) (*world, string, []byte) {
	t.Helper()
	return driftWorldOf(t, revert, "testdata/drift/fleet.json")
}

// driftWorldOf is driftWorld with another applied document.
func driftWorldOf(t *testing.T, revert bool, path string) (*world, string, []byte) {
	t.Helper()
	w := newWorld(t, agent.Config{DriftPullRequests: true, RevertOnClose: revert, RequireReviewedPlan: true})
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// An empty document makes no calls, so it is followed unreviewed.
	w.commit(t, "main", `{"version":1}`, "empty")
	w.tick(t)
	tip := w.commit(t, "boot", string(file), "bootstrap")
	w.tick(t)
	w.remo.UpdateRef(t, "refs/heads/main", tip)
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != tip {
		t.Fatalf("not applied: %+v\n%s", ap, w.log)
	}
	return w, tip, file
}

func (w *world) edit(t *testing.T, kind inventory.Kind, name string, set map[string]any) {
	t.Helper()
	if err := apply.ApplyEdit(w.store, apply.Edit{Kind: kind, Name: name, Set: set, Who: "ops@box (uid 1000)"}); err != nil {
		t.Fatal(err)
	}
}

// drift writes a field the document cannot bring back (one a plan never
// lets change) to the state directly: edit refuses that now, but a state
// file from an agent before may hold it.
func (w *world) drift(t *testing.T, kind inventory.Kind, name, field string, v any) {
	t.Helper()
	statetest.SetSpec(t, w.store, kind, name, map[string]any{field: v})
}

func (w *world) driftCheck(t *testing.T) *localapi.DriftProposal {
	t.Helper()
	if err := w.agent.DriftCheck(t.Context()); err != nil {
		t.Fatalf("drift check: %v\n%s", err, w.log)
	}
	rec, err := w.agent.DriftProposalNow()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (w *world) branchExists(t *testing.T, branch string) bool {
	return w.remo.Git(t, "for-each-ref", "refs/heads/"+branch) != ""
}

func (w *world) drifted(t *testing.T) bool {
	var d *state.Drift
	_ = w.store.View(func(tx *state.Tx) (err error) { d, err = tx.Drift(); return })
	return d != nil && d.DriftHash != "" && d.Reported != ""
}

func TestDriftProposalKeptByMerge(t *testing.T) {
	w, tip, file := driftWorld(t, false)
	start := time.Now()
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	took := time.Since(start)
	if rec == nil || rec.State != "open" || rec.Base != tip || !strings.HasPrefix(rec.Branch, "fleet-agent/drift-") {
		t.Fatalf("no drift proposal: %+v\n%s", rec, w.log)
	}
	t.Logf("edit to drift proposal pushed: %v wall, 0 on the injected clock (one drift check)", took)
	if got := w.remo.Rev(t, "refs/heads/"+rec.Branch); got != rec.Head {
		t.Fatalf("branch at %s, record says %s", got, rec.Head)
	}
	if parent := w.remo.Rev(t, rec.Head+"^"); parent != tip {
		t.Fatalf("proposal's parent %s, want the tip %s", parent, tip)
	}
	after := w.remo.Git(t, "show", rec.Head+":fleet.json") + "\n"
	want := strings.Replace(string(file), `"vcpu": 16`, `"vcpu": 24`, 1)
	if after != want {
		t.Fatalf("the proposal's file is not the file with one value changed:\n%s", after)
	}
	diff := w.remo.Git(t, "diff", "--numstat", tip, rec.Head)
	if !strings.HasPrefix(diff, "1\t1\tfleet.json") {
		t.Fatalf("diff touches more than one line: %q", diff)
	}
	// A second edit rewrites the same proposal.
	w.edit(t, inventory.Pool, "gpu-fra", map[string]any{"policy": map[string]any{"disruptionBudget": 0.25, "maxNodes": 3}})
	rec2 := w.driftCheck(t)
	if rec2.Branch != rec.Branch || rec2.Head == rec.Head || rec2.Fields != 2 {
		t.Fatalf("second edit: %+v (first %+v)", rec2, rec)
	}
	if diff := w.remo.Git(t, "diff", "--numstat", tip, rec2.Head); !strings.HasPrefix(diff, "2\t2\tfleet.json") {
		t.Fatalf("diff after the second edit: %q", diff)
	}
	if n := strings.Count(w.remo.Git(t, "for-each-ref", "refs/heads/fleet-agent/"), "\n") + 1; n != 1 {
		t.Fatalf("%d agent branches", n)
	}
	// Seen by a poll: shown as a proposal, and planned with no calls.
	w.tick(t)
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if st.Drift == nil || st.Drift.Proposal == nil || st.Drift.Proposal.Branch != rec.Branch || st.Drift.Proposal.State != "open" {
		t.Fatalf("status does not show the drift proposal: %+v", st.Drift)
	}
	shown := false
	for _, p := range st.Proposals {
		shown = shown || strings.Contains(p.Ref, rec.Branch)
	}
	if !shown {
		t.Fatalf("the branch is not among status's proposals: %+v", st.Proposals)
	}
	calls := w.audit(t, "call")
	// Merged: main moves to the proposal's head.
	w.remo.UpdateRef(t, "refs/heads/main", rec2.Head)
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != rec2.Head {
		t.Fatalf("the merged proposal was not applied: %+v\n%s", ap, w.log)
	}
	if got := w.audit(t, "call"); got != calls {
		t.Fatalf("the merge made %d calls", got-calls)
	}
	rec3 := w.driftCheck(t)
	if rec3.State != "merged" || w.branchExists(t, rec.Branch) || w.drifted(t) {
		t.Fatalf("after the merge: %+v, branch kept %v, drifted %v\n%s", rec3, w.branchExists(t, rec.Branch), w.drifted(t), w.log)
	}
	if strings.Contains(w.log.String(), w.srv.Password) {
		t.Fatal("the git credential is in the log")
	}
}

func TestDriftProposalClosedReverts(t *testing.T) {
	w, _, _ := driftWorld(t, true)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	w.tick(t)
	if rec2 := w.driftCheck(t); !rec2.Seen {
		t.Fatalf("the poll did not see the branch: %+v", rec2)
	}
	// Closed: a person deletes the branch.
	w.remo.DeleteRef(t, "refs/heads/"+rec.Branch)
	w.tick(t)
	rec3 := w.driftCheck(t)
	if rec3.State != "reverted" {
		t.Fatalf("after close: %+v\n%s", rec3, w.log)
	}
	snap, _ := w.store.Snapshot()
	if o, _ := snap.ByName(inventory.Flavor, "gpu-fra/h100x1"); o.Spec["vcpu"] != int64(16) && o.Spec["vcpu"] != float64(16) {
		t.Fatalf("the fleet is not back: vcpu %v (%T)", o.Spec["vcpu"], o.Spec["vcpu"])
	}
	if w.audit(t, "heal") != 1 || w.branchExists(t, rec.Branch) {
		t.Fatalf("heals %d, branch kept %v", w.audit(t, "heal"), w.branchExists(t, rec.Branch))
	}
}

func TestDriftProposalClosedWithoutRevertStaysReported(t *testing.T) {
	w, _, _ := driftWorld(t, false)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	w.tick(t)
	w.driftCheck(t)
	w.remo.DeleteRef(t, "refs/heads/"+rec.Branch)
	w.tick(t)
	if rec2 := w.driftCheck(t); rec2.State != "closed" || rec2.Dismissed == "" {
		t.Fatalf("after close: %+v", rec2)
	}
	// The same drift is not proposed again, and it stays reported.
	if rec3 := w.driftCheck(t); rec3.State != "closed" || w.branchExists(t, rec.Branch) || !w.drifted(t) || w.audit(t, "heal") != 0 {
		t.Fatalf("reopened or reverted: %+v", rec3)
	}
}

func TestDriftProposalFollowsMainAndClosesWhenDriftClears(t *testing.T) {
	w, tip, file := driftWorld(t, false)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	// Main moves under it: a second site is pushed straight to main, so
	// it is refused (never reviewed) and the drift stays.
	moved := strings.Replace(string(file), `"region": "eu"} ]`, `"region": "eu"}, {"name":"tor","kind":"shared","region":"ca"} ]`, 1)
	w.work.Git(t, "checkout", "-B", "main", tip)
	w.work.Write(t, "fleet.json", moved)
	tip2 := w.work.CommitAll(t, "a second site")
	w.work.Push(t, "HEAD:refs/heads/main")
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != tip {
		t.Fatalf("main's move was applied: %+v\n%s", ap, w.log)
	}
	rec2 := w.driftCheck(t)
	if rec2.Branch != rec.Branch || rec2.Base != tip2 || w.remo.Rev(t, rec2.Head+"^") != tip2 {
		t.Fatalf("not rewritten onto the new tip: %+v", rec2)
	}
	// Written on the applied document, not on the refused tip's: the
	// proposal carries no change nobody reviewed (it undoes the second
	// site, in plain sight of its diff).
	if got, want := w.remo.Git(t, "show", rec2.Head+":fleet.json")+"\n", strings.Replace(string(file), `"vcpu": 16`, `"vcpu": 24`, 1); got != want {
		t.Fatalf("the proposal on a refused tip is not the applied file with the drift:\n%s", got)
	}
	// The drift clears by itself: the value is edited back.
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 16})
	rec3 := w.driftCheck(t)
	if rec3.State != "cleared" || w.branchExists(t, rec.Branch) {
		t.Fatalf("after the drift cleared: %+v\n%s", rec3, w.log)
	}
}

// A drift proposal keeps the fleet as it is: merged, its plan must make no
// call. Found from outside: after a second edit the poll planned the branch
// again (1 update) and that plan became the "reviewed" one, so a merge made
// to keep the first edit reverted the second; a proposal rebuilt on an
// unreviewed tip carried that tip's change in the same way. Such a merge is
// refused, and the agent rewrites the proposal.
func TestDriftKeepThatWouldCallIsRefused(t *testing.T) {
	w, _, _ := driftWorld(t, false)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" {
		t.Fatalf("no drift proposal: %+v\n%s", rec, w.log)
	}
	w.tick(t) // the branch is planned: no calls
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 12})
	w.tick(t) // planned again: now one update back to 24
	calls := w.audit(t, "call")
	w.remo.UpdateRef(t, "refs/heads/main", rec.Head)
	w.tick(t)
	if ap := w.applied(t); ap != nil && ap.Commit == rec.Head {
		t.Fatalf("a keep merge whose plan makes calls was applied\n%s", w.log)
	}
	if got := w.audit(t, "call"); got != calls {
		t.Fatalf("%d provider calls made by a keep merge", got-calls)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Refused) != 1 || st.Refused[0].Commit != rec.Head || !strings.Contains(st.Refused[0].Reason, "drift proposal") {
		t.Fatalf("refused %+v, want the keep merge refused as a drift proposal that moved", st.Refused)
	}
}

// A field the document leaves out has its default (document.md: "its
// default when left out"; a field without one is absent), so a hand edit
// that sets a template's userData or maxTtlSeconds is drift, and keeping
// it writes the fields into the template.
func TestDriftOfTemplateFieldsTheDocumentLeavesOut(t *testing.T) {
	w, _, _ := driftWorldOf(t, false, "testdata/drift/template.json")
	w.edit(t, inventory.SandboxTemplate, "py", map[string]any{"userData": "#cloud-config\n", "maxTtlSeconds": 7200})
	rec := w.driftCheck(t)
	if !w.drifted(t) {
		t.Fatalf("a template edit of fields the document leaves out is not drift\n%s", w.log)
	}
	if rec == nil || rec.State != "open" || rec.Fields != 2 || rec.Unwritten != 0 {
		t.Fatalf("drift proposal %+v, want 2 fields written", rec)
	}
	after := w.remo.Git(t, "show", rec.Head+":fleet.json")
	doc, errs := fleet.Validate("proposal", []byte(after))
	if errs != nil {
		t.Fatalf("the proposal does not validate: %v\n%s", errs, after)
	}
	if tp := doc.SandboxTemplates[0]; tp.MaxTTLSeconds == nil || *tp.MaxTTLSeconds != 7200 || tp.UserData == nil || *tp.UserData != "#cloud-config\n" {
		t.Fatalf("the proposal does not hold the edit:\n%s", after)
	}
	snap, err := w.store.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if p := plan.Make(doc, snap, plan.Options{}); !p.Empty() || p.Blocked() {
		t.Fatalf("the proposal's document still plans %s", p.Summary.Counts())
	}
}

// A dismissal is of the values that drifted: closing the proposal of
// vcpu 24 keeps 24 unproposed, but a later edit to 12 is a new drift and
// gets its own proposal.
func TestDriftDismissalIsOfTheDriftedValues(t *testing.T) {
	w, _, _ := driftWorld(t, false)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	w.tick(t)
	w.driftCheck(t)
	w.remo.DeleteRef(t, "refs/heads/"+rec.Branch)
	w.tick(t)
	if rec2 := w.driftCheck(t); rec2.State != "closed" {
		t.Fatalf("after close: %+v", rec2)
	}
	if rec3 := w.driftCheck(t); rec3.State != "closed" || w.branchExists(t, rec.Branch) {
		t.Fatalf("the dismissed values were proposed again: %+v", rec3)
	}
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 12})
	rec4 := w.driftCheck(t)
	if rec4.State != "open" || rec4.Branch == rec.Branch || !w.branchExists(t, rec4.Branch) {
		t.Fatalf("a drift to another value was not proposed: %+v (dismissed %s)\n%s", rec4, rec.Branch, w.log)
	}
	if got := w.remo.Git(t, "show", rec4.Head+":fleet.json"); !strings.Contains(got, `"vcpu": 12`) {
		t.Fatalf("the new proposal does not write vcpu 12:\n%s", got)
	}
}

// A drift the plan blocks (a template's runtime is fixed once created) is
// listed in the proposal as blocked, with its reason, and never written;
// the rest of the drift is.
func TestBlockedDriftIsListedInTheProposalNotWritten(t *testing.T) {
	w, _, _ := driftWorldOf(t, false, "testdata/drift/template.json")
	w.drift(t, inventory.SandboxTemplate, "py", "runtime", "kata")
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" || rec.Fields != 1 || rec.Unwritten != 1 {
		t.Fatalf("drift proposal %+v, want 1 written and 1 not", rec)
	}
	if got := w.remo.Git(t, "show", rec.Head+":fleet.json"); strings.Contains(got, "kata") || !strings.Contains(got, `"vcpu": 24`) {
		t.Fatalf("the proposal's file:\n%s", got)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	p := st.Drift.Proposal
	if p == nil || len(p.NotWritten) != 1 || !p.NotWritten[0].Blocked || p.NotWritten[0].Object != "sandboxTemplate py" ||
		!strings.Contains(p.NotWritten[0].Reason, "runtime cannot change once created") {
		t.Fatalf("status does not list the blocked drift: %+v", p)
	}
	if len(p.Values) != 1 || p.Values[0].Object != "flavor gpu-fra/h100x1" || p.Values[0].Field != "vcpu" ||
		p.Values[0].Document != "16" || p.Values[0].Fleet != "24" || !strings.Contains(p.Values[0].Source, "ops@box (uid 1000)") {
		t.Fatalf("status does not show the value written and its source: %+v", p.Values)
	}
}

// A blocked drift that comes while a proposal is open changes no byte of
// its file: the branch stays, and the description (status) lists it.
func TestBlockedDriftJoiningAnOpenProposalIsListed(t *testing.T) {
	w, _, _ := driftWorldOf(t, false, "testdata/drift/template.json")
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" || len(rec.NotWritten) != 0 {
		t.Fatalf("drift proposal %+v", rec)
	}
	w.drift(t, inventory.SandboxTemplate, "py", "runtime", "kata")
	rec2 := w.driftCheck(t)
	if rec2.Head != rec.Head || rec2.Unwritten != 1 || len(rec2.NotWritten) != 1 || !rec2.NotWritten[0].Blocked {
		t.Fatalf("after a blocked drift joined: %+v", rec2)
	}
}

// A branch a person deletes before any poll listed it is a close too: a
// poll that listed the refs after the push and did not find it says so.
// A check with no such poll yet keeps the proposal open.
func TestDriftBranchDeletedBeforeItWasSeenIsAClose(t *testing.T) {
	w, _, _ := driftWorld(t, false)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" || rec.Seen {
		t.Fatalf("drift proposal %+v", rec)
	}
	if rec2 := w.driftCheck(t); rec2.State != "open" {
		t.Fatalf("closed with no poll since the push: %+v", rec2)
	}
	w.remo.DeleteRef(t, "refs/heads/"+rec.Branch)
	w.clk.Advance(time.Second)
	w.tick(t)
	rec3 := w.driftCheck(t)
	if rec3.State != "closed" || rec3.Dismissed == "" {
		t.Fatalf("a branch deleted before it was seen is not a close: %+v\n%s", rec3, w.log)
	}
}

// A drift the policy would deny, were it proposed, is not written either:
// merged, a keep plans no call, so the policy would never see it. It is
// listed as blocked, with the rule's message.
func TestDriftThePolicyDeniesIsListedNotWritten(t *testing.T) {
	w := newWorld(t, agent.Config{DriftPullRequests: true, RequireReviewedPlan: true, PolicyPath: "policy.yaml"})
	file, err := os.ReadFile("testdata/drift/fleet.json")
	if err != nil {
		t.Fatal(err)
	}
	w.commit(t, "main", `{"version":1}`, "empty")
	w.tick(t)
	w.work.Write(t, "policy.yaml", "rules:\n  - {name: small-flavors, match: {kinds: [flavor]}, expression: \"change.after.vcpu > 20\", action: deny, message: \"'at most 20 vCPUs'\"}\n")
	tip := w.commit(t, "boot", string(file), "bootstrap")
	w.tick(t)
	w.remo.UpdateRef(t, "refs/heads/main", tip)
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != tip {
		t.Fatalf("not applied: %+v\n%s", ap, w.log)
	}
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	w.edit(t, inventory.Pool, "gpu-fra", map[string]any{"policy": map[string]any{"disruptionBudget": 0.25, "maxNodes": 3}})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" || rec.Fields != 1 || len(rec.NotWritten) != 1 {
		t.Fatalf("drift proposal %+v, want the pool's value written and the flavor's not\n%s", rec, w.log)
	}
	if got := w.remo.Git(t, "show", rec.Head+":fleet.json"); strings.Contains(got, `"vcpu": 24`) || !strings.Contains(got, `"maxNodes":3`) {
		t.Fatalf("the proposal's file:\n%s", got)
	}
	if n := rec.NotWritten[0]; !n.Blocked || n.Object != "flavor gpu-fra/h100x1" || !strings.Contains(n.Reason, "at most 20 vCPUs") {
		t.Fatalf("not written: %+v", n)
	}
}

// The drift branch is the agent's: a commit someone else adds on it (here a
// file beside the document, as a change of the policy would be) is not the
// agent's keep. Merged, it is refused as a drift proposal whose head the
// agent did not write, however empty its plan.
func TestForeignCommitOnTheDriftBranchIsRefused(t *testing.T) {
	w, _, _ := driftWorld(t, false)
	// A policy file is named: a commit that adds one needs review.
	w.agent.Reconfigure(func(c *agent.Config) { c.PolicyPath = "policy.yaml" })
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" {
		t.Fatalf("no drift proposal: %+v\n%s", rec, w.log)
	}
	w.work.Git(t, "fetch", "-q", "origin", rec.Branch)
	w.work.Git(t, "checkout", "-q", "-B", "sneak", "FETCH_HEAD")
	w.work.Write(t, "policy.yaml", "rules: []\n")
	foreign := w.work.CommitAll(t, "ride along on the drift branch")
	w.work.Push(t, "--force", "HEAD:refs/heads/"+rec.Branch)
	w.tick(t) // the branch is planned at the foreign head: no calls
	w.remo.UpdateRef(t, "refs/heads/main", foreign)
	w.tick(t)
	if ap := w.applied(t); ap != nil && ap.Commit == foreign {
		t.Fatalf("a foreign commit on the drift branch was applied as a keep\n%s", w.log)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Refused) != 1 || st.Refused[0].Commit != foreign || !strings.Contains(st.Refused[0].Reason, "the agent did not write") {
		t.Fatalf("refused %+v, want the merge refused as a drift branch with a foreign head", st.Refused)
	}
}

// Removing a whole nested object by hand (edit pool gpu-fra policy=null)
// is written as the removal of the member, not as an emptied object the
// plan still reads as a change: the proposal's document plans no call,
// and a poll with nothing new never moves the branch (no empty commit).
func TestDriftRemovingANestedObjectRemovesTheMember(t *testing.T) {
	w, tip, _ := driftWorld(t, false)
	w.edit(t, inventory.Pool, "gpu-fra", map[string]any{"policy": nil})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" || rec.Fields != 1 {
		t.Fatalf("drift proposal %+v\n%s", rec, w.log)
	}
	after := w.remo.Git(t, "show", rec.Head+":fleet.json")
	if strings.Contains(after, `"policy"`) {
		t.Fatalf("the removed object is still in the proposal:\n%s", after)
	}
	doc, errs := fleet.Validate("proposal", []byte(after))
	if errs != nil {
		t.Fatalf("the proposal does not validate: %v\n%s", errs, after)
	}
	snap, err := w.store.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if p := plan.Make(doc, snap, plan.Options{}); !p.Empty() || p.Blocked() {
		t.Fatalf("the proposal's document still plans %s: %s", p.Summary.Counts(), strings.Join(p.TextLines(false), " | "))
	}
	if n := strings.Count(w.remo.Git(t, "log", "--format=%H", tip+".."+rec.Head), "\n") + 1; n != 1 {
		t.Fatalf("%d commits on the proposal", n)
	}
	// Nothing new: the branch head stays where it is, check after check.
	w.tick(t)
	for range 3 {
		w.clk.Advance(time.Minute)
		if again := w.driftCheck(t); again.Head != rec.Head || w.remo.Rev(t, "refs/heads/"+rec.Branch) != rec.Head {
			t.Fatalf("the branch moved with nothing new: %s -> %+v", rec.Head, again)
		}
		w.tick(t)
	}
	// Merged, it applies with no call.
	calls := w.audit(t, "call")
	w.remo.UpdateRef(t, "refs/heads/main", rec.Head)
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != rec.Head || w.audit(t, "call") != calls {
		t.Fatalf("the merge was not applied without a call: %+v\n%s", ap, w.log)
	}
}

// A merge of the proposal that is refused (the fleet moved again before
// it) applies nothing, so the proposal is not merged: it stays open, its
// branch kept, status says the merge was refused, and the next check
// rewrites it on the refused tip with the fleet as it now is; merged
// again, it applies without a call. A check with nothing new moves nothing.
func TestRefusedKeepMergeLeavesTheProposalOpen(t *testing.T) {
	w, _, file := driftWorld(t, false)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	w.tick(t)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 12})
	w.tick(t)
	w.remo.UpdateRef(t, "refs/heads/main", rec.Head)
	w.tick(t)
	if ap := w.applied(t); ap != nil && ap.Commit == rec.Head {
		t.Fatalf("the stale keep was applied\n%s", w.log)
	}
	rec2 := w.driftCheck(t)
	if rec2.State != "open" || !w.branchExists(t, rec.Branch) || !strings.Contains(rec2.MergeRefused, "refused") {
		t.Fatalf("a refused merge ended the proposal: %+v\n%s", rec2, w.log)
	}
	if rec2.Head == rec.Head || w.remo.Rev(t, rec2.Head+"^") != rec.Head || w.remo.Rev(t, "refs/heads/"+rec.Branch) != rec2.Head {
		t.Fatalf("not rewritten on the refused tip: %+v (was %s)", rec2, rec.Head)
	}
	if got, want := w.remo.Git(t, "show", rec2.Head+":fleet.json")+"\n", strings.Replace(string(file), `"vcpu": 16`, `"vcpu": 12`, 1); got != want {
		t.Fatalf("the rewritten proposal:\n%s", got)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Drift.Proposal; p == nil || p.State != "open" || !strings.Contains(p.MergeRefused, rec.Head[:12]) {
		t.Fatalf("status does not say the merge was refused: %+v", p)
	}
	w.tick(t)
	for range 2 {
		if again := w.driftCheck(t); again.Head != rec2.Head {
			t.Fatalf("the branch moved with nothing new: %+v", again)
		}
		w.tick(t)
	}
	calls := w.audit(t, "call")
	w.remo.UpdateRef(t, "refs/heads/main", rec2.Head)
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != rec2.Head || w.audit(t, "call") != calls {
		t.Fatalf("the rewritten keep was not applied without a call: %+v\n%s", ap, w.log)
	}
	if rec3 := w.driftCheck(t); rec3.State != "merged" || w.branchExists(t, rec.Branch) || w.drifted(t) {
		t.Fatalf("after the merge: %+v", rec3)
	}
}

// A refused tip that changes more than fleet.json (here a file beside it)
// is not built on: the proposal would carry that change. The proposal
// stays where it is and status says why.
func TestDriftProposalWaitsOnARefusedTipWithOtherFiles(t *testing.T) {
	w, tip, file := driftWorld(t, false)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24})
	rec := w.driftCheck(t)
	w.work.Git(t, "checkout", "-B", "main", tip)
	w.work.Write(t, "fleet.json", strings.Replace(string(file), `"memoryGiB":128`, `"memoryGiB":256`, 1))
	w.work.Write(t, "notes.txt", "a change nobody reviewed\n")
	tip2 := w.work.CommitAll(t, "two files")
	w.work.Push(t, "HEAD:refs/heads/main")
	w.tick(t)
	rec2 := w.driftCheck(t)
	if rec2.Head != rec.Head || w.remo.Rev(t, "refs/heads/"+rec.Branch) != rec.Head {
		t.Fatalf("the proposal was rebuilt on a refused tip with other files: %+v", rec2)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Drift.Proposal; p == nil || !strings.Contains(p.Waiting, tip2[:12]) || !strings.Contains(p.Waiting, "other than fleet.json") {
		t.Fatalf("status does not say why the proposal waits: %+v", p)
	}
}

// policyDriftWorld is driftWorld with a policy that denies flavors of
// more than 20 vCPUs.
func policyDriftWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t, agent.Config{DriftPullRequests: true, RequireReviewedPlan: true, PolicyPath: "policy.yaml"})
	file, err := os.ReadFile("testdata/drift/fleet.json")
	if err != nil {
		t.Fatal(err)
	}
	w.commit(t, "main", `{"version":1}`, "empty")
	w.tick(t)
	w.work.Write(t, "policy.yaml", "rules:\n  - {name: small-flavors, match: {kinds: [flavor]}, expression: \"change.after.vcpu > 20\", action: deny, message: \"'at most 20 vCPUs'\"}\n")
	tip := w.commit(t, "boot", string(file), "bootstrap")
	w.tick(t)
	w.remo.UpdateRef(t, "refs/heads/main", tip)
	w.tick(t)
	if ap := w.applied(t); ap == nil || ap.Commit != tip {
		t.Fatalf("not applied: %+v\n%s", ap, w.log)
	}
	return w
}

// The policy's denial is per field: the allowed fields of an object are
// written, the denied one is listed as blocked with the rule's message.
// When the drift comes to hold only denied values, the open proposal is
// closed (its branch deleted) and status says why, with the denial.
func TestDriftDeniedFieldLeavesTheObjectsOtherFields(t *testing.T) {
	w := policyDriftWorld(t)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24, "memoryGiB": 256})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" || rec.Fields != 1 || len(rec.NotWritten) != 1 {
		t.Fatalf("drift proposal %+v, want memoryGiB written and vcpu not\n%s", rec, w.log)
	}
	if got := w.remo.Git(t, "show", rec.Head+":fleet.json"); strings.Contains(got, `"vcpu": 24`) || !strings.Contains(got, `"memoryGiB":256`) {
		t.Fatalf("the proposal's file:\n%s", got)
	}
	if n := rec.NotWritten[0]; !n.Blocked || n.Field != "vcpu" || !strings.Contains(n.Reason, "at most 20 vCPUs") {
		t.Fatalf("not written: %+v", n)
	}
	// Only the denied value is left: nothing can be written.
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"memoryGiB": 128})
	rec2 := w.driftCheck(t)
	if rec2.State != "none" || w.branchExists(t, rec.Branch) || len(rec2.Values) != 0 ||
		!strings.Contains(rec2.Waiting, "at most 20 vCPUs") || len(rec2.NotWritten) != 1 {
		t.Fatalf("a wholly unwritable drift left the proposal: %+v\n%s", rec2, w.log)
	}
	if !strings.Contains(w.log.String(), "at most 20 vCPUs") {
		t.Fatalf("the log does not say why no proposal stands\n%s", w.log)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Drift.Proposal; p == nil || p.State != "none" || !strings.Contains(p.Waiting, "at most 20 vCPUs") {
		t.Fatalf("status: %+v", p)
	}
	// The denied value put back: no drift, and nothing waits any more.
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 16})
	if rec3 := w.driftCheck(t); rec3.State != "cleared" || rec3.Waiting != "" {
		t.Fatalf("after the drift cleared: %+v", rec3)
	}
}

// A proposal that writes part of the drift and lists the rest as denied
// is not a keep: its plan puts the denied part back. Merged, it is
// refused for that (not as a proposal that moved), and nothing is called.
// (A part the plan blocks is refused as a blocked plan.)
func TestPartlyWrittenDriftProposalIsRefusedForWhatItLeavesOut(t *testing.T) {
	w := policyDriftWorld(t)
	w.edit(t, inventory.Flavor, "gpu-fra/h100x1", map[string]any{"vcpu": 24, "memoryGiB": 256})
	rec := w.driftCheck(t)
	if rec == nil || rec.State != "open" || rec.Unwritten != 1 || rec.Fields != 1 {
		t.Fatalf("drift proposal %+v", rec)
	}
	w.tick(t)
	calls := w.audit(t, "call")
	w.remo.UpdateRef(t, "refs/heads/main", rec.Head)
	w.tick(t)
	if ap := w.applied(t); ap != nil && ap.Commit == rec.Head {
		t.Fatalf("a partly written keep was applied\n%s", w.log)
	}
	if got := w.audit(t, "call"); got != calls {
		t.Fatalf("%d calls", got-calls)
	}
	st, err := agent.Status(w.store, "root")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Refused) != 1 || st.Refused[0].Commit != rec.Head || !strings.Contains(st.Refused[0].Reason, "leaves out 1 drift(s) it cannot write") {
		t.Fatalf("refused %+v", st.Refused)
	}
}
