package policy

import (
	"errors"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// FuzzLoad: whatever the file, Load returns a policy or an INVALID_INPUT
// refusal whose problems all have a line, never panics; a policy loaded
// evaluates on a plan without panicking.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"rules:\n  - {name: a, expression: 'change.after.gpus > 8', action: deny}\n",
		"rules:\n  - {name: a, match: {kinds: [pool], changes: [delete]}, expression: 'true', action: approve, approvers: [alice, acme/capacity]}\n",
		`{"rules": [{"name": "a", "expression": "plan.counts.delete > 2", "action": "warn", "message": "'many: ' + string(plan.counts.delete)"}]}`,
		"version: 1\nrules: []\n",
		"rules:\n  - name: a\n    expression: |\n      document.pools.exists(p, p.name == change.name)\n    action: deny\n",
		"rules: [\n", "", "- a\n", "rules:\n  - {name: a, expression: 'document.pools.all(p, document.pools.all(q, true))', action: deny}\n",
		"&a [*a]", "rules: !!binary aGVsbG8=",
	} {
		f.Add([]byte(s))
	}
	doc := document(f, next)
	snap := FleetOf(document(f, base), "root")
	p := plan.Make(doc, snap, plan.Options{Prune: true})
	f.Fuzz(func(t *testing.T, data []byte) {
		pol, err := Load(data)
		if err != nil {
			if refusal.CodeOf(err) != refusal.InvalidInput {
				t.Fatalf("code %s: %v", refusal.CodeOf(err), err)
			}
			var ps Problems
			if errors.As(err, &ps) {
				for _, pr := range ps {
					if pr.Line <= 0 {
						t.Fatalf("a problem without a line: %v", pr)
					}
				}
			}
			return
		}
		rep := pol.Evaluate(Input{Doc: doc, Data: []byte(next), Snap: snap, Plan: p})
		if len(rep.Rules) != len(pol.Rules) {
			t.Fatalf("%d verdicts for %d rules", len(rep.Rules), len(pol.Rules))
		}
	})
}
