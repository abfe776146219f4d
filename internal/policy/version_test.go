package policy

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// versionFleet is one Kubernetes pool at a version.
func versionFleet(version string) string {
	return `{"version":1,"sites":[{"name":"lab","kind":"shared","region":"local"}],
  "providerAccounts":[{"name":"prod","provider":"fake","config":{}}],
  "pools":[{"name":"k8s","site":"lab","class":"metal-host","gpuModel":"L4",
    "policy":{"substrate":{"kind":"kubernetes","account":"prod","cluster":{"create":{"location":"fake-east","version":"` + version + `"}},
      "flavors":[{"name":"l4","machineType":"fake-l4x1","nodes":1}]}}}]}`
}

// TestPolicyReadsTheClusterVersion: a rule reads a cluster's version
// before and after, like any field of the document: an upgrade waits for
// its approvers with the versions in the message; the same version
// matches nothing.
func TestPolicyReadsTheClusterVersion(t *testing.T) {
	const rule = `rules:
  - name: upgrades
    match: {kinds: [pool], changes: [update]}
    expression: "change.before.?policy.?substrate.?cluster.?create.?version.orValue('') != change.after.?policy.?substrate.?cluster.?create.?version.orValue('')"
    action: approve
    approvers: [acme/platform]
    message: "change.name + ' Kubernetes ' + change.before.policy.substrate.cluster.create.version + ' -> ' + change.after.policy.substrate.cluster.create.version"
`
	pol, err := Load([]byte(rule))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	judge := func(from, to string) plan.RuleVerdict {
		snap := FleetOf(document(t, versionFleet(from)), "root")
		text := versionFleet(to)
		doc := document(t, text)
		p := plan.Make(doc, snap, plan.Options{})
		return pol.Evaluate(Input{Doc: doc, Data: []byte(text), Snap: snap, Plan: p}).Rules[0]
	}
	v := judge("1.33", "1.34")
	if v.Verdict != plan.VerdictApprove || hits(v) != "update pool k8s" || v.Message != "k8s Kubernetes 1.33 -> 1.34" {
		t.Errorf("an upgrade: %s %q matched %q", v.Verdict, v.Message, hits(v))
	}
	if v := judge("1.34", "1.34"); v.Verdict != plan.VerdictPass || len(v.Matched) != 0 {
		t.Errorf("no upgrade: %s matched %q", v.Verdict, hits(v))
	}
	if v := judge("1.33", "1.35"); !strings.HasSuffix(v.Message, "1.33 -> 1.35") {
		t.Errorf("two minors: %q", v.Message)
	}
}

// TestPolicyJudgesUpgradeHops: each hop of an upgrade is a change a rule
// names with changes: [upgrade] (or kinds: [substrate]); it reads the
// versions in change.before.version and change.after.version, the part in
// change.after.part, and is of its pool's account. A rule that names no
// changes is never run on a hop, so rules written for the document's
// objects do not break on the fields a hop lacks.
func TestPolicyJudgesUpgradeHops(t *testing.T) {
	const rules = `rules:
  - name: control-planes
    match: {changes: [upgrade], accounts: [prod]}
    expression: "change.kind == 'substrate' && change.after.part == 'control plane'"
    action: approve
    approvers: [acme/platform]
    message: "change.after.pool + ': ' + change.before.version + ' -> ' + change.after.version"
  - name: node-pools
    match: {kinds: [substrate], changes: [upgrade]}
    expression: "change.after.part == 'node pool' && change.after.flavor == 'l4'"
    action: warn
  - name: objects-only
    expression: "change.kind == 'substrate' || change.after.?gpus.orValue(0) > 100"
    action: deny
`
	pol, err := Load([]byte(rules))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	snap := FleetOf(document(t, versionFleet("1.32")), "root")
	text := versionFleet("1.34")
	doc := document(t, text)
	p := plan.Make(doc, snap, plan.Options{})
	rep := pol.Evaluate(Input{Doc: doc, Data: []byte(text), Snap: snap, Plan: p})
	cp, np, objs := rep.Rules[0], rep.Rules[1], rep.Rules[2]
	if want := "upgrade substrate k8s version 1.32 -> 1.33 (control plane), upgrade substrate k8s version 1.33 -> 1.34 (control plane)"; hits(cp) != want {
		t.Errorf("control planes matched %q, want %q", hits(cp), want)
	}
	if cp.Verdict != plan.VerdictApprove || !strings.HasPrefix(cp.Message, "k8s: 1.32 -> 1.33") {
		t.Errorf("control planes: %s %q", cp.Verdict, cp.Message)
	}
	if want := "upgrade substrate k8s version 1.32 -> 1.33 (node pool l4), upgrade substrate k8s version 1.33 -> 1.34 (node pool l4)"; hits(np) != want {
		t.Errorf("node pools matched %q, want %q", hits(np), want)
	}
	if objs.Verdict != plan.VerdictPass {
		t.Errorf("a rule naming no changes ran on a hop: %s %q", objs.Verdict, objs.Message)
	}
}
