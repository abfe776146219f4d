package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
)

// benchDocument is a document whose plan against an empty fleet has
// exactly 10 changes per unit: a site, a pool, three owner quota
// resources, three offers, a flavor and a template.
func benchDocument(units int) []byte {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n"+`{"name":"site-%d","kind":"shared","region":"eu-central-%d"}`, i, i%7)
	}
	b.WriteString(`],"pools":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n"+`{"name":"pool-%d","site":"site-%d","class":"metal-host","gpuModel":"H100",`+
			`"policy":{"uninterruptible":%t,"labels":{"team":"ml"}},"ownerQuota":{"gpu":8,"vcpu":512,"memory":4096},"offers":[`, i, i, i%2 == 0)
		for j := range 3 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"tenant":"tenant-%d","quota":{"gpu":%d},"priority":%d}`, j, j, j*10)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`],"flavors":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n"+`{"pool":"pool-%d","name":"g1.f%d","vcpu":%d,"memoryGiB":%d,"diskGiB":100,"gpus":%d}`, i, i, 1+i%64, 4+i%128, i%12)
	}
	b.WriteString(`],"sandboxTemplates":[`)
	for i := range units {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n"+`{"name":"tpl-%d","pool":"pool-%d","flavor":"g1.f%d","imageId":"ubuntu-24.04","defaultTtlSeconds":3600,"network":"private"}`, i, i, i)
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

// benchPolicy is n rules of the shapes the worked rules have: a field of
// the change against a bound, a list membership, a string test, the fields
// that change, the plan's counts, the document's size, an optional field,
// an account; each rule its own constant, so that no two are the same
// program. Every shape but the account's is evaluated on the changes of its
// kinds (the plan creates everything, so a rule about updates or deletes
// also takes creates); the GPU rules are broken by some flavors (messages
// made, lines found).
func benchPolicy(n int) []byte {
	shapes := []string{
		`{name: r%[1]d, match: {kinds: [flavor]}, expression: "change.after.gpus > %[2]d", action: warn, message: "change.name + ' has ' + string(change.after.gpus) + ' GPUs'"}`,
		`{name: r%[1]d, match: {kinds: [pool], changes: [create, update]}, expression: "change.after.?policy.?uninterruptible.orValue(false) && change.after.gpuModel == 'A%[1]d'", action: deny}`,
		`{name: r%[1]d, expression: "change.kind == 'offer' && change.after.priority > %[1]d", action: warn}`,
		`{name: r%[1]d, match: {kinds: [sandboxTemplate]}, expression: "!(change.after.imageId in ['ubuntu-24.04', 'debian-%[1]d'])", action: deny}`,
		`{name: r%[1]d, expression: "change.name.startsWith('pool-%[1]d-')", action: warn}`,
		`{name: r%[1]d, match: {changes: [create, update]}, expression: "'gpus' in change.fields", action: approve, approvers: [acme/capacity]}`,
		`{name: r%[1]d, match: {kinds: [pool], changes: [create, delete]}, expression: "plan.counts.create + plan.counts.delete > %[1]d00", action: approve, approvers: [alice]}`,
		`{name: r%[1]d, match: {kinds: [ownerQuota]}, expression: "change.after.resource == 'gpu' && change.after.max > %[1]d", action: warn}`,
		`{name: r%[1]d, match: {kinds: [pool]}, expression: "size(document.pools) > %[1]d0 && change.after.class == 'provider'", action: warn}`,
		`{name: r%[1]d, match: {kinds: [site]}, expression: "change.after.region.endsWith('-%[1]d')", action: warn}`,
		`{name: r%[1]d, match: {accounts: [prod]}, expression: "change.type == 'create'", action: deny}`,
		// Rules over the whole document: how many pools the change's site
		// has, and how many 8-GPU flavors the fleet has.
		`{name: r%[1]d, match: {kinds: [pool]}, expression: "size(document.pools.groupBy('site')[change.after.site]) > %[1]d", action: warn}`,
		`{name: r%[1]d, match: {kinds: [flavor]}, expression: "change.after.gpus >= 8 && size(document.flavors.filter(f, f.gpus == 8)) > %[1]d", action: warn}`,
	}
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - "+shapes[i%len(shapes)]+"\n", i+100, 4+i%8)
	}
	return []byte(b.String())
}

// evaluations counts the (rule, change) pairs Evaluate runs an expression
// on: those the rules' match and implied kinds select.
func evaluations(pol *Policy, in Input) int {
	in.Tenant = "root"
	w := newWorld(pol, in)
	n := 0
	for i := range in.Plan.Changes {
		c := &in.Plan.Changes[i]
		cv := w.change(c)
		for _, r := range pol.Rules {
			if r.selects(c.Kind, c.Action) && (len(r.Match.Accounts) == 0 || slices.Contains(r.Match.Accounts, cv.account)) {
				n++
			}
		}
	}
	return n
}

// BenchmarkPolicyVsPlan judges a plan of 5,000 changes by 100 rules (among
// them rules over the whole document) and reports the time as a ratio to
// making that plan, measured in the same run (goal: at most 1). Each
// iteration times one of each, interleaved, and the ratio is taken between
// the best of each, so a noisy neighbour on a shared machine moves both or
// neither. The sub-benchmark per-change runs the same rules with the
// document's parts worked out for each change (no plan constants), for the
// before and after in one run.
func BenchmarkPolicyVsPlan(b *testing.B) {
	b.Run("once-per-plan", func(b *testing.B) { benchPolicyVsPlan(b, true) })
	b.Run("per-change", func(b *testing.B) { benchPolicyVsPlan(b, false) })
}

func benchPolicyVsPlan(b *testing.B, hoist bool) {
	data := benchDocument(500)
	doc, errs := fleet.Validate("bench.json", data)
	if errs != nil {
		b.Fatal(errs.Text())
	}
	hoisting = hoist
	pol, err := Load(benchPolicy(100))
	hoisting = true
	if err != nil {
		b.Fatal(err)
	}
	empty := inventory.NewSnapshot(nil)
	p := plan.Make(doc, empty, plan.Options{})
	if len(p.Changes) != 5000 || len(pol.Rules) != 100 {
		b.Fatalf("%d changes, %d rules", len(p.Changes), len(pol.Rules))
	}
	var bestPlan, bestPolicy time.Duration
	matched := 0
	for b.Loop() {
		start := time.Now()
		p = plan.Make(doc, empty, plan.Options{})
		took := time.Since(start)
		if bestPlan == 0 || took < bestPlan {
			bestPlan = took
		}
		start = time.Now()
		rep := pol.Evaluate(Input{Doc: doc, Data: data, Snap: empty, Plan: p})
		took = time.Since(start)
		if bestPolicy == 0 || took < bestPolicy {
			bestPolicy = took
		}
		matched = 0
		for _, v := range rep.Rules {
			matched += len(v.Matched)
		}
	}
	b.ReportMetric(float64(bestPolicy)/float64(bestPlan), "x-plan")
	b.ReportMetric(float64(bestPolicy.Microseconds())/1000, "policy-ms")
	b.ReportMetric(float64(bestPlan.Microseconds())/1000, "plan-ms")
	b.ReportMetric(float64(matched), "matched")
	evals := evaluations(pol, Input{Doc: doc, Data: data, Snap: empty, Plan: p})
	b.ReportMetric(float64(evals), "evals")
	b.ReportMetric(float64(bestPolicy.Nanoseconds())/float64(evals), "ns/eval")
}
