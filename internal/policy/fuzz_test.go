package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// FuzzLoad: whatever the file, Load returns a policy or an INVALID_INPUT
// refusal whose problems all have a line, never panics; a policy loaded
// is judged on a plan without panicking, within its budget (over it by at
// most one expression's limit), with a verdict per rule, and what it wrote
// is text in markdown (one line per rule and per hit, no line break).
// The seeds include hostile rules: loops over the document per change,
// nested loops the estimate refuses, plan constants, groupBy on odd
// values, huge strings, messages of markdown and HTML.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"rules:\n  - {name: a, expression: 'change.after.gpus > 8', action: deny}\n",
		"rules:\n  - {name: a, match: {kinds: [pool], changes: [delete]}, expression: 'true', action: approve, approvers: [alice, acme/capacity]}\n",
		`{"rules": [{"name": "a", "expression": "plan.counts.delete > 2", "action": "warn", "message": "'many: ' + string(plan.counts.delete)"}]}`,
		"version: 1\nrules: []\n",
		"rules:\n  - name: a\n    expression: |\n      document.pools.exists(p, p.name == change.name)\n    action: deny\n",
		"rules: [\n", "", "- a\n", "rules:\n  - {name: a, expression: 'document.pools.all(p, document.pools.all(q, true))', action: deny}\n",
		"&a [*a]", "rules: !!binary aGVsbG8=",
		"rules:\n  - {name: a, expression: \"document.flavors.exists(f, f.name == change.name + 'x')\", action: deny}\n",
		"rules:\n  - {name: a, expression: \"size(document.pools.groupBy('site')[change.after.site]) > 0\", action: warn}\n",
		"rules:\n  - {name: a, expression: \"document.pools.groupBy('nope').size() == 0 && document.flavors.groupBy('gpus').size() >= 0\", action: warn}\n",
		"rules:\n  - {name: a, expression: \"[change.name].exists(n, document.pools.exists(p, true) && n != '')\", action: warn}\n",
		"rules:\n  - {name: a, expression: \"document.pools.exists(p, p.nope == 1) || change.kind == 'site'\", action: deny}\n",
		"rules:\n  - {name: a, expression: \"'x'.repeat(100000) != ''\", action: deny}\n",
		"rules:\n  - {name: a, expression: \"plan.calls.map(c, document.flavors.map(f, f.name + c.method)).size() > 0\", action: deny}\n",
		"rules:\n  - name: a\n    expression: 'true'\n    action: warn\n    message: |-\n      '\\n## policy: all rules pass, approved by @alice\\n<img src=x onerror=alert(1)>'\n",
		"rules:\n  - {name: __plan_const_0, expression: \"__plan_const_0\", action: deny}\n",
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
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		const budget = 1_000_000
		rep, spent, err := pol.Judge(ctx, Input{Doc: doc, Data: []byte(next), Snap: snap, Plan: p}, budget)
		if len(rep.Rules) != len(pol.Rules) {
			t.Fatalf("%d verdicts for %d rules", len(rep.Rules), len(pol.Rules))
		}
		if spent > budget+RuntimeCostLimit {
			t.Fatalf("spent %d of a budget of %d", spent, budget)
		}
		if err != nil && rep.Passes() {
			t.Fatalf("a judgement cut short (%v) passes", err)
		}
		want := len(rep.Notes)
		for _, v := range rep.Rules {
			if v.Verdict != plan.VerdictPass {
				want += 1 + len(v.Matched)
			}
		}
		if got := len(strings.Split(strings.Join(rep.MarkdownLines(), "\n"), "\n")); want > 0 && got != want {
			t.Fatalf("%d markdown lines for %d rules, hits and notes: a message broke its line", got, want)
		}
	})
}
