package policy

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

// goldenPolicy has a rule of each verdict: one broken deny, warn and
// approve rule, and one that passes.
const goldenPolicy = `rules:
  - name: gpu-cap
    match: {kinds: [flavor]}
    expression: change.after.gpus > 8
    action: deny
    message: "change.name + ' asks for ' + string(change.after.gpus) + ' GPUs; at most 8 per flavor'"
  - name: spot-in-uninterruptible
    match: {kinds: [pool], changes: [create, update]}
    expression: "change.after.?policy.?substrate.?flavors.orValue([]).exists(f, f.?spot.orValue(false))"
    action: warn
    message: "'pool ' + change.name + ' has a Spot node pool'"
  - name: prune-needs-approval
    match: {kinds: [pool], changes: [delete]}
    expression: "true"
    action: approve
    approvers: [alice, acme/capacity]
    message: "'pool ' + change.name + ' is deleted by a prune'"
  - name: approved-accounts
    match: {kinds: [pool]}
    expression: "!(change.account in ['sim', 'prod'])"
    action: deny
`

// TestGoldenPolicy: the plan's JSON, text and comment carry each rule's
// verdict, message and matched changes.
func TestGoldenPolicy(t *testing.T) {
	rep := judged(t, goldenPolicy)
	rep.Source = "policy.yaml@0123456789abcdef0123456789abcdef01234567"
	snap := FleetOf(document(t, base), "root")
	p := plan.Make(document(t, next), snap, plan.Options{Prune: true})
	p.Policy = rep
	var js, txt bytes.Buffer
	if err := p.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteText(&txt, false); err != nil {
		t.Fatal(err)
	}
	md := p.Markdown(plan.MarkdownOptions{Marker: "<!-- fleet-agent:plan -->", Head: "0123456789abcdef0123456789abcdef01234567", Branch: "main"})
	for ext, got := range map[string][]byte{".txt": txt.Bytes(), ".json": js.Bytes(), ".md": []byte(md)} {
		golden.Check(t, filepath.Join("../../testdata/plans", "policy"+ext), got)
	}
}
