package policy

import (
	"context"
	"testing"
)

// TestPlanConstantsOnce: the parts of the rules that read only the
// document (the fleet's 8-GPU flavors, the pools of each site) are cut out
// at load and worked out once per plan: judging a plan of 1,000 changes
// costs a fraction of what running them on each change costs, with the
// same verdicts.
func TestPlanConstantsOnce(t *testing.T) {
	rules := []byte(`rules:
  - {name: eights, match: {kinds: [flavor]}, expression: "change.after.gpus >= 8 && size(document.flavors.filter(f, f.gpus == 8)) > 2", action: warn}
  - {name: site-pools, match: {kinds: [pool]}, expression: "size(document.pools.groupBy('site')[change.after.site]) > 0", action: warn}
`)
	in := hostileInput(t, 100)
	pol, err := Load(rules)
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.consts) != 2 || pol.Rules[0].plain.prg == nil || pol.Rules[1].plain.prg == nil {
		t.Fatalf("%d plan constants: %+v", len(pol.consts), pol.consts)
	}
	hoisting = false
	whole, err := Load(rules)
	hoisting = true
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.consts) != 0 {
		t.Fatalf("plan constants with hoisting off: %d", len(whole.consts))
	}
	rep, once, err := pol.Judge(context.Background(), in, 0)
	if err != nil {
		t.Fatal(err)
	}
	want, each, err := whole.Judge(context.Background(), in, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary() != want.Summary() || len(rep.Rules[0].Matched) != len(want.Rules[0].Matched) || len(rep.Rules[1].Matched) != 100 {
		t.Fatalf("hoisted %s (%d, %d hits), whole %s", rep.Summary(), len(rep.Rules[0].Matched), len(rep.Rules[1].Matched), want.Summary())
	}
	if once*10 > each {
		t.Fatalf("once per plan cost %d, per change %d", once, each)
	}
	t.Logf("cost once per plan %d, per change %d", once, each)
}
