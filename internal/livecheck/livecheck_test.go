package livecheck_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/plan"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func demo() []obj { return []obj{fakeAccount("demo", "secret://fake-token")} }

func TestSubstrateChecks(t *testing.T) {
	cases := []struct {
		name     string
		fake     func(*fake.Config)
		accounts []obj
		pool     obj
		// blocked are substrings of the pool's blocked reasons; none means
		// the pool is not blocked.
		blocked []string
		// account are substrings of the account's blocked reasons.
		account []string
		notes   []string
	}{
		{name: "fits", pool: pool("gpu", "demo", create("fake-east"), h100(), flavor("cpu", "fake-cpu-4", obj{"zones": []any{"fake-east-a", "fake-east-b"}, "diskGiB": 100}))},
		{name: "credentials refused", accounts: []obj{fakeAccount("demo", "secret://wrong-token")}, pool: pool("gpu", "demo", create("fake-east"), h100()),
			account: []string{`credentials refused: Verify: provider account "demo": credentials refused`},
			blocked: []string{`provider account "demo": credentials refused`}},
		{name: "no token", accounts: []obj{fakeAccount("demo", "")}, pool: pool("gpu", "demo", create("fake-east"), h100()),
			account: []string{"credentials refused"}, blocked: []string{"credentials refused"}},
		{name: "secret missing", accounts: []obj{fakeAccount("demo", "secret://nowhere")}, pool: pool("gpu", "demo", create("fake-east"), h100()),
			account: []string{"a secret reference of the account does not resolve"}, blocked: []string{"does not resolve"}},
		{name: "machine type missing", pool: pool("gpu", "demo", create("fake-east"), flavor("x", "fake-nope", nil)),
			blocked: []string{`flavor "x": machine type fake-nope does not exist in fake-east at account demo; it offers there: `, `fake-cpu-4`}},
		{name: "machine type not in that region", pool: pool("gpu", "demo", create("fake-west"), h100()),
			blocked: []string{`flavor "h100": machine type fake-h100x8 does not exist in fake-west`}},
		{name: "accelerator count", pool: pool("gpu", "demo", create("fake-east"), flavor("h100", "fake-h100x8", obj{"gpus": gpus("nvidia-h100", 4)})),
			blocked: []string{`flavor "h100": machine type fake-h100x8 has 8 x nvidia-h100, not 4 x nvidia-h100`}},
		{name: "accelerator type", pool: pool("gpu", "demo", create("fake-east"), flavor("l4", "fake-l4x1", obj{"gpus": gpus("nvidia-h100", 1)})),
			blocked: []string{`machine type fake-l4x1 has 1 x nvidia-l4, not 1 x nvidia-h100`}},
		{name: "no accelerators", pool: pool("gpu", "demo", create("fake-east"), flavor("cpu", "fake-cpu-4", obj{"gpus": gpus("nvidia-l4", 1)})),
			blocked: []string{`machine type fake-cpu-4 has no GPUs, not 1 x nvidia-l4`}},
		{name: "attached GPUs", fake: withAttachable, pool: pool("gpu", "demo", create("fake-east"), flavor("t4", "fake-n1-8", obj{"gpus": gpus("nvidia-t4", 2), "zones": []any{"fake-east-a", "fake-east-b"}}))},
		{name: "attached GPUs beyond the most", fake: withAttachable, pool: pool("gpu", "demo", create("fake-east"), flavor("t4", "fake-n1-8", obj{"gpus": gpus("nvidia-t4", 8)})),
			blocked: []string{`flavor "t4": machine type fake-n1-8 takes at most 4 x nvidia-t4 in fake-east, not 8`}},
		{name: "attached GPUs of another type", fake: withAttachable, pool: pool("gpu", "demo", create("fake-east"), flavor("t4", "fake-n1-8", obj{"gpus": gpus("nvidia-l4", 1)})),
			blocked: []string{`flavor "t4": machine type fake-n1-8 takes nvidia-t4, nvidia-v100 attached in fake-east, not nvidia-l4`}},
		{name: "attached GPUs left out", fake: withAttachable, pool: pool("gpu", "demo", create("fake-east"), flavor("n1", "fake-n1-8", nil))},
		{name: "gpus left out", pool: pool("gpu", "demo", create("fake-east"), flavor("l4", "fake-l4x1", nil)),
			notes: []string{`machine type fake-l4x1 has 1 x nvidia-l4; set gpus`}},
		{name: "location unknown", pool: pool("gpu", "demo", create("mars-1"), h100()),
			blocked: []string{`cluster location "mars-1" does not exist at account "demo" (its regions: fake-east, fake-west)`}},
		{name: "zone where regions only", pool: pool("gpu", "demo", create("fake-east-a"), h100()),
			blocked: []string{`cluster location "fake-east-a" is a zone; fake clusters go in a region only: use "fake-east"`}},
		{name: "zone allowed", fake: func(c *fake.Config) { c.ZonalClusters = true }, pool: pool("gpu", "demo", create("fake-east-a"), h100())},
		{name: "zone of another region", pool: pool("gpu", "demo", create("fake-east"), flavor("cpu", "fake-cpu-4", obj{"zones": []any{"fake-west-a"}})),
			blocked: []string{`flavor "cpu": "fake-west-a" is not a zone of fake-east (its zones: fake-east-a, fake-east-b, fake-east-c)`}},
		{name: "zero nodes refused", fake: func(c *fake.Config) { c.ZeroNodes = false }, pool: pool("gpu", "demo", create("fake-east"), flavor("cpu", "fake-cpu-4", obj{"nodes": 0})),
			blocked: []string{`flavor "cpu": nodes: 0 needs autoscaling`}},
		{name: "zero nodes autoscaled", fake: func(c *fake.Config) { c.ZeroNodes = false },
			pool: pool("gpu", "demo", create("fake-east"), flavor("cpu", "fake-cpu-4", obj{"nodes": 0, "autoscaling": obj{"minNodes": 0, "maxNodes": 3}}))},
		{name: "zero nodes allowed", pool: pool("gpu", "demo", create("fake-east"), flavor("cpu", "fake-cpu-4", obj{"nodes": 0}))},
		{name: "spot refused", fake: func(c *fake.Config) { c.Spot = false }, pool: pool("gpu", "demo", create("fake-east"), flavor("cpu", "fake-cpu-4", obj{"spot": true})),
			blocked: []string{`flavor "cpu": spot node pools are not available to account "demo" (fake)`}},
		{name: "adopted", pool: pool("gpu", "demo", adopt("fake-east/theirs"), h100())},
		{name: "adopted missing", pool: pool("gpu", "demo", adopt("fake-east/prod"), h100()),
			blocked: []string{"cluster fake-east/prod not found at account demo"}},
		{name: "several reasons", pool: pool("gpu", "demo", create("fake-east"), flavor("a", "fake-nope", nil), flavor("b", "fake-h100x8", obj{"gpus": gpus("nvidia-h100", 1)})),
			blocked: []string{"machine type fake-nope does not exist", "has 8 x nvidia-h100, not 1 x nvidia-h100"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, c.fake)
			accounts := c.accounts
			if accounts == nil {
				accounts = demo()
			}
			p, err := planWith(t, document(t, accounts, c.pool), nil, w.checker())
			if err != nil {
				t.Fatal(err)
			}
			pc := change(t, p, inventory.Pool, "gpu")
			ac := change(t, p, inventory.ProviderAccount, "demo")
			check := func(what, got string, want []string) {
				if len(want) == 0 && got != "" {
					t.Errorf("%s blocked: %s\n%s", what, got, text(t, p))
				}
				for _, s := range want {
					if !strings.Contains(got, s) {
						t.Errorf("%s blocked %q, want %q in it", what, got, s)
					}
				}
			}
			check("pool", pc.Blocked, c.blocked)
			check("account", ac.Blocked, c.account)
			for _, n := range c.notes {
				if !strings.Contains(pc.Note, n) {
					t.Errorf("pool note %q, want %q", pc.Note, n)
				}
			}
			if strings.Contains(text(t, p), plan.NoteNotChecked) {
				t.Errorf("a change of a provider with an adapter is %q:\n%s", plan.NoteNotChecked, text(t, p))
			}
			if len(c.blocked) == 0 && len(c.account) == 0 && p.Blocked() {
				t.Errorf("plan blocked:\n%s", text(t, p))
			}
		})
	}
}

// Each fault class on each call the checks make: what the document got
// wrong blocks; a provider that cannot answer now is UNAVAILABLE.
func TestFaultClassesInPlan(t *testing.T) {
	classes := []struct {
		class   providers.Class
		blocked bool // else UNAVAILABLE
	}{
		{providers.Invalid, true},
		{providers.NotFound, true},
		{providers.Terminal, true},
		{providers.Conflict, false},
		{providers.Throttled, false},
		{providers.Unavailable, false},
		{providers.Unknown, false},
	}
	for _, method := range []string{"Verify", "Rules", "Locations", "ReadAdoptable", "MachineType"} {
		for _, cl := range classes {
			t.Run(method+"/"+string(cl.class), func(t *testing.T) {
				w := newWorld(t, nil)
				if err := w.fake.FailNext(method, 1, cl.class, providers.None); err != nil {
					t.Fatal(err)
				}
				doc := document(t, demo(), pool("gpu", "demo", adopt("fake-east/theirs"), h100()))
				p, err := planWith(t, doc, nil, w.checker())
				if w.fake.Calls(method) == 0 {
					t.Fatalf("%s was never called", method)
				}
				if !cl.blocked {
					if err == nil || refusal.CodeOf(err) != refusal.Unavailable {
						t.Fatalf("want UNAVAILABLE, got %v", err)
					}
					if !strings.Contains(err.Error(), `provider account "demo" (fake)`) || !strings.Contains(err.Error(), "injected "+string(cl.class)) {
						t.Errorf("the error does not say which account and what: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("want a blocked plan, got %v", err)
				}
				pc := change(t, p, inventory.Pool, "gpu")
				want := "injected " + string(cl.class)
				switch {
				case cl.class == providers.NotFound && method == "ReadAdoptable":
					want = "cluster fake-east/theirs not found at account demo"
				case cl.class == providers.NotFound && method == "MachineType":
					want = "machine type fake-h100x8 does not exist in fake-east"
				}
				if pc.Blocked == "" || !strings.Contains(pc.Blocked, want) {
					t.Fatalf("pool not blocked with the provider's message:\n%s", text(t, p))
				}
				if ac := change(t, p, inventory.ProviderAccount, "demo"); (method == "Verify") != (ac.Blocked != "") {
					t.Errorf("account blocked %q after a fault in %s", ac.Blocked, method)
				}
			})
		}
	}
}

// An account's credentials are verified once per plan, however many pools
// use it; a fresh checker (the next plan) verifies again.
func TestVerifyOncePerPlan(t *testing.T) {
	w := newWorld(t, nil)
	doc := document(t, demo(), pool("a", "demo", create("fake-east"), h100()), pool("b", "demo", create("fake-west"), flavor("cpu", "fake-cpu-4", nil)))
	c := w.checker()
	if p, err := planWith(t, doc, nil, c); err != nil || p.Blocked() {
		t.Fatalf("%v", err)
	}
	if n := w.fake.Calls("Verify"); n != 1 {
		t.Fatalf("Verify called %d times in one plan", n)
	}
	if _, err := planWith(t, doc, nil, c.Fresh()); err != nil {
		t.Fatal(err)
	}
	if n := w.fake.Calls("Verify"); n != 2 {
		t.Fatalf("a fresh checker did not verify again (%d calls)", n)
	}
	if !strings.Contains(w.logs.String(), `"call":"Verify"`) || !strings.Contains(w.logs.String(), `"account":"demo"`) {
		t.Errorf("no log line for the calls:\n%s", w.logs)
	}
}

// A provider that does not answer within the deadline is UNAVAILABLE, and
// the plan does not wait for it.
func TestDeadline(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.fake.AddLatency("Verify", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	w.opts.Timeout = 50 * time.Millisecond
	start := time.Now()
	_, err := planWith(t, document(t, demo()), nil, w.checker())
	if refusal.CodeOf(err) != refusal.Unavailable {
		t.Fatalf("want UNAVAILABLE, got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the plan waited %s", d)
	}
}

// Providers without an adapter, and --offline, answer offline: the plan
// notes their changes.
func TestOffline(t *testing.T) {
	w := newWorld(t, nil)
	accounts := []obj{
		fakeAccount("demo", "secret://fake-token"),
		{"name": "eks", "provider": "aws", "config": obj{"region": "us-east-1"}},
		{"name": "hz", "provider": "hetzner-cloud", "config": obj{}},
	}
	doc := document(t, accounts,
		pool("on-aws", "eks", create("us-east-1"), flavor("h100", "p5.48xlarge", obj{"gpus": gpus("nvidia-h100", 8)})),
		pool("on-fake", "demo", create("fake-east"), h100()))
	for _, c := range []struct {
		name    string
		live    plan.Live
		offline []string // changes noted "not checked live"
		checked []string
	}{
		{"adapters", w.checker(), []string{"eks", "hz", "on-aws"}, []string{"demo", "on-fake"}},
		{"offline", plan.Offline{}, []string{"eks", "hz", "on-aws", "demo", "on-fake"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := planWith(t, doc, nil, c.live)
			if err != nil {
				t.Fatal(err)
			}
			notes := map[string]string{}
			for _, ch := range p.Changes {
				notes[ch.Name] = ch.Note
			}
			for _, n := range c.offline {
				if !strings.Contains(notes[n], plan.NoteNotChecked) {
					t.Errorf("%s: note %q", n, notes[n])
				}
			}
			for _, n := range c.checked {
				if strings.Contains(notes[n], plan.NoteNotChecked) {
					t.Errorf("%s was checked but notes %q", n, notes[n])
				}
			}
		})
	}
	if w.fake.Calls("Verify") != 1 {
		t.Errorf("the fake was asked %d times, want once (the adapters case)", w.fake.Calls("Verify"))
	}
}

// One cluster backs one pool: two pools that reach the same cluster through
// two accounts (the same global id) are refused, whichever id they wrote;
// a pool of the fleet that holds it keeps it.
func TestOneClusterOnePool(t *testing.T) {
	accounts := []obj{fakeAccount("a1", "secret://fake-token"), {"name": "a2", "provider": "fake", "config": obj{"token": "secret://fake-token", "project": "other"}}}
	t.Run("two accounts in one document", func(t *testing.T) {
		w := newWorld(t, nil)
		seeded := w.fake.Snapshot()
		var uuid string
		for id, c := range seeded.Clusters {
			if c.Name == "theirs" {
				uuid = id
			}
		}
		if uuid == "" {
			t.Fatal("no seeded cluster")
		}
		doc := document(t, accounts, pool("p1", "a1", adopt("fake-east/theirs"), h100()), pool("p2", "a2", adopt(uuid), h100()))
		p, err := planWith(t, doc, nil, w.checker())
		if err != nil {
			t.Fatal(err)
		}
		if b := change(t, p, inventory.Pool, "p1").Blocked; b != "" {
			t.Errorf("p1 blocked: %s", b)
		}
		want := `cluster ` + uuid + ` is the cluster pool "p1" claims through account "a1" (fake://clusters/` + uuid + `); one cluster backs one pool`
		if b := change(t, p, inventory.Pool, "p2").Blocked; b != want {
			t.Errorf("p2 blocked %q, want %q", b, want)
		}
	})
	t.Run("same account and id: said once", func(t *testing.T) {
		w := newWorld(t, nil)
		doc := document(t, accounts, pool("p1", "a1", adopt("fake-east/theirs"), h100()), pool("p2", "a1", adopt("fake-east/theirs"), h100()))
		p, err := planWith(t, doc, nil, w.checker())
		if err != nil {
			t.Fatal(err)
		}
		b := change(t, p, inventory.Pool, "p2").Blocked
		if !strings.Contains(b, "already claimed by pool") || strings.Count(b, "p1") != 1 {
			t.Errorf("p2 blocked %q", b)
		}
	})
	t.Run("a pool of the fleet holds it", func(t *testing.T) {
		w := newWorld(t, nil)
		first := document(t, accounts, pool("p1", "a1", adopt("fake-east/theirs"), h100()))
		p, err := planWith(t, first, nil, w.checker())
		if err != nil || p.Blocked() {
			t.Fatalf("%v", err)
		}
		snap := fleetOf(t, p)
		// The next document leaves p1 out (it stays in the fleet) and adds
		// p0, whose account a2 reaches the same cluster.
		next := document(t, accounts, pool("p0", "a2", adopt("fake-east/theirs"), h100()))
		p, err = planWith(t, next, snap, w.checker().WithFleet(snap))
		if err != nil {
			t.Fatal(err)
		}
		b := change(t, p, inventory.Pool, "p0").Blocked
		if !strings.Contains(b, `is the cluster pool "p1" of the fleet adopted through account "a1"`) {
			t.Errorf("p0 blocked %q\n%s", b, text(t, p))
		}
		// Without the fleet, the checks cannot know.
		p, err = planWith(t, next, snap, w.checker())
		if err != nil || change(t, p, inventory.Pool, "p0").Blocked != "" {
			t.Errorf("without WithFleet: %v %s", err, text(t, p))
		}
	})
}

// fleetOf is the fleet after applying p's calls (as apply would).
func fleetOf(t *testing.T, p *plan.Plan) *inventory.Snapshot {
	t.Helper()
	var objs []inventory.Object
	for _, c := range p.Calls {
		if !strings.HasSuffix(c.Method, ".create") {
			continue
		}
		spec := map[string]any{}
		for k, v := range c.Params {
			if k != "id" {
				spec[k] = v
			}
		}
		objs = append(objs, inventory.Object{Kind: c.Kind(), ID: c.ID(), Name: c.Name(), Spec: spec})
	}
	return inventory.NewSnapshot(objs)
}

// withAttachable adds a machine type without GPUs of its own that takes
// some attached, as GKE's N1 types do.
func withAttachable(c *fake.Config) {
	c.MachineTypes = append(c.MachineTypes, fake.MachineTypeConfig{Name: "fake-n1-8", VCPU: 8, MemoryGiB: 30,
		Attachable: []fake.GPUConfig{{Type: "nvidia-t4", Count: 4}, {Type: "nvidia-v100", Count: 8}}})
}
