package main

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/agent"
	"github.com/fleet-agent/fleet-agent/internal/forge/githubemu"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// The ways past the policy that a person with push access and a pull request
// could try, each end to end: a real git server, the GitHub emulator, the
// agent as the binary wires it, restarted over the same state file.

const (
	// prodApprovePolicy: every change of the prod account needs the
	// capacity team.
	prodApprovePolicy = `rules:
  - name: prod-needs-capacity
    match: {accounts: [prod]}
    expression: "true"
    action: approve
    approvers: [acme/capacity]
    message: "change.kind + ' ' + change.name + ' is in the prod account'"
`
	// prodFleetDoc: a prod pool of its own account, and a Kubernetes pool
	// whose account only its substrate names.
	prodFleetDoc = `{
  "version": 1,
  "sites": [{ "name": "fra", "kind": "shared", "region": "eu" }],
  "providerAccounts": [{ "name": "prod", "provider": "fake", "config": {} }],
  "pools": [
    { "name": "gpu-prod", "site": "fra", "class": "provider", "providerAccount": "prod" },
    { "name": "k8s-prod", "site": "fra", "class": "metal-host", "policy": { "substrate": { "kind": "kubernetes", "account": "prod",
      "cluster": { "create": { "location": "fake-east" } }, "flavors": [{ "name": "cpu", "machineType": "fake-cpu-4", "nodes": 1 }] } } }
  ]
}
`
	// leftOutDoc leaves gpu-prod out and adds a flavor on it.
	leftOutDoc = `{
  "version": 1,
  "sites": [{ "name": "fra", "kind": "shared", "region": "eu" }],
  "providerAccounts": [{ "name": "prod", "provider": "fake", "config": {} }],
  "pools": [
    { "name": "k8s-prod", "site": "fra", "class": "metal-host", "policy": { "substrate": { "kind": "kubernetes", "account": "prod",
      "cluster": { "create": { "location": "fake-east" } }, "flavors": [{ "name": "cpu", "machineType": "fake-cpu-4", "nodes": 1 }] } } }
  ],
  "flavors": [{ "pool": "gpu-prod", "name": "big", "vcpu": 32, "memoryGiB": 256, "diskGiB": 100, "gpus": 4 }]
}
`
	// noK8sDoc deletes the Kubernetes pool (with prune).
	noK8sDoc = `{
  "version": 1,
  "sites": [{ "name": "fra", "kind": "shared", "region": "eu" }],
  "providerAccounts": [{ "name": "prod", "provider": "fake", "config": {} }],
  "pools": [
    { "name": "gpu-prod", "site": "fra", "class": "provider", "providerAccount": "prod" }
  ]
}
`
)

// newProdWorld is a policy world whose fleet holds prodFleetDoc, applied
// through a pull request the capacity team approved.
func newProdWorld(t *testing.T, prune bool) (*ghWorld, string) {
	t.Helper()
	w := newChecksWorld(t)
	w.prune = prune
	w.policyPath = "policy.yaml"
	w.start()
	w.work.Git(t, "checkout", "-q", "-B", "main")
	w.work.Write(t, "policy.yaml", prodApprovePolicy)
	boot := w.push("main", emptyDoc, "an empty fleet and its policy")
	w.step()
	w.emu.AddTeamMember("acme", "capacity", "carol")
	head := w.openPR(1, boot, prodFleetDoc)
	w.gh.SubmitReview(1, githubemu.Review{User: "carol", State: "APPROVED"})
	w.step()
	w.merge(1, head)
	w.step()
	if ap := w.applied(); ap == nil || ap.Commit != head {
		t.Fatalf("the prod fleet is not applied: %+v\n%s", ap, w.log)
	}
	return w, head
}

// Bypass 1: a pull request that leaves a prod pool out of the document (no
// prune: the pool stays) and adds a flavor on it is of the prod account.
func TestPolicyAccountOfAPoolLeftOut(t *testing.T) {
	w, base := newProdWorld(t, false)
	head := w.openPR(2, base, leftOutDoc)
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "pending" || !strings.Contains(s.Description, "flavor gpu-prod/big is in the prod account") {
		t.Fatalf("policy status %+v, want pending on the flavor of the left-out prod pool\n%s", s, w.log)
	}
	w.merge(2, head)
	w.step()
	if ap := w.applied(); ap.Commit != base {
		t.Fatalf("a flavor on a prod pool left out of the document was applied without the capacity team: %s", ap.Commit)
	}
}

// Bypass 2: with prune, deleting a pool whose account only its substrate
// names is of that account.
func TestPolicyAccountOfASubstratePoolDeleted(t *testing.T) {
	w, base := newProdWorld(t, true)
	head := w.openPR(2, base, noK8sDoc)
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "pending" || !strings.Contains(s.Description, "pool k8s-prod is in the prod account") {
		t.Fatalf("policy status %+v, want pending on the delete of k8s-prod\n%s", s, w.log)
	}
	w.merge(2, head)
	w.step()
	if ap := w.applied(); ap.Commit != base {
		t.Fatalf("a prod substrate pool was deleted without the capacity team: %s", ap.Commit)
	}
}

// Bypass 3: a broken policy merged (an empty plan) and a restart: the last
// good policy is kept in the state, not only in memory, and keeps judging.
func TestPolicyInForceSurvivesARestart(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	w.work.Git(t, "checkout", "-q", "-B", "main", boot)
	w.work.Write(t, "policy.yaml", "rules:\n  - name: broken\n    expression: change.after.gpus >\n    action: deny\n")
	broken := w.openPR(2, boot, emptyDoc)
	w.step()
	w.merge(2, broken)
	w.step()
	if ap := w.applied(); ap.Commit != broken {
		t.Fatalf("the empty plan with a broken policy is not applied: %+v\n%s", ap, w.log)
	}
	w.start() // a restart (a deploy, a crash): nothing in memory survives
	next := w.openPR(3, broken, bigFlavorDoc)
	w.step()
	if s := w.lastStatus(next, "policy"); s.State != "failure" {
		t.Fatalf("after a restart the last good policy does not judge: %+v\n%s", s, w.log)
	}
	v, err := agent.Status(w.store, "root")
	if err != nil || v.Policy == nil || v.Policy.Commit != boot ||
		!strings.Contains(v.Policy.Problem, "the policy at "+broken[:12]+" does not compile") ||
		!strings.Contains(v.Policy.Problem, "the last good one, from "+boot[:12]+", judges plans until it is fixed") {
		t.Fatalf("status policy %+v %v", v.Policy, err)
	}
	w.merge(3, next)
	w.step()
	if ap := w.applied(); ap.Commit != broken {
		t.Fatalf("a 16-GPU flavor was applied after a restart: %s", ap.Commit)
	}

	// A state copy carries it: an agent on the copy judges by it too.
	cp := statetest.Open(t)
	if _, err := w.store.CopyTo(cp); err != nil {
		t.Fatal(err)
	}
	w.store = cp
	w.start()
	again := w.openPR(4, broken, strings.Replace(bigFlavorDoc, `"gpus": 16`, `"gpus": 12`, 1))
	w.step()
	if s := w.lastStatus(again, "policy"); s.State != "failure" {
		t.Fatalf("on a copy of the state the last good policy does not judge: %+v\n%s", s, w.log)
	}
}

// Bypass 4: a direct push that changes only the policy (an empty plan) is
// refused like any unreviewed change, with the adopt commands; the next pull
// request is still judged by the policy in force.
func TestPolicyDirectPushIsRefused(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	w.work.Git(t, "checkout", "-q", "-B", "main", boot)
	w.work.Write(t, "policy.yaml", "rules: []\n")
	pushed := w.push("main", emptyDoc, "drop every rule")
	w.step()
	w.clk.Advance(agent.MergeLinkGrace)
	w.step()
	if ap := w.applied(); ap.Commit != boot {
		t.Fatalf("a direct push of the policy was applied: %s\n%s", ap.Commit, w.log)
	}
	r, found := w.refusedOf(pushed)
	if !found || r.Code != "INVALID_STATE" || !strings.Contains(r.Reason, "it changes policy.yaml, and a change of the policy is applied only through a reviewed pull request") ||
		len(r.Adopt) != 2 || !strings.HasPrefix(r.Adopt[1], "fleet-agent apply --commit "+pushed+" --plan-hash ") {
		t.Fatalf("refusal %+v %v\n%s", r, found, w.log)
	}
	// Its plan by hand (the first adopt command) says that it changes the
	// policy: its calls do not.
	p, _, err := w.ag.PlanCommit(t.Context(), pushed)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := p.Render(&text, plan.Text, plan.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "this commit changes the policy file policy.yaml") {
		t.Errorf("plan --commit of a direct change of the policy does not say so:\n%s", text.String())
	}
	head := w.openPR(5, pushed, bigFlavorDoc)
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "failure" {
		t.Fatalf("the pull request after the push is not judged by the policy in force: %+v\n%s", s, w.log)
	}
	w.gh.ClosePR(5)

	// Adopted by hand with the printed commands, it is the policy.
	if _, _, err := w.ag.ApplyCommit(t.Context(), pushed, strings.TrimPrefix(r.Adopt[1], "fleet-agent apply --commit "+pushed+" --plan-hash "), "ops@box"); err != nil {
		t.Fatal(err)
	}
	head = w.openPR(6, pushed, bigFlavorDoc)
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "success" {
		t.Fatalf("the adopted policy does not judge: %+v\n%s", s, w.log)
	}
}

// A change of the policy through a reviewed pull request is applied, even
// when its plan is empty.
func TestPolicyChangeThroughAPullRequest(t *testing.T) {
	w, boot := newPolicyWorld(t, gpuCapPolicy)
	head := w.openPRWith(2, boot, emptyDoc, map[string]string{"policy.yaml": loosePolicy})
	w.step()
	w.merge(2, head)
	w.step()
	if ap := w.applied(); ap.Commit != head {
		t.Fatalf("a reviewed change of the policy is not applied: %+v\n%s", ap, w.log)
	}
	v, err := agent.Status(w.store, "root")
	if err != nil || v.Policy == nil || v.Policy.Commit != head {
		t.Fatalf("status policy %+v %v, want the policy of %s", v.Policy, err, head[:12])
	}
}

// The fleet-agent/policy status follows the reviews: success once an
// approver approves, pending again when the approval is dismissed or the
// approver leaves the team, at the next poll, without a push.
func TestPolicyStatusFollowsReviews(t *testing.T) {
	w, boot := newPolicyWorld(t, capacityPolicy)
	w.emu.AddTeamMember("acme", "capacity", "carol")
	head := w.openPR(1, boot, bigFlavorDoc)
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "pending" {
		t.Fatalf("policy status %+v", s)
	}
	w.gh.SubmitReview(1, githubemu.Review{User: "carol", State: "APPROVED"})
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "success" {
		t.Fatalf("approved: policy status %+v", s)
	}
	w.gh.DismissReview(1, "carol")
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "pending" {
		t.Fatalf("the approval was dismissed: policy status %+v, want pending", s)
	}
	if c := lastCheck(t, w, head, "policy"); c.Conclusion == "success" {
		t.Fatalf("the approval was dismissed: policy check %+v", c)
	}
	w.gh.SubmitReview(1, githubemu.Review{User: "carol", State: "APPROVED"})
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "success" {
		t.Fatalf("approved again: policy status %+v", s)
	}
	w.gh.SubmitReview(1, githubemu.Review{User: "carol", State: "CHANGES_REQUESTED"})
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "pending" {
		t.Fatalf("changes requested: policy status %+v, want pending", s)
	}
	w.gh.SubmitReview(1, githubemu.Review{User: "carol", State: "APPROVED"})
	w.step()
	w.emu.RemoveTeamMember("acme", "capacity", "carol")
	w.step()
	if s := w.lastStatus(head, "policy"); s.State != "pending" {
		t.Fatalf("the approver left the team: policy status %+v, want pending", s)
	}
	w.merge(1, head)
	w.step()
	if ap := w.applied(); ap.Commit != boot {
		t.Fatalf("applied on the approval of a former team member: %s", ap.Commit)
	}
}

// TestPolicyCheckWarns: policy check names a rule that can never match
// (letter case, a kind no change has; with --document, an account the
// document lacks) and still exits 0.
func TestPolicyCheckWarns(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "p.yaml", `rules:
  - {name: upper, match: {accounts: [Prod]}, expression: "true", action: deny}
  - {name: plural, expression: "change.kind == 'flavors'", action: deny}
  - {name: staging, match: {accounts: [staging]}, expression: "true", action: warn}
  - {name: fine, match: {accounts: [prod]}, expression: "true", action: warn}
`)
	doc := writeFile(t, dir, "fleet.json", prodFleetDoc)
	out, errs, code := cli(t, nil, "policy", "check", p, "--document", doc)
	if code != 0 || !strings.Contains(out, `warning: line 2: rule "upper": match.accounts "Prod" can never match`) ||
		!strings.Contains(out, `warning: line 3: rule "plural": the expression asks for change.kind == "flavors", which no change has`) ||
		!strings.Contains(out, `warning: line 4: rule "staging": match.accounts "staging" is not a provider account of the document (it has prod)`) ||
		strings.Contains(out, `rule "fine"`) || !strings.Contains(out, "4 rule(s) compile.") {
		t.Fatalf("policy check: %d\n%s\n%s", code, out, errs)
	}
}
