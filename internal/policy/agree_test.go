package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// randomDocument is a valid document of n pools drawn from r: pools of two
// classes (one with a provider account), owner quotas, offers, flavors and
// templates, with values that vary, so that a second draw against the first
// makes creates, updates and deletes.
func randomDocument(r *rand.Rand, n int) string {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[{"name":"lab","kind":"shared","region":"eu-1"},{"name":"edge","kind":"shared","region":"us-` +
		fmt.Sprint(r.IntN(3)) + `"}],"providerAccounts":[{"name":"sim","provider":"fake","config":{}},{"name":"prod","provider":"fake","config":{}}],"pools":[`)
	var pools []int
	for i := range n {
		if r.IntN(4) == 0 {
			continue
		}
		pools = append(pools, i)
	}
	for k, i := range pools {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
		site := []string{"lab", "edge"}[r.IntN(2)]
		model := []string{"L4", "H100", "A10"}[r.IntN(3)]
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, `{"name":"pool-%d","site":"%s","class":"provider","providerAccount":"%s","gpuModel":"%s"`,
				i, site, []string{"sim", "prod"}[r.IntN(2)], model)
		} else {
			fmt.Fprintf(&b, `{"name":"pool-%d","site":"%s","class":"metal-host","gpuModel":"%s","policy":{"uninterruptible":%t}`,
				i, site, model, r.IntN(2) == 0)
		}
		fmt.Fprintf(&b, `,"ownerQuota":{"gpu":%d,"vcpu":%d}`, r.IntN(16), 64*(1+r.IntN(4)))
		b.WriteString(`,"offers":[`)
		for j := range r.IntN(3) {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "\n"+`{"tenant":"tenant-%d","quota":{"gpu":%d},"priority":%d}`, j, r.IntN(4), r.IntN(30))
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`],"flavors":[`)
	first := true
	for _, i := range pools {
		for j := range r.IntN(3) {
			if !first {
				b.WriteByte(',')
			}
			first = false
			fmt.Fprintf(&b, "\n"+`{"pool":"pool-%d","name":"f%d","vcpu":%d,"memoryGiB":16,"diskGiB":100,"gpus":%d}`, i, j, 1+r.IntN(64), r.IntN(12))
		}
	}
	b.WriteString(`],"sandboxTemplates":[`)
	first = true
	for _, i := range pools {
		if r.IntN(3) != 0 {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "\n"+`{"name":"tpl-%d","pool":"pool-%d","flavor":"f0","imageId":"%s","defaultTtlSeconds":3600,"network":"private"}`,
			i, i, []string{"ubuntu-24.04", "debian-12"}[r.IntN(2)])
	}
	b.WriteString("]}\n")
	return b.String()
}

// agreeRules reach every variable and every way of reading one: the
// implied kinds and types, each match, before and after, the fields, the
// plan and the document, the change read whole, its line and id, errors
// (a missing field, a message that fails) and messages.
const agreeRules = `rules:
  - {name: gpus, match: {kinds: [flavor]}, expression: "change.after.gpus > 6", action: warn, message: "change.name + ' has ' + string(change.after.gpus)"}
  - {name: grew, match: {kinds: [flavor], changes: [update]}, expression: "change.after.gpus > change.before.gpus", action: approve, approvers: [acme/capacity]}
  - {name: implied, expression: "change.kind == 'offer' && change.type == 'create' && change.after.priority > 10", action: warn}
  - {name: missing, expression: "change.after.nope == 1", action: warn}
  - {name: missing-any, match: {changes: [create, update, delete, unchanged]}, expression: "change.after.gpuModel == 'H100'", action: deny}
  - {name: prod, match: {accounts: [prod]}, expression: "change.type != 'unchanged'", action: deny, message: "change.account + ': ' + change.kind + ' ' + change.name"}
  - {name: sim-pools, match: {kinds: [pool, flavor], accounts: [sim]}, expression: "'gpuModel' in change.fields || 'gpus' in change.fields", action: warn}
  - {name: deletes, match: {changes: [delete]}, expression: "plan.counts.delete > 2 && change.before != null", action: approve, approvers: [alice]}
  - {name: doc, match: {kinds: [pool]}, expression: "document.pools.exists(p, p.name == change.name && p.site == 'edge')", action: warn}
  - {name: whole, expression: "'after' in change && change['kind'] == 'ownerQuota' && change.size() == 12", action: warn}
  - {name: equal, expression: "change == change && change.line > 0", action: warn}
  - {name: ids, match: {kinds: [site, providerAccount]}, expression: "change.id.startsWith(change.kind == 'site' ? 'site_' : 'acct')", action: warn}
  - {name: optional, match: {kinds: [pool]}, expression: "change.after.?policy.?uninterruptible.orValue(false)", action: deny, message: "change.nope"}
  - {name: quota, match: {kinds: [ownerQuota]}, expression: "change.after.resource == 'gpu' && change.after.max > 8 || has(change.before.max)", action: warn}
  - {name: notes, expression: "change.note != '' || change.blocked != '' || change.pointer.endsWith('/0')", action: warn}
  - {name: templates, match: {kinds: [sandboxTemplate]}, expression: "!(change.after.imageId in ['ubuntu-24.04'])", action: deny}
  - {name: site-pools, match: {kinds: [pool]}, expression: "size(document.pools.groupBy('site')[change.after.site]) >= 1", action: warn, message: "'site ' + change.after.site + ' has ' + string(size(document.pools.groupBy('site')[change.after.site])) + ' pools'"}
  - {name: flavor-count, match: {kinds: [flavor]}, expression: "size(document.flavors.filter(f, f.gpus >= 0)) > 0 && change.type != 'delete'", action: warn}
  - {name: const-error, expression: "document.pools.exists(p, p.nope == 1) || change.kind == 'site'", action: warn}
  - {name: const-in-loop, expression: "[change.name].exists(n, document.pools.exists(p, true) && n != '')", action: warn}
`

// plainEvaluate is the reference: every rule on every change its match
// selects (no index, no implied kinds), each change's variable a full map
// made before the rule runs, the plan and document converted whole.
func plainEvaluate(p *Policy, in Input) *plan.PolicyReport {
	in.Tenant = "root"
	w := newWorld(p, in)
	planVal := types.DefaultTypeAdapter.NativeToValue(planValue(in.Plan))
	docVal := types.DefaultTypeAdapter.NativeToValue(w.doc)
	hits := make([][]plan.PolicyHit, len(p.Rules))
	owned := ownedChanges(in.Plan)
	moved := w.movedPools()
	for j, r := range p.Rules {
		for i := range in.Plan.Changes {
			c := w.withMoved(withOwned(&in.Plan.Changes[i], owned), moved)
			if len(r.Match.Kinds) > 0 && !slices.Contains(r.Match.Kinds, string(c.Kind)) {
				continue
			}
			if len(r.Match.Changes) == 0 && c.Action == plan.Unchanged || len(r.Match.Changes) > 0 && !slices.Contains(r.Match.Changes, string(c.Action)) {
				continue
			}
			cv := w.change(c)
			if !r.Match.takes(&cv.accounts) {
				continue
			}
			act, _ := interpreter.NewActivation(map[string]any{
				"change": types.DefaultTypeAdapter.NativeToValue(cv.vars()), "plan": planVal, "document": docVal})
			if broke, msg := r.asWritten().judge(cv, act, nil); broke {
				hits[j] = append(hits[j], cv.hit(msg))
			}
		}
	}
	return report(p, hits)
}

// TestFastPathAgrees: Evaluate gives the verdicts, hits and messages of the
// plain evaluation, over seeded random fleets and proposals.
func TestFastPathAgrees(t *testing.T) {
	pol, err := Load([]byte(agreeRules))
	if err != nil {
		t.Fatal(err)
	}
	total, broken := 0, map[string]int{}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 25))
		was, next := randomDocument(r, 12), randomDocument(r, 12)
		snap := FleetOf(document(t, was), "root")
		doc := document(t, next)
		p := plan.Make(doc, snap, plan.Options{Prune: seed%2 == 0})
		in := Input{Doc: doc, Data: []byte(next), Snap: snap, Plan: p}
		fast, plain := pol.Evaluate(in), plainEvaluate(pol, in)
		for i := range plain.Rules {
			total += len(plain.Rules[i].Matched)
			broken[plain.Rules[i].Name] += len(plain.Rules[i].Matched)
			if !reflect.DeepEqual(fast.Rules[i], plain.Rules[i]) {
				t.Errorf("seed %d, rule %s:\nfast  %+v\nplain %+v", seed, plain.Rules[i].Name, fast.Rules[i], plain.Rules[i])
			}
		}
	}
	// The rules must be broken often enough for the comparison to mean
	// something.
	for _, r := range pol.Rules {
		if broken[r.Name] == 0 {
			t.Errorf("rule %s broken by no change of any seed: the comparison says nothing of it", r.Name)
		}
	}
	t.Logf("%d hits agree", total)
}

// TestDecodeValue: the document's one-pass decoding gives what decoding
// into json.Number and Normalize give, on documents and on the values
// json.Marshal writes (escapes, numbers of every form).
func TestDecodeValue(t *testing.T) {
	texts := []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `12`, `-7`, `1.5`, `1e2`, `-2.5e-3`, `9007199254740991`, `9007199254740993`,
		`12345678901234567890`, `"a"`, `"\u003c\u0026\u003e"`, `"tab\there \"q\" \\ \ud83d\ude00"`, `{"a":[1,{"b":null}],"c":""}`,
		`[1,2,[3,[4]],{"k":{"l":[]}}]`,
	}
	for seed := range uint64(5) {
		r := rand.New(rand.NewPCG(seed, 7))
		d := document(t, randomDocument(r, 10))
		data, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(data))
	}
	for _, text := range texts {
		got, ok := decodeValue([]byte(text))
		if !ok {
			t.Errorf("%.80s: not decoded", text)
			continue
		}
		if want := slowDocumentValue([]byte(text)); !reflect.DeepEqual(got, want) {
			t.Errorf("%.80s: %#v, want %#v", text, got, want)
		}
	}
	for _, bad := range []string{``, `{`, `[1,`, `"a`, `tru`, `{"a" 1}`, `[1 2]`, `{} x`} {
		if _, ok := decodeValue([]byte(bad)); ok {
			t.Errorf("%q decoded", bad)
		}
	}
}

// TestJSONLinesAgree: the lines jsonLines finds are fleet.Locate's, for
// every object and for deeper values, over documents written compact, indented
// and with odd space and escaped keys; and text it cannot read is left to
// fleet.Locate.
func TestJSONLinesAgree(t *testing.T) {
	var texts []string
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 9))
		text := randomDocument(r, 10)
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatal(err)
		}
		ind, _ := json.MarshalIndent(v, "", "  ")
		odd := strings.NewReplacer(`":`, "\"\r\n\t :\n", `,"`, " ,\n\n\"", `"gpu"`, `"\u0067pu"`).Replace(text)
		texts = append(texts, text, string(ind), odd)
	}
	texts = append(texts, string(benchDocument(20)))
	for i, text := range texts {
		doc := document(t, text)
		w := newWorld(&Policy{}, Input{Doc: doc, Data: []byte(text)})
		var wanted []string
		for _, p := range w.pointers {
			wanted = append(wanted, p, p+"/name", p+"/quota/gpu")
		}
		got, ok := jsonLines([]byte(text), wanted)
		if !ok {
			t.Fatalf("text %d: not read", i)
		}
		loc := fleet.Locate([]byte(text))
		found := 0
		for _, p := range wanted {
			pos, _ := loc.Value(p)
			if l, ok := got[p]; ok {
				found++
				if l != pos.Line {
					t.Errorf("text %d, %s: line %d, fleet.Locate says %d", i, p, l, pos.Line)
				}
			}
		}
		if found < len(w.pointers) {
			t.Errorf("text %d: %d of %d pointers found", i, found, len(w.pointers))
		}
	}
	for _, bad := range []string{`{"a":`, `{"a":1} x`, "{\"a\":\"\xff\"}", `{"a" 1}`} {
		if _, ok := jsonLines([]byte(bad), []string{"/a"}); ok {
			t.Errorf("%q read", bad)
		}
	}
}
