package policy

import (
	"errors"
	"fmt"
	"github.com/fleet-agent/fleet-agent/internal/textline"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// base is the fleet as it stands; next is the proposed document: the
// flavor small grows from 1 to 2 GPUs, a flavor huge of 16 GPUs and a pool
// k8s (a Kubernetes pool of the account prod with a Spot node pool) are
// added, and the pool old is left out (deleted when pruning).
const base = `{
  "version": 1,
  "sites": [{ "name": "lab", "kind": "shared", "region": "local" }],
  "providerAccounts": [{ "name": "sim", "provider": "fake", "config": {} },
                       { "name": "prod", "provider": "fake", "config": {} }],
  "pools": [
    { "name": "gpu", "site": "lab", "class": "provider", "providerAccount": "sim", "gpuModel": "L4",
      "ownerQuota": { "gpu": 8 } },
    { "name": "old", "site": "lab", "class": "provider", "providerAccount": "prod", "gpuModel": "L4" }
  ],
  "flavors": [{ "pool": "gpu", "name": "small", "vcpu": 4, "memoryGiB": 16, "diskGiB": 100, "gpus": 1 }]
}`

const next = `{
  "version": 1,
  "sites": [{ "name": "lab", "kind": "shared", "region": "local" }],
  "providerAccounts": [{ "name": "sim", "provider": "fake", "config": {} },
                       { "name": "prod", "provider": "fake", "config": {} }],
  "pools": [
    { "name": "gpu", "site": "lab", "class": "provider", "providerAccount": "sim", "gpuModel": "L4",
      "ownerQuota": { "gpu": 12 },
      "offers": [{ "tenant": "acme", "quota": { "gpu": 2 }, "priority": 5 }] },
    { "name": "k8s", "site": "lab", "class": "metal-host", "gpuModel": "L4",
      "policy": { "substrate": { "kind": "kubernetes", "account": "prod",
        "cluster": { "create": { "location": "fake-east" } },
        "flavors": [{ "name": "l4", "machineType": "fake-l4x1", "nodes": 1, "spot": true }] } } }
  ],
  "flavors": [
    { "pool": "gpu", "name": "small", "vcpu": 4, "memoryGiB": 16, "diskGiB": 100, "gpus": 2 },
    { "pool": "gpu", "name": "huge", "vcpu": 64, "memoryGiB": 512, "diskGiB": 100, "gpus": 16 }
  ]
}`

func document(t testing.TB, text string) *fleet.Document {
	t.Helper()
	d, errs := fleet.Validate("fleet.json", []byte(text))
	if len(errs) > 0 {
		t.Fatalf("test document: %v", errs)
	}
	return d
}

// judged plans next against base (pruning) and evaluates the policy.
func judged(t testing.TB, policy string) *plan.PolicyReport {
	t.Helper()
	pol, err := Load([]byte(policy))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	snap := FleetOf(document(t, base), "root")
	doc := document(t, next)
	p := plan.Make(doc, snap, plan.Options{Prune: true})
	return pol.Evaluate(Input{Doc: doc, Data: []byte(next), Snap: snap, Plan: p})
}

// hits are a rule's matched changes as "type kind name".
func hits(v plan.RuleVerdict) string {
	var s []string
	for _, h := range v.Matched {
		s = append(s, string(h.Type)+" "+string(h.Kind)+" "+h.Name)
	}
	return strings.Join(s, ", ")
}

// TestVariables holds each variable an expression sees to its value: a
// rule that holds only when the variable is right, matched changes listed.
func TestVariables(t *testing.T) {
	cases := []struct {
		name, match, expr, want string
	}{
		{"kind", ``, `change.kind == 'flavor'`, "create flavor gpu/huge, update flavor gpu/small"},
		{"name", ``, `change.name == 'gpu/huge'`, "create flavor gpu/huge"},
		{"type", `{kinds: [pool]}`, `change.type == 'delete'`, "delete pool old"},
		{"id is the derived id", `{kinds: [flavor]}`, `change.id.startsWith('flv_') && size(change.id) == 30`, "create flavor gpu/huge, update flavor gpu/small"},
		{"pointer", ``, `change.pointer == '/flavors/1'`, "create flavor gpu/huge"},
		{"line of the object", `{kinds: [flavor]}`, `change.line == 17`, "create flavor gpu/huge"},
		{"before of an update", `{kinds: [flavor]}`, `change.before != null && change.before.gpus == 1`, "update flavor gpu/small"},
		{"before is null on create", `{kinds: [flavor]}`, `change.before == null`, "create flavor gpu/huge"},
		{"after of a create", `{kinds: [flavor]}`, `change.after.gpus > 8`, "create flavor gpu/huge"},
		{"after is null on delete", `{changes: [delete]}`, `change.after == null`, "delete pool old"},
		{"fields", ``, `'gpus' in change.fields`, "update flavor gpu/small"},
		{"ownerQuota after", `{kinds: [ownerQuota]}`, `change.after.max == 12 && change.after.resource == 'gpu' && change.before.max == 8`, "update ownerQuota gpu:gpu"},
		{"offer after names its pool", `{kinds: [offer]}`, `change.after.pool == 'gpu' && change.after.tenant == 'acme'`, "create offer gpu -> acme"},
		{"account of a flavor is its pool's", `{kinds: [flavor]}`, `change.account == 'sim'`, "create flavor gpu/huge, update flavor gpu/small"},
		{"account of a substrate pool", `{kinds: [pool]}`, `change.account == 'prod'`, "create pool k8s, delete pool old"},
		{"plan counts", `{kinds: [pool]}`, `plan.counts.create >= 3 && plan.counts.delete == 1`, "update pool gpu, create pool k8s, delete pool old"},
		{"plan calls", `{kinds: [pool], changes: [delete]}`, `plan.calls.exists(c, c.method == 'pools.archive')`, "delete pool old"},
		{"document", `{kinds: [pool], changes: [create]}`, `document.pools.exists(p, p.name == change.name && has(p.policy.substrate))`, "create pool k8s"},
		{"optional field", `{kinds: [pool], changes: [create]}`, `change.after.?policy.?substrate.?flavors.orValue([]).exists(f, f.?spot.orValue(false))`, "create pool k8s"},
		{"unchanged only when named", `{kinds: [site], changes: [unchanged]}`, `true`, "unchanged site lab"},
		{"account match", `{accounts: [prod]}`, `true`, "create pool k8s, delete pool old"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			match := ""
			if c.match != "" {
				match = "\n    match: " + c.match
			}
			rep := judged(t, "rules:\n  - name: r"+match+"\n    expression: \""+c.expr+"\"\n    action: warn\n")
			if got := hits(rep.Rules[0]); got != c.want {
				t.Errorf("matched %q, want %q", got, c.want)
			}
		})
	}
}

// TestActions: each action's verdict, message and what blocks.
func TestActions(t *testing.T) {
	cases := []struct {
		name, rule   string
		verdict      plan.RuleOutcome
		message      string
		passes, deny bool
	}{
		{"deny", `{name: gpu-cap, match: {kinds: [flavor]}, expression: "change.after.gpus > 8", action: deny,
		  message: "change.name + ' asks ' + string(change.after.gpus) + ' GPUs; the cap is 8'"}`,
			plan.VerdictDeny, "gpu/huge asks 16 GPUs; the cap is 8", false, true},
		{"warn", `{name: gpu-cap, match: {kinds: [flavor]}, expression: "change.after.gpus > 8", action: warn}`,
			plan.VerdictWarn, `flavor gpu/huge breaks rule "gpu-cap"`, true, false},
		{"approve", `{name: prune, match: {kinds: [pool], changes: [delete]}, expression: "true", action: approve, approvers: [alice, acme/capacity]}`,
			plan.VerdictApprove, `pool old breaks rule "prune"`, false, false},
		{"pass", `{name: gpu-cap, expression: "change.kind == 'flavor' && change.after.gpus > 100", action: deny}`,
			plan.VerdictPass, "", true, false},
		{"message of many", `{name: flavors, match: {kinds: [flavor]}, expression: "true", action: warn, message: "'flavor ' + change.name"}`,
			plan.VerdictWarn, "flavor gpu/huge (and 1 more)", true, false},
		{"a failing expression breaks the rule", `{name: f, match: {kinds: [site], changes: [unchanged]}, expression: "change.after.nope == 1", action: deny}`,
			plan.VerdictDeny, "the rule's expression failed on site lab: no such key: nope (it counts as broken; use has() or ?. for fields a change may lack)", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := judged(t, "rules:\n  - "+c.rule+"\n")
			v := rep.Rules[0]
			if v.Verdict != c.verdict || v.Message != c.message {
				t.Errorf("verdict %q message %q, want %q %q", v.Verdict, v.Message, c.verdict, c.message)
			}
			if rep.Passes() != c.passes || rep.Denied() != c.deny {
				t.Errorf("passes %v denied %v, want %v %v", rep.Passes(), rep.Denied(), c.passes, c.deny)
			}
		})
	}
}

// TestApprove: an approve rule waits until Approve is told of an approver.
func TestApprove(t *testing.T) {
	rep := judged(t, "rules:\n  - {name: prune, match: {changes: [delete]}, expression: 'true', action: approve, approvers: [alice, acme/capacity]}\n")
	if len(rep.Awaiting()) != 1 || rep.Passes() {
		t.Fatalf("awaiting %v", rep.Awaiting())
	}
	isMember := func(org, team, login string) (bool, error) {
		return org == "acme" && team == "capacity" && login == "carol", nil
	}
	for _, c := range []struct {
		approvers []string
		want      string
	}{
		{[]string{"mallory"}, ""},
		{[]string{"Alice"}, "alice"},
		{[]string{"mallory", "carol"}, "carol (acme/capacity)"},
	} {
		r := *rep
		r.Rules = append([]plan.RuleVerdict(nil), rep.Rules...)
		if err := MarkApproved(&r, c.approvers, isMember); err != nil {
			t.Fatal(err)
		}
		if r.Rules[0].Approved != c.want || r.Passes() != (c.want != "") {
			t.Errorf("approvals by %v: approved %q passes %v, want %q", c.approvers, r.Rules[0].Approved, r.Passes(), c.want)
		}
	}
	boom := errors.New("boom")
	r := *rep
	r.Rules = append([]plan.RuleVerdict(nil), rep.Rules...)
	if err := MarkApproved(&r, []string{"carol"}, func(string, string, string) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("a failing membership read: %v", err)
	}
}

// TestLoadProblems: each problem a file can have is refused at its line.
func TestLoadProblems(t *testing.T) {
	cases := []struct{ name, file, want string }{
		{"syntax", "rules:\n  - name: a\n    expression: \"change.kind ==\"\n    action: deny\n", `line 3: rule "a": expression, column 15: Syntax error`},
		{"block scalar", "rules:\n  - name: a\n    action: deny\n    expression: |\n      true &&\n      nope\n", `line 6: rule "a": expression, column 1: undeclared reference to 'nope'`},
		{"not a bool", "rules:\n  - name: a\n    expression: \"'x'\"\n    action: deny\n", `line 3: rule "a": expression gives string; it must give bool`},
		{"message not a string", "rules:\n  - name: a\n    expression: 'true'\n    message: '1'\n    action: deny\n", `line 4: rule "a": message gives int; it must give string`},
		{"cost", "rules:\n  - name: a\n    expression: \"document.pools.all(p, document.pools.all(q, document.flavors.all(f, p.name != f.pool)))\"\n    action: deny\n", `line 3: rule "a": expression may cost up to`},
		{"unknown action", "rules:\n  - {name: a, expression: 'true', action: block}\n", `line 2: rule "a": action "block" is not deny, warn or approve`},
		{"approve without approvers", "rules:\n  - {name: a, expression: 'true', action: approve}\n", `line 2: rule "a": an approve rule names its approvers`},
		{"approvers on deny", "rules:\n  - {name: a, expression: 'true', action: deny, approvers: [bob]}\n", `approvers are for an approve rule`},
		{"bad approver", "rules:\n  - {name: a, expression: 'true', action: approve, approvers: ['not a login']}\n", `approvers: "not a login" is not a GitHub login or an org/team slug`},
		{"unknown kind", "rules:\n  - {name: a, match: {kinds: [cluster]}, expression: 'true', action: deny}\n", `match.kinds: "cluster" is not one of providerAccount`},
		{"unknown change", "rules:\n  - {name: a, match: {changes: [archive]}, expression: 'true', action: deny}\n", `match.changes: "archive" is not one of create, update, delete, unchanged`},
		{"unknown field", "rules:\n  - {name: a, expresion: 'true', action: deny}\n", `unknown field "expresion"`},
		{"duplicate name", "rules:\n  - {name: a, expression: 'true', action: deny}\n  - {name: a, expression: 'true', action: deny}\n", `line 3: rule "a": a second rule of this name (the first is on line 2)`},
		{"no rules", "version: 1\n", `the policy has no "rules"`},
		{"version", "version: 2\nrules: []\n", `line 1: version must be 1`},
		{"not YAML", "rules: [\n", `neither YAML nor JSON`},
		{"JSON", `{"rules": [{"name": "a", "expression": "nope", "action": "deny"}]}`, `line 1: rule "a": expression, column 1: undeclared reference to 'nope'`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte(c.file))
			if err == nil {
				t.Fatal("loaded")
			}
			if refusal.CodeOf(err) != refusal.InvalidInput {
				t.Errorf("code %s", refusal.CodeOf(err))
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q\nwant it to hold %q", err, c.want)
			}
		})
	}
}

// TestLoadGood: a file of every field loads, JSON or YAML alike.
func TestLoadGood(t *testing.T) {
	yamlText := `# the capacity team's rules
version: 1
rules:
  - name: gpu-cap
    match: {kinds: [flavor], changes: [create, update], accounts: [sim]}
    expression: change.after.gpus > 8
    action: approve
    approvers: [alice, acme/capacity]
    message: "'at most 8 GPUs without capacity: ' + change.name"
`
	jsonText := `{"version": 1, "rules": [{"name": "gpu-cap", "match": {"kinds": ["flavor"], "changes": ["create", "update"], "accounts": ["sim"]},
 "expression": "change.after.gpus > 8", "action": "approve", "approvers": ["alice", "acme/capacity"],
 "message": "'at most 8 GPUs without capacity: ' + change.name"}]}`
	for _, text := range []string{yamlText, jsonText} {
		p, err := Load([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		r := p.Rules[0]
		if r.Name != "gpu-cap" || r.Action != Approve || len(r.Approvers) != 2 || len(r.Match.Accounts) != 1 || r.msg.prg == nil {
			t.Errorf("rule %+v", r)
		}
	}
}

// TestRuntimeCostLimit: an evaluation over the runtime limit is stopped
// and counts as broken, with a message that says so.
func TestRuntimeCostLimit(t *testing.T) {
	defer func(old uint64) { runtimeCostLimit = old }(runtimeCostLimit)
	runtimeCostLimit = 20
	rep := judged(t, "rules:\n  - {name: slow, match: {kinds: [site], changes: [unchanged]}, expression: \"plan.calls.all(c, c.method != '')\", action: warn}\n")
	if v := rep.Rules[0]; v.Verdict != plan.VerdictWarn || !strings.Contains(v.Message, "cost limit") {
		t.Errorf("verdict %s: %s", v.Verdict, v.Message)
	}
}

// TestImpliedSkipsNothing: a rule whose expression requires change.kind or
// change.type runs only on those changes, with the verdicts it has when it
// runs on all of them (errors included).
func TestImpliedSkipsNothing(t *testing.T) {
	for _, c := range []struct{ expr, implied string }{
		{`change.kind == 'flavor' && change.after.gpus > 8`, "[[flavor]] []"},
		{`change.after.gpus > 8 && change.kind == 'flavor'`, "[[flavor]] []"},
		{`'flavor' == change.kind && change.type == 'create'`, "[[flavor]] [[create]]"},
		{`change.type == 'delete' && (change.kind == 'pool' || change.after.nope == 1)`, "[] [[delete]]"},
		{`change.kind in ['flavor', 'pool'] && change.after.gpus > 8`, "[[flavor pool]] []"},
		{`change.kind in ['flavor', 'pool'] && change.type in ['create'] && change.kind == 'pool'`, "[[flavor pool] [pool]] [[create]]"},
		{`change.kind != 'flavor' && change.after.gpus > 8`, "[] []"},
		{`change.kind in [change.name] && change.after.gpus > 8`, "[] []"},
		{`change.kind == 'flavor' || change.kind == 'pool'`, "[] []"},
		{`!(change.kind == 'flavor') && change.after.gpus > 8`, "[] []"},
	} {
		text := "rules:\n  - name: r\n    expression: \"" + c.expr + "\"\n    action: warn\n"
		with := judged(t, text)
		pol, err := Load([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		r := pol.Rules[0]
		if got := fmt.Sprintf("%v %v", r.impliedKinds, r.impliedTypes); got != c.implied {
			t.Errorf("%s: implied %s, want %s", c.expr, got, c.implied)
		}
		r.impliedKinds, r.impliedTypes = nil, nil
		snap := FleetOf(document(t, base), "root")
		doc := document(t, next)
		without := pol.Evaluate(Input{Doc: doc, Data: []byte(next), Snap: snap, Plan: plan.Make(doc, snap, plan.Options{Prune: true})})
		if a, b := hits(with.Rules[0]), hits(without.Rules[0]); a != b || with.Rules[0].Message != without.Rules[0].Message {
			t.Errorf("%s: with implied %q, without %q", c.expr, a, b)
		}
	}
}

// TestTracked: an expression that reads in proportion to its input runs
// without the cost limit's tracking; one that loops over the document or
// the calls, or loops inside a loop, runs under it.
func TestTracked(t *testing.T) {
	for _, c := range []struct {
		expr    string
		tracked bool
	}{
		{`change.kind == 'flavor' && change.after.gpus > 8`, false},
		{`change.name.startsWith('pool-') || change.after.region.endsWith('-3')`, false},
		{`change.after.imageId in ['ubuntu-24.04', 'debian-12']`, false},
		{`size(document.pools) > 10 && plan.counts.create > 5`, false},
		{`'gpus' in change.fields`, true},
		{`document.pools.exists(p, p.name == change.name)`, true},
		{`plan.calls.all(c, c.method != '')`, true},
	} {
		pol, err := Load([]byte("rules:\n  - name: r\n    expression: \"" + c.expr + "\"\n    action: warn\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := pol.Rules[0].asWritten().expr.tracked; got != c.tracked {
			t.Errorf("%s: tracked %t, want %t", c.expr, got, c.tracked)
		}
	}
}

// TestMessagesAreOneLine: a rule's message quotes what a pull request author
// wrote, so control characters, separators and bidirectional overrides in
// it never reach a terminal, a log or the page. Found from outside: a deny
// message forged "refused: ..." lines in status and flipped text with
// U+202E.
func TestMessagesAreOneLine(t *testing.T) {
	rep := judged(t, "rules:\n  - {name: forge, match: {kinds: [flavor]}, expression: \"true\", action: warn, message: \"'ok\\\\napplied: plan 000\\\\r\\\\u001b[2J \\\\u202egnp.exe \\\\u2028x\\\\u2066y'\"}\n")
	v := rep.Rules[0]
	if len(v.Matched) == 0 {
		t.Fatal("the rule matched nothing")
	}
	for _, h := range v.Matched {
		if strings.ContainsAny(h.Message, "\n\r\x1b\u202e\u2028\u2066") {
			t.Fatalf("message %q carries a control character", h.Message)
		}
		if !strings.Contains(h.Message, "ok applied: plan 000") || !strings.Contains(h.Message, "[2J") {
			t.Fatalf("message %q lost its text", h.Message)
		}
	}
}

// TestRuleNamesArePlain: a rule's name is shown in every verdict, so a
// text-direction override or a control character in it is refused at load
// (found from outside: U+202E in a name reached status, plans and the page).
func TestRuleNamesArePlain(t *testing.T) {
	for _, name := range []string{"inj\u202erev", "a\u2066b", "a\u200fb"} {
		_, err := Load([]byte("rules:\n  - {name: \"" + name + "\", expression: \"true\", action: warn}\n"))
		if err == nil || !strings.Contains(err.Error(), "text-direction") {
			t.Errorf("name %q: %v, want refused", name, err)
		}
	}
	if _, err := Load([]byte("rules:\n  - {name: \"gpu cap (prod) \u00e9\", expression: \"true\", action: warn}\n")); err != nil {
		t.Errorf("a plain name with spaces and accents is refused: %v", err)
	}
}

// TestFailedRulesAreOneLine: an expression or a message that fails at run
// time names what failed, and CEL's error quotes the value (a map's missing
// key may be the document's text): the verdict's message is as plain as a
// message the rule wrote. Found from outside: `no such key: x\n...` forged a
// passing policy summary under a failed lookup.
func TestFailedRulesAreOneLine(t *testing.T) {
	const key = `'k\\n\\u001b[1;32mpolicy: 0 deny\\r\\u0085\\u2028\\u202ex'`
	for name, rule := range map[string]string{
		"expression": "{name: r, match: {kinds: [flavor]}, expression: \"{'a': true}[" + key + "]\", action: warn}",
		"message":    "{name: r, match: {kinds: [flavor]}, expression: \"true\", action: warn, message: \"'owner ' + {'a': 'b'}[" + key + "]\"}",
	} {
		t.Run(name, func(t *testing.T) {
			rep := judged(t, "rules:\n  - "+rule+"\n")
			v := rep.Rules[0]
			if len(v.Matched) == 0 {
				t.Fatal("the rule matched nothing")
			}
			for _, h := range v.Matched {
				if !textline.IsPlain(h.Message) || !strings.Contains(h.Message, "no such key") {
					t.Errorf("message %q is not one plain line naming the failure", h.Message)
				}
			}
		})
	}
}
