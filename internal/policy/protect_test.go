package policy

import (
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// A rule sees policy.substrate.protect as applied in change.before (present
// only when true) and as written in change.after: a rule can ask for an
// approver before a protected substrate is unprotected.
func TestProtectIsSeen(t *testing.T) {
	protected := strings.Replace(next, `"flavors": [{ "name": "l4"`, `"protect": true, "flavors": [{ "name": "l4"`, 1)
	if protected == next {
		t.Fatal("the test document has no substrate to protect")
	}
	cases := []struct {
		name, applied, doc, expr, want string
	}{
		{"unprotect", protected, next, `change.before.policy.substrate.?protect.orValue(false) && !change.after.policy.substrate.?protect.orValue(false)`, "update pool k8s"},
		{"protect", next, protected, `!has(change.before.policy.substrate.protect) && change.after.policy.substrate.protect`, "update pool k8s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol, err := Load([]byte("rules:\n  - name: r\n    match: {kinds: [pool]}\n    expression: \"" + c.expr + "\"\n    action: warn\n"))
			if err != nil {
				t.Fatal(err)
			}
			snap := FleetOf(document(t, c.applied), "root")
			doc := document(t, c.doc)
			p := plan.Make(doc, snap, plan.Options{Prune: true})
			rep := pol.Evaluate(Input{Doc: doc, Data: []byte(c.doc), Snap: snap, Plan: p})
			if got := hits(rep.Rules[0]); got != c.want {
				t.Errorf("matched %q, want %q", got, c.want)
			}
		})
	}
}
