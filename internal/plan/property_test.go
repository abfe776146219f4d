package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
)

// gen builds random valid, mutually consistent documents as jdoc.
type gen struct {
	r    *rand.Rand
	seed uint64
	n    int // names made so far (names are never reused: archived pools keep theirs)
}

func (g *gen) name(prefix string) string {
	g.n++
	return fmt.Sprintf("%s%d-%d", prefix, g.seed, g.n)
}

func (g *gen) pick(l ...string) string { return l[g.r.IntN(len(l))] }

func (g *gen) free(depth int) any {
	switch g.r.IntN(7) {
	case 0:
		return int64(g.r.IntN(1000) - 500)
	case 1:
		return float64(g.r.IntN(1000)) / 8
	case 2:
		return g.pick("a", "é日", "x -> y", "<b>&", "")
	case 3:
		return g.r.IntN(2) == 0
	case 4:
		if depth > 0 {
			m := map[string]any{}
			for range g.r.IntN(3) {
				m[g.pick("k", "limit", "zone", "ü")] = g.free(depth - 1)
			}
			return m
		}
	case 5:
		if depth > 0 {
			l := []any{}
			for range g.r.IntN(3) {
				l = append(l, g.free(depth-1))
			}
			return l
		}
	}
	return nil
}

func (g *gen) quota() map[string]any {
	q := map[string]any{}
	for range g.r.IntN(3) {
		q[g.pick("gpu", "vcpu", "mem", "disk.GiB")] = int64(g.r.IntN(100))
	}
	return q
}

func (g *gen) site() map[string]any {
	s := map[string]any{"name": g.name("s"), "kind": g.pick("shared", "dedicated", "custom"), "region": g.pick("eu", "us-east")}
	if g.r.IntN(2) == 0 {
		s["iamRegion"] = "eu"
	}
	return s
}

func (g *gen) account() map[string]any {
	a := map[string]any{"name": g.name("a"), "provider": g.pick("aws", "gcp", "digitalocean", "fake", "hetzner-cloud")}
	if g.r.IntN(3) > 0 {
		a["config"] = map[string]any{"token": "secret://tok", "region": g.free(1), "nested": map[string]any{"apiKey": "env://KEY"}}
	}
	return a
}

func (g *gen) policy(d jdoc) map[string]any {
	pol := map[string]any{}
	for range g.r.IntN(3) {
		pol[g.pick("budget", "weight", "notes", "kubernetes")] = g.free(2)
	}
	return pol
}

func (g *gen) substrate(d jdoc) map[string]any {
	var k8s []string
	for _, a := range list(d, "providerAccounts") {
		if p := a["provider"]; p != "hetzner-cloud" {
			k8s = append(k8s, a["name"].(string))
		}
	}
	if len(k8s) == 0 {
		return nil
	}
	cluster := map[string]any{"adopt": g.name("cluster/é")}
	if g.r.IntN(2) == 0 {
		cluster = map[string]any{"create": map[string]any{"location": g.pick("fra1", "us-east-1"), "privateNodes": g.r.IntN(2) == 0}}
	}
	flavors := []any{}
	for i := range 1 + g.r.IntN(2) {
		f := map[string]any{"name": fmt.Sprintf("n%d", i), "machineType": g.pick("m1", "m2")}
		if g.r.IntN(2) == 0 {
			f["nodes"] = int64(g.r.IntN(5))
		}
		if g.r.IntN(2) == 0 {
			f["autoscaling"] = map[string]any{"minNodes": int64(0), "maxNodes": int64(1 + g.r.IntN(4))}
		}
		flavors = append(flavors, f)
	}
	return map[string]any{"kind": "kubernetes", "account": k8s[g.r.IntN(len(k8s))], "cluster": cluster, "flavors": flavors}
}

func (g *gen) pool(d jdoc) map[string]any {
	sites := list(d, "sites")
	p := map[string]any{"name": g.name("p"), "site": sites[g.r.IntN(len(sites))]["name"], "class": g.pick("metal-host", "metal-dedicated", "vps-host", "provider")}
	if g.r.IntN(2) == 0 {
		p["gpuModel"] = g.pick("H100", "L40S")
	}
	if g.r.IntN(2) == 0 {
		p["sharing"] = g.pick("exclusive", "mig", "timeslice", "mps")
	}
	if g.r.IntN(2) == 0 {
		p["agent"] = g.pick("bcd", "none")
	}
	if g.r.IntN(2) == 0 {
		p["policy"] = g.policy(d)
	}
	if g.r.IntN(3) == 0 {
		if sub := g.substrate(d); sub != nil {
			pol, _ := p["policy"].(map[string]any)
			if pol == nil {
				pol = map[string]any{}
			}
			pol["substrate"] = sub
			p["policy"] = pol
		}
	}
	if accts := list(d, "providerAccounts"); len(accts) > 0 && g.r.IntN(3) == 0 {
		p["providerAccount"] = accts[g.r.IntN(len(accts))]["name"]
	}
	if g.r.IntN(2) == 0 {
		p["ownerQuota"] = g.quota()
	}
	var offers []any
	for _, t := range []string{"acme", "globex", "ACME.eu", "t_1"} {
		if g.r.IntN(3) == 0 {
			o := map[string]any{"tenant": t}
			if g.r.IntN(2) == 0 {
				o["quota"] = g.quota()
			}
			if g.r.IntN(2) == 0 {
				o["includeDescendants"] = g.r.IntN(2) == 0
			}
			if g.r.IntN(2) == 0 {
				o["priority"] = int64(g.r.IntN(2001) - 1000)
			}
			offers = append(offers, o)
		}
	}
	if offers != nil {
		p["offers"] = offers
	}
	return p
}

func (g *gen) flavor(d jdoc) map[string]any {
	pools := list(d, "pools")
	f := map[string]any{"pool": pools[g.r.IntN(len(pools))]["name"], "name": g.name("f"),
		"vcpu": int64(1 + g.r.IntN(64)), "memoryGiB": int64(1 + g.r.IntN(256)), "diskGiB": int64(1 + g.r.IntN(1000))}
	if g.r.IntN(2) == 0 {
		f["gpus"] = int64(g.r.IntN(8))
	}
	if g.r.IntN(3) == 0 {
		f["offerId"] = g.pick("o1", "offer_x")
	}
	if g.r.IntN(2) == 0 {
		pl := map[string]any{}
		if g.r.IntN(2) == 0 {
			pl["numaAffine"] = g.r.IntN(2) == 0
		}
		if g.r.IntN(2) == 0 {
			pl["pinned"] = g.r.IntN(2) == 0
		}
		if g.r.IntN(2) == 0 {
			pl["hugepages"] = g.pick("2Mi", "1Gi")
		}
		f["placement"] = pl
	}
	return f
}

func (g *gen) template(d jdoc) map[string]any {
	flavors := list(d, "flavors")
	f := flavors[g.r.IntN(len(flavors))]
	t := map[string]any{"name": g.name("t"), "pool": f["pool"], "flavor": f["name"], "imageId": g.pick("ubuntu", "débian-12")}
	g.templateFields(t, d)
	return t
}

// templateFields sets or removes the template's optional, updatable fields.
func (g *gen) templateFields(t map[string]any, d jdoc) {
	opt := func(k string, v func() any) {
		switch g.r.IntN(3) {
		case 0:
			t[k] = v()
		case 1:
			delete(t, k)
		}
	}
	opt("userData", func() any { return g.pick("#cloud-config\n", "secret://root/ud") })
	opt("defaultTtlSeconds", func() any { return int64(60 + g.r.IntN(540)) })
	opt("maxTtlSeconds", func() any { return int64(600 + g.r.IntN(5000)) })
	opt("warm", func() any {
		w := map[string]any{"min": int64(g.r.IntN(4))}
		if g.r.IntN(2) == 0 {
			w["max"] = int64(4 + g.r.IntN(4))
		}
		return w
	})
	opt("env", func() any {
		e := map[string]any{}
		for range g.r.IntN(3) {
			e[g.pick("A", "B_TOKEN", "C1")] = g.pick("secret://root/a", "secret://acme/b")
		}
		return e
	})
	opt("network", func() any { return g.pick("egress", "private", "none") })
	opt("volumes", func() any {
		v := []any{}
		for i := range g.r.IntN(3) {
			v = append(v, map[string]any{"volume": fmt.Sprintf("v%d", i), "mountPath": fmt.Sprintf("/m/%d", i), "readOnly": g.r.IntN(2) == 0})
		}
		return v
	})
	opt("imageId", func() any { return g.pick("ubuntu", "débian-12", "alpine") })
	if t["imageId"] == nil {
		t["imageId"] = "ubuntu"
	}
}

func list(d jdoc, k string) []map[string]any {
	var out []map[string]any
	l, _ := d[k].([]any)
	for _, v := range l {
		out = append(out, v.(map[string]any))
	}
	return out
}

func (g *gen) document() jdoc {
	d := jdoc{"version": int64(1)}
	for range 1 + g.r.IntN(3) {
		appendTo(d, "sites", g.site())
	}
	for range g.r.IntN(4) {
		appendTo(d, "providerAccounts", g.account())
	}
	for range g.r.IntN(6) {
		appendTo(d, "pools", g.pool(d))
	}
	if len(list(d, "pools")) > 0 {
		for range g.r.IntN(6) {
			appendTo(d, "flavors", g.flavor(d))
		}
	}
	if len(list(d, "flavors")) > 0 {
		for range g.r.IntN(4) {
			appendTo(d, "sandboxTemplates", g.template(d))
		}
	}
	return d
}

func appendTo(d jdoc, k string, v map[string]any) {
	l, _ := d[k].([]any)
	d[k] = append(l, v)
}

func removeFrom(d jdoc, k string, keep func(map[string]any) bool) {
	var out []any
	for _, v := range list(d, k) {
		if keep(v) {
			out = append(out, v)
		}
	}
	if out == nil {
		delete(d, k)
		return
	}
	d[k] = out
}

// mutate changes what may change, adds objects and removes some (with what
// depends on them), keeping the document valid and consistent.
func (g *gen) mutate(d jdoc) {
	for range 1 + g.r.IntN(4) {
		switch g.r.IntN(12) {
		case 0:
			appendTo(d, "sites", g.site())
		case 1:
			appendTo(d, "providerAccounts", g.account())
			for _, a := range list(d, "providerAccounts") {
				if g.r.IntN(2) == 0 {
					a["config"] = map[string]any{"token": "secret://other", "region": g.free(1)}
				}
			}
		case 2:
			appendTo(d, "pools", g.pool(d))
		case 3:
			if len(list(d, "pools")) > 0 {
				appendTo(d, "flavors", g.flavor(d))
			}
		case 4:
			if len(list(d, "flavors")) > 0 {
				appendTo(d, "sandboxTemplates", g.template(d))
			}
		case 5: // a pool's updatable fields, owner quota and offers
			for _, p := range list(d, "pools") {
				if g.r.IntN(2) == 0 {
					continue
				}
				if g.r.IntN(2) == 0 {
					p["gpuModel"] = g.pick("H100", "B200")
				} else {
					delete(p, "gpuModel")
				}
				sub := policySubstrate(p)
				pol := g.policy(d)
				if sub != nil && g.r.IntN(4) > 0 {
					// Sizes change in place; identity stays.
					for _, f := range sub["flavors"].([]any) {
						f.(map[string]any)["nodes"] = int64(g.r.IntN(9))
					}
					pol["substrate"] = sub
				}
				p["policy"] = pol
				if g.r.IntN(2) == 0 {
					p["ownerQuota"] = g.quota()
				}
				offers, _ := p["offers"].([]any)
				for _, o := range offers {
					o.(map[string]any)["priority"] = int64(g.r.IntN(10))
					o.(map[string]any)["quota"] = g.quota()
				}
			}
		case 6:
			for _, p := range list(d, "pools") {
				if offers, _ := p["offers"].([]any); len(offers) > 0 && g.r.IntN(2) == 0 {
					p["offers"] = offers[1:]
				}
			}
		case 7: // flavors' fields
			for _, f := range list(d, "flavors") {
				f["vcpu"] = int64(1 + g.r.IntN(64))
				if g.r.IntN(2) == 0 {
					delete(f, "placement")
					delete(f, "gpus")
				}
			}
		case 8: // templates' fields, flavor within the pool
			flavors := list(d, "flavors")
			for _, t := range list(d, "sandboxTemplates") {
				g.templateFields(t, d)
				for _, f := range flavors {
					if f["pool"] == t["pool"] && g.r.IntN(2) == 0 {
						t["flavor"] = f["name"]
					}
				}
			}
		case 9: // remove a template
			if ts := list(d, "sandboxTemplates"); len(ts) > 0 {
				gone := ts[g.r.IntN(len(ts))]["name"]
				removeFrom(d, "sandboxTemplates", func(t map[string]any) bool { return t["name"] != gone })
			}
		case 10: // remove a flavor and its templates
			if fs := list(d, "flavors"); len(fs) > 0 {
				gone := fs[g.r.IntN(len(fs))]
				removeFrom(d, "flavors", func(f map[string]any) bool { return f["name"] != gone["name"] })
				removeFrom(d, "sandboxTemplates", func(t map[string]any) bool { return t["pool"] != gone["pool"] || t["flavor"] != gone["name"] })
			}
		case 11: // remove a pool and what hangs off it, or an unused account
			if ps := list(d, "pools"); len(ps) > 0 && g.r.IntN(2) == 0 {
				gone := ps[g.r.IntN(len(ps))]["name"]
				removeFrom(d, "pools", func(p map[string]any) bool { return p["name"] != gone })
				removeFrom(d, "flavors", func(f map[string]any) bool { return f["pool"] != gone })
				removeFrom(d, "sandboxTemplates", func(t map[string]any) bool { return t["pool"] != gone })
			} else if as := list(d, "providerAccounts"); len(as) > 0 {
				gone := as[g.r.IntN(len(as))]["name"]
				used := false
				for _, p := range list(d, "pools") {
					if sub := policySubstrate(p); p["providerAccount"] == gone || (sub != nil && sub["account"] == gone) {
						used = true
					}
				}
				if !used {
					removeFrom(d, "providerAccounts", func(a map[string]any) bool { return a["name"] != gone })
				}
			}
		}
	}
}

func policySubstrate(p map[string]any) map[string]any {
	pol, _ := p["policy"].(map[string]any)
	sub, _ := pol["substrate"].(map[string]any)
	return sub
}

func TestPropertyApplyThenPlanIsEmpty(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	var calls, mutationCalls, blockedMutations int
	kinds := map[string]int{}
	for seed := range uint64(seeds) {
		g := &gen{r: rand.New(rand.NewPCG(seed, 0x5eed)), seed: seed}
		d := g.document()
		doc := docOf(t, d) // validated through fleet.Validate of its JSON
		prune := g.r.IntN(2) == 0
		opts := Options{Prune: prune}

		p := Make(doc, nil, opts)
		if p.Blocked() {
			t.Fatalf("seed %d: plan from nothing blocked:\n%s", seed, text(p, true))
		}
		calls += len(p.Calls)
		if again := Make(doc, nil, opts); again.PlanHash != p.PlanHash || text(again, true) != text(p, true) {
			t.Fatalf("seed %d: two plans of the same inputs differ", seed)
		}
		objs := applyCalls(t, nil, p.Calls)
		if p2 := Make(doc, inventory.NewSnapshot(objs), opts); !p2.Empty() || p2.Blocked() {
			t.Fatalf("seed %d: apply then plan not empty:\n%s", seed, text(p2, true))
		}
		exportRoundTrip(t, fmt.Sprintf("seed %d", seed), objs)

		// Mutate, plan, apply, plan: converges.
		m := clone(d)
		g.mutate(m)
		mdoc := docOf(t, m)
		pm := Make(mdoc, inventory.NewSnapshot(cloneObjects(objs)), opts)
		if pm.Blocked() {
			blockedMutations++
			t.Errorf("seed %d (prune %v): mutation blocked:\n%s", seed, prune, text(pm, true))
			continue
		}
		checkSummary(t, pm)
		mutationCalls += len(pm.Calls)
		for _, c := range pm.Calls {
			kinds[c.Method]++
		}
		objs2 := applyCalls(t, cloneObjects(objs), pm.Calls)
		if p3 := Make(mdoc, inventory.NewSnapshot(objs2), opts); !p3.Empty() || p3.Blocked() {
			t.Fatalf("seed %d (prune %v): mutation did not converge:\n%s\nafter:\n%s", seed, prune, text(pm, true), text(p3, true))
		}
		exportRoundTrip(t, fmt.Sprintf("seed %d after mutation", seed), objs2)
	}
	t.Logf("%d seeds, %d calls from nothing, %d after mutations: %v", seeds, calls, mutationCalls, kinds)
	// The generator reaches every method.
	for _, m := range []string{"providerAccounts.create", "providerAccounts.update", "providerAccounts.delete", "sites.create",
		"pools.create", "pools.update", "pools.archive", "quotas.set", "pools.offer", "pools.unoffer",
		"flavors.create", "flavors.update", "flavors.delete", "sandboxTemplates.create", "sandboxTemplates.update", "sandboxTemplates.delete"} {
		if kinds[m] == 0 && !testing.Short() {
			t.Errorf("no mutation made a %s call", m)
		}
	}
}

// exportRoundTrip: exporting the fleet and planning the export with prune
// against the same fleet is empty.
func exportRoundTrip(t *testing.T, what string, objs []inventory.Object) {
	t.Helper()
	snap := inventory.NewSnapshot(objs)
	exp, err := Export(snap)
	if err != nil {
		t.Fatalf("%s: export: %v", what, err)
	}
	if p := Make(exp, snap, Options{Prune: true}); !p.Empty() || p.Blocked() {
		pretty, _ := Pretty(exp)
		t.Fatalf("%s: export then plan with prune not empty:\n%s\nexport:\n%s", what, text(p, true), pretty)
	}
	// The export is stable: exporting it again after no change is the
	// same document.
	exp2, err := Export(snap)
	if err != nil || !slices.Equal(exp.Canonical(), exp2.Canonical()) {
		t.Fatalf("%s: export not deterministic", what)
	}
}

// Export leaves out archived pools and what hangs off them; the plan of
// the export with prune leaves them alone.
func TestExportWithArchivedPool(t *testing.T) {
	objs := applied(t, docOf(t, parseJSON(t, baseDoc)), Options{})
	find(t, objs, inventory.Pool, "vps").Archived = true
	exportRoundTrip(t, "archived vps (template, flavor, offer, quotas)", objs)
	exp, err := Export(inventory.NewSnapshot(objs))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range exp.Pools {
		if p.Name == "vps" {
			t.Errorf("archived pool exported")
		}
	}
}
