package plan

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

// twoSubstrates is baseDoc with a second substrate pool, kube2, so that one
// plan can tear two down.
func twoSubstrates(t testing.TB) jdoc {
	d := parseJSON(t, baseDoc)
	add(t, d, "pools", obj(`{"name":"kube2","site":"fra","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"k8s",
	  "cluster":{"create":{"location":"fra1"}},"flavors":[{"name":"n1","machineType":"m1"}]}}}`))
	return d
}

const pKube2 = "pools/3"

// fleetOf is the fleet an apply of d makes from nothing.
func fleetOf(t testing.TB, d jdoc) []inventory.Object {
	t.Helper()
	return applied(t, docOf(t, d), Options{})
}

func maxTeardowns(n int) *int { return &n }

// The plans of "deletes in two steps", each a step of the story the page
// tells (docs/substrates.md), rendered as text and JSON.
func TestTeardownGoldens(t *testing.T) {
	protected := func(t testing.TB) []inventory.Object {
		d := parseJSON(t, baseDoc)
		set(t, d, pSub+"/protect", true)
		return fleetOf(t, d)
	}
	// unprotect is the plan that applies protect false.
	unprotect := func(t testing.TB) *Plan {
		return Make(docOf(t, parseJSON(t, baseDoc)), inventory.NewSnapshot(protected(t)), Options{Prune: true})
	}
	cases := []struct {
		name string
		plan func(t testing.TB) *Plan
		// blocked and calls are what the plan must say, whatever the goldens.
		blocked int
		calls   []string
	}{
		{"teardown-protected", func(t testing.TB) *Plan {
			d := parseJSON(t, baseDoc)
			del(t, d, pKube)
			return Make(docOf(t, d), inventory.NewSnapshot(protected(t)), Options{Prune: true})
		}, 1, nil},
		{"teardown-unprotect", unprotect, 0, []string{"pools.update kube"}},
		{"teardown-after-unprotect", func(t testing.TB) *Plan {
			objs := applyCalls(t, protected(t), unprotect(t).Calls)
			d := parseJSON(t, baseDoc)
			del(t, d, pKube)
			return Make(docOf(t, d), inventory.NewSnapshot(objs), Options{Prune: true})
		}, 0, []string{"pools.archive kube"}},
		{"teardown-two-max-1", func(t testing.TB) *Plan {
			d := twoSubstrates(t)
			objs := fleetOf(t, d)
			del(t, d, pKube2)
			del(t, d, pKube)
			return Make(docOf(t, d), inventory.NewSnapshot(objs), Options{Prune: true})
		}, 2, nil},
		{"teardown-two-max-2", func(t testing.TB) *Plan {
			d := twoSubstrates(t)
			objs := fleetOf(t, d)
			del(t, d, pKube2)
			del(t, d, pKube)
			return Make(docOf(t, d), inventory.NewSnapshot(objs), Options{Prune: true, MaxTeardowns: maxTeardowns(2)})
		}, 0, []string{"pools.archive kube", "pools.archive kube2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.plan(t)
			if p.Summary.Blocked != tc.blocked {
				t.Errorf("%d blocked, want %d:\n%s", p.Summary.Blocked, tc.blocked, text(p, true))
			}
			if got := methods(p); !slices.Equal(got, tc.calls) {
				t.Errorf("calls %q, want %q", got, tc.calls)
			}
			var js bytes.Buffer
			if err := p.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var txt bytes.Buffer
			if err := p.WriteText(&txt, true); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(goldenDir, tc.name+".txt"), txt.Bytes())
			golden.Check(t, filepath.Join(goldenDir, tc.name+".json"), js.Bytes())
			checkJSON(t, p, js.Bytes())
		})
	}
}

// Each way a plan tears a substrate down, and each way it does not, against
// a fleet whose kube substrate was applied protected (and kube2 not).
func TestTeardownGuard(t *testing.T) {
	const protectedWhy = `the substrate is protected (policy.substrate.protect is true as applied): apply "protect": false first, in its own reviewed change, then tear it down`
	base := twoSubstrates(t)
	set(t, base, pSub+"/protect", true)
	objs := fleetOf(t, base)
	prune := Options{Prune: true}
	cases := []struct {
		name string
		edit func(t testing.TB, d jdoc)
		opts Options
		// blocked maps a pool to the words its change must be blocked
		// with; calls are the plan's methods.
		blocked map[string]string
		calls   []string
	}{
		{name: "protected pool left out, with prune", edit: func(t testing.TB, d jdoc) { del(t, d, pKube) }, opts: prune,
			blocked: map[string]string{"kube": protectedWhy}},
		{name: "protected substrate taken out, with prune", edit: func(t testing.TB, d jdoc) { del(t, d, pSub) }, opts: prune,
			blocked: map[string]string{"kube": protectedWhy}},
		{name: "protected pool left out, without prune: nothing is torn down", edit: func(t testing.TB, d jdoc) { del(t, d, pKube) }, calls: []string{}},
		{name: "protected substrate taken out, without prune: kept", edit: func(t testing.TB, d jdoc) { del(t, d, pSub) }, calls: []string{}},
		{name: "a protected substrate still changes in place", edit: func(t testing.TB, d jdoc) { set(t, d, pSub+"/flavors/0/nodes", 3) }, opts: prune,
			calls: []string{"pools.update kube"}},
		{name: "protect false is an ordinary change", edit: func(t testing.TB, d jdoc) { del(t, d, pSub+"/protect") }, opts: prune,
			calls: []string{"pools.update kube"}},
		{name: "the protect flag of the document does not count", edit: func(t testing.TB, d jdoc) {
			set(t, d, "pools/3/policy/substrate/protect", true)
			del(t, d, pKube2)
		}, opts: prune, calls: []string{"pools.archive kube2"}},
		{name: "unprotected pool left out, with prune", edit: func(t testing.TB, d jdoc) { del(t, d, pKube2) }, opts: prune,
			calls: []string{"pools.archive kube2"}},
		{name: "unprotected substrate taken out, with prune", edit: func(t testing.TB, d jdoc) { del(t, d, "pools/3/policy/substrate") }, opts: prune,
			calls: []string{"pools.update kube2"}},
		{name: "maxTeardowns 0 allows none", edit: func(t testing.TB, d jdoc) { del(t, d, pKube2) }, opts: Options{Prune: true, MaxTeardowns: maxTeardowns(0)},
			blocked: map[string]string{"kube2": "the plan tears down 1 substrate and apply.maxTeardowns is 0, which allows none"}},
		{name: "over the count, whatever protect says", edit: func(t testing.TB, d jdoc) { del(t, d, pKube2); del(t, d, pKube) }, opts: prune,
			blocked: map[string]string{"kube": protectedWhy + "; the plan tears down 2 substrates and apply.maxTeardowns allows 1",
				"kube2": "the plan tears down 2 substrates and apply.maxTeardowns allows 1: tear them down over several plans, or raise apply.maxTeardowns"}},
		{name: "an empty document", edit: func(t testing.TB, d jdoc) {
			for _, k := range []string{"sites", "providerAccounts", "pools", "flavors", "sandboxTemplates"} {
				delete(d, k)
			}
		}, opts: prune, blocked: map[string]string{"kube": "apply.maxTeardowns allows 1", "kube2": "apply.maxTeardowns allows 1"}},
		{name: "within the count, the protected one alone is blocked", edit: func(t testing.TB, d jdoc) { del(t, d, pKube2); del(t, d, pKube) },
			opts: Options{Prune: true, MaxTeardowns: maxTeardowns(2)}, blocked: map[string]string{"kube": protectedWhy}, calls: []string{"pools.archive kube2"}},
		{name: "a pool deleted with nothing to tear down does not count", edit: func(t testing.TB, d jdoc) { del(t, d, pKube2); del(t, d, pBurst); del(t, d, "providerAccounts/0") },
			opts: prune, calls: []string{"pools.archive burst", "pools.archive kube2", "providerAccounts.delete cloud"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := clone(base)
			if tc.edit != nil {
				tc.edit(t, d)
			}
			p := Make(docOf(t, d), inventory.NewSnapshot(cloneObjects(objs)), tc.opts)
			blocked := map[string]string{}
			for _, c := range p.Changes {
				if c.Blocked != "" {
					blocked[c.Name] = c.Blocked
				}
			}
			if len(blocked) != len(tc.blocked) {
				t.Errorf("blocked %q, want %q", blocked, tc.blocked)
			}
			for name, why := range tc.blocked {
				if !strings.Contains(blocked[name], why) {
					t.Errorf("%s blocked with %q, want it to say %q", name, blocked[name], why)
				}
			}
			if got := methods(p); tc.calls != nil && !slices.Equal(got, tc.calls) {
				t.Errorf("calls %q, want %q\n%s", got, tc.calls, text(p, true))
			}
		})
	}
}
