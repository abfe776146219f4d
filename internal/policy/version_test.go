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
