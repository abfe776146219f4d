package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/localapi"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// newPolicyWorld is a checks world whose agent judges plans by policy.yaml
// of the applied commit, booted on an empty fleet holding policy.
func newPolicyWorld(t *testing.T, policy string) (*ghWorld, string) {
	t.Helper()
	w := newChecksWorld(t)
	w.policyPath = "policy.yaml"
	w.start() // a restart with policy.path set
	w.work.Git(t, "checkout", "-q", "-B", "main")
	w.work.Write(t, "policy.yaml", policy)
	boot := w.push("main", emptyDoc, "an empty fleet and its policy")
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != boot {
		t.Fatalf("the boot commit is not applied: %+v\n%s", ap, w.log)
	}
	return w, boot
}

// openPRWith is openPR with more files than the document.
func (w *ghWorld) openPRWith(n int, base, doc string, files map[string]string) string {
	w.t.Helper()
	w.work.Git(w.t, "checkout", "-q", "-B", "pr"+strconv.Itoa(n), base)
	for name, text := range files {
		w.work.Write(w.t, name, text)
	}
	sha := w.push("pr"+strconv.Itoa(n), doc, "change "+strconv.Itoa(n))
	w.remo.UpdateRef(w.t, "refs/pull/"+strconv.Itoa(n)+"/head", sha)
	w.gh.OpenPR(githubemu.PR{Number: n, HeadSHA: sha, HeadRef: "pr" + strconv.Itoa(n), BaseRef: "main", User: "alice"})
	return sha
}

func (w *ghWorld) refusedOf(sha string) (localapi.Refused, bool) {
	var r localapi.Refused
	var found bool
	_ = w.store.View(func(tx *state.Tx) (err error) { found, err = tx.Get("refused", sha, &r); return })
	return r, found
}

const (
	gpuCapPolicy = `rules:
  - name: gpu-cap
    match: {kinds: [flavor], changes: [create, update]}
    expression: change.after.gpus > 8
    action: deny
    message: "change.name + ' asks for ' + string(change.after.gpus) + ' GPUs; at most 8'"
`
	loosePolicy = `rules:
  - name: gpu-cap
    match: {kinds: [flavor], changes: [create, update]}
    expression: change.after.gpus > 100
    action: deny
    message: "'at most 100 GPUs'"
`
	capacityPolicy = `rules:
  - name: capacity
    match: {kinds: [flavor]}
    expression: change.after.gpus > 8
    action: approve
    approvers: [acme/capacity]
    message: "change.name + ' asks for ' + string(change.after.gpus) + ' GPUs: the capacity team approves'"
`
	// bigFlavorDoc: one value a line, so the flavor's line is its own.
	bigFlavorDoc = `{
  "version": 1,
  "sites": [{ "name": "fra", "kind": "shared", "region": "eu" }],
  "pools": [{ "name": "gpu", "site": "fra", "class": "vps-host" }],
  "flavors": [
    { "pool": "gpu", "name": "small", "vcpu": 2, "memoryGiB": 4, "diskGiB": 40, "gpus": 1 },
    { "pool": "gpu", "name": "huge", "vcpu": 64, "memoryGiB": 512, "diskGiB": 100, "gpus": 16 }
  ]
}
`
)

// TestPolicyDenyOnGitHub: a pull request breaking a deny rule gets a
// failed fleet-agent/policy check annotated on the offending line and a
// failed status; merged anyway, it is not applied, refused with the rule's
// message the way other refusals are.
func TestPolicyDenyOnGitHub(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	head := w.openPR(1, boot, bigFlavorDoc)
	w.step()

	c := lastCheck(t, w, head, "policy")
	line, _ := lineOf(t, bigFlavorDoc, `"name": "huge"`)
	if c.Conclusion != "failure" || len(c.Annotations) != 1 {
		t.Fatalf("policy check: %+v\n%s", c, w.log)
	}
	if a := c.Annotations[0]; a.Path != "fleet.json" || a.StartLine != line || a.Level != "failure" || a.Message != "gpu/huge asks for 16 GPUs; at most 8" || a.Title != "deny: gpu-cap" {
		t.Errorf("annotation %+v, want line %d", a, line)
	}
	if s := w.lastStatus(head, "policy"); s.State != "failure" || s.Description != "denied by rule gpu-cap: gpu/huge asks for 16 GPUs; at most 8" {
		t.Errorf("policy status %+v", s)
	}
	if s := w.lastStatus(head, "plan"); s.State != "success" {
		t.Errorf("the plan itself is fine: %+v", s)
	}
	cm := w.planComments(1)
	if len(cm) != 1 || !strings.Contains(cm[0].Body, "### fleet-agent plan: denied by policy") ||
		!strings.Contains(cm[0].Body, "- **deny** `gpu-cap`: gpu/huge asks for 16 GPUs; at most 8") {
		t.Fatalf("plan comment: %+v", cm)
	}

	w.merge(1, head)
	w.step()
	if ap := w.applied(); ap.Commit != boot {
		t.Fatalf("a denied plan was applied: %s", ap.Commit)
	}
	r, found := w.refusedOf(head)
	if !found || r.Code != "PLAN_BLOCKED" || r.Reason != `policy rule "gpu-cap" (policy.yaml@`+boot[:12]+`) denies the plan: gpu/huge asks for 16 GPUs; at most 8` {
		t.Fatalf("refusal %+v %v\n%s", r, found, w.log)
	}
	if s := w.lastStatus(head, "apply"); s.State != "failure" || !strings.HasPrefix(s.Description, "not applied: policy rule") {
		t.Errorf("apply status %+v", s)
	}
}

// TestPolicyApproveOnGitHub: an approve rule is not met by an outsider's
// approval, and is by a team member's of the reviewed head; the status says
// who may approve, and the merged commit waits until then.
func TestPolicyApproveOnGitHub(t *testing.T) {
	w, boot := newPolicyWorld(t, capacityPolicy)
	w.emu.AddTeamMember("acme", "capacity", "carol")
	head := w.openPR(1, boot, bigFlavorDoc)
	w.gh.SubmitReview(1, githubemu.Review{User: "mallory", State: "APPROVED"})
	w.step()
	want := "awaiting approval by acme/capacity (rule capacity: gpu/huge asks for 16 GPUs: the capacity team approves)"
	if s := w.lastStatus(head, "policy"); s.State != "pending" || s.Description != want {
		t.Fatalf("policy status %+v", s)
	}
	if c := lastCheck(t, w, head, "policy"); len(c.Annotations) != 1 || c.Annotations[0].Level != "warning" {
		t.Errorf("policy check %+v", c)
	}
	// A waiting proposal is judged again at every poll: approved, its
	// status turns success without a push.
	other := w.openPR(2, boot, strings.Replace(bigFlavorDoc, `"gpus": 16`, `"gpus": 12`, 1))
	w.step()
	if s := w.lastStatus(other, "policy"); s.State != "pending" {
		t.Fatalf("policy status of #2 %+v", s)
	}
	w.gh.SubmitReview(2, githubemu.Review{User: "carol", State: "APPROVED"})
	w.step()
	if s := w.lastStatus(other, "policy"); s.State != "success" || !strings.Contains(s.Description, "1 approved") {
		t.Fatalf("policy status of #2 once approved %+v", s)
	}

	w.merge(1, head)
	w.step()
	if ap := w.applied(); ap.Commit != boot {
		t.Fatalf("applied on an outsider's approval: %s", ap.Commit)
	}
	if s := w.lastStatus(head, "apply"); s.State != "pending" || !strings.Contains(s.Description, "waiting for an approval of #1 at "+head[:12]+" by acme/capacity") {
		t.Fatalf("apply status %+v\n%s", s, w.log)
	}

	// An approval of an older head does not count either; carol's of the
	// reviewed head does.
	w.gh.SubmitReview(1, githubemu.Review{User: "carol", State: "APPROVED", CommitID: boot})
	w.step()
	if ap := w.applied(); ap.Commit != boot {
		t.Fatalf("applied on an approval of another head: %s", ap.Commit)
	}
	w.gh.SubmitReview(1, githubemu.Review{User: "carol", State: "APPROVED"})
	w.step()
	if ap := w.applied(); ap.Commit != head {
		t.Fatalf("a team member's approval did not let it apply: %+v\n%s", ap, w.log)
	}
}

// TestPolicyLooseningOnGitHub: a pull request that loosens the policy is
// judged by the applied one (its comment shows what the new one would say)
// and, merged, refused by it. A policy that does not compile, once applied,
// keeps the last good one judging and says so in status; the agent goes on.
func TestPolicyLooseningOnGitHub(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	head := w.openPRWith(1, boot, bigFlavorDoc, map[string]string{"policy.yaml": loosePolicy})
	w.step()
	if cm := w.planComments(1); len(cm) != 1 || !strings.Contains(cm[0].Body, "what the new one would say is being worked out apart from the loop") {
		t.Fatalf("plan comment before the proposed policy is judged: %+v", cm)
	}
	if err := w.ag.WaitProposed(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.step() // planned again with the proposed policy's verdict
	if s := w.lastStatus(head, "policy"); s.State != "failure" {
		t.Fatalf("the loosening pull request is not judged by the applied policy: %+v\n%s", s, w.log)
	}
	cm := w.planComments(1)
	if len(cm) != 1 || !strings.Contains(cm[0].Body, "this pull request changes policy.yaml: it is judged by the current policy; once applied, the new one would say 1 pass.") {
		t.Fatalf("plan comment: %+v", cm)
	}
	w.merge(1, head)
	w.step()
	if ap := w.applied(); ap.Commit != boot {
		t.Fatalf("the loosened policy let its own pull request apply: %s", ap.Commit)
	}

	// Deleting the policy does not escape it either.
	w.work.Git(t, "checkout", "-q", "-B", "pr9", boot)
	w.work.Git(t, "rm", "-q", "policy.yaml")
	drop := w.push("pr9", bigFlavorDoc, "drop the policy")
	w.remo.UpdateRef(t, "refs/pull/9/head", drop)
	w.gh.OpenPR(githubemu.PR{Number: 9, HeadSHA: drop, HeadRef: "pr9", BaseRef: "main", User: "alice"})
	w.step()
	if s := w.lastStatus(drop, "policy"); s.State != "failure" {
		t.Fatalf("a pull request deleting the policy escapes it: %+v", s)
	}
	if cm := w.planComments(9); len(cm) != 1 || !strings.Contains(cm[0].Body, "this pull request deletes policy.yaml: it is judged by the current policy") {
		t.Fatalf("plan comment of #9: %+v", cm)
	}
	w.gh.ClosePR(9)

	// A broken policy merged with an empty plan is applied; the last good
	// policy keeps judging.
	w.work.Git(t, "checkout", "-q", "-B", "main", boot)
	w.work.Write(t, "policy.yaml", "rules:\n  - name: broken\n    expression: change.after.gpus >\n    action: deny\n")
	broken := w.openPR(2, boot, emptyDoc)
	w.step()
	w.merge(2, broken)
	w.step()
	if ap := w.applied(); ap.Commit != broken {
		t.Fatalf("the empty plan with a broken policy is not applied: %+v\n%s", ap, w.log)
	}
	next := w.openPR(3, broken, bigFlavorDoc)
	w.step()
	if s := w.lastStatus(next, "policy"); s.State != "failure" {
		t.Fatalf("the last good policy does not judge: %+v\n%s", s, w.log)
	}
	v, err := agent.Status(w.store, "root")
	if err != nil || v.Policy == nil || v.Policy.Commit != boot ||
		!strings.Contains(v.Policy.Problem, "the policy at "+broken[:12]+" does not compile") ||
		!strings.Contains(v.Policy.Problem, "the last good one, from "+boot[:12]+", judges plans until it is fixed") {
		t.Fatalf("status policy %+v %v", v.Policy, err)
	}
}
