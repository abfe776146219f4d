package digitalocean_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

func TestConfigBlock(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       string // "" for accepted; else a part of the refusal
	}{
		{"none", ``, ""},
		{"all keys", "apiURL: http://127.0.0.1:1/\ndefaultNodePool: {name: sys, size: s-1vcpu-2gb, count: 2}\ncatalogTTL: 0s\nrequestTimeout: 5s\n", ""},
		{"unknown key", "apiURL: http://127.0.0.1:1/\nretries: 3\n", `line 2: unknown key "retries"`},
		{"unknown nested key", "defaultNodePool:\n  name: sys\n  zone: tor1-a\n", `line 3: unknown key "defaultNodePool.zone"`},
		{"wrong type", "requestTimeout: [1]\n", "line 1"},
		{"bad URL", "apiURL: api.digitalocean.com\n", "apiURL"},
		{"empty pool", "defaultNodePool: {count: 0}\n", "defaultNodePool.count"},
		{"bad pool name", "defaultNodePool: {name: System}\n", "defaultNodePool.name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reg := providers.NewRegistry()
			if err := reg.Register(providers.DigitalOcean, digitalocean.Factory()); err != nil {
				t.Fatal(err)
			}
			_, err := reg.Open(providers.DigitalOcean, block(t, c.yaml), store)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || refusal.CodeOf(err) != refusal.InvalidInput):
				t.Fatalf("want INVALID_INPUT with %q, got %v (%s)", c.want, err, refusal.CodeOf(err))
			}
		})
	}
}

func TestAccountConfig(t *testing.T) {
	w := newWorld(t, doemu.Options{Accounts: []doemu.Account{
		{Token: apiToken, Team: "team-a", Email: "ops@example.com"},
		{Token: otherToken, Team: "team-b", Email: "b@example.com", Locked: true},
	}}, "")
	cases := []struct {
		name string
		acct providers.Account
		want errClass
	}{
		{"fine", acct, errClass{}},
		{"no token", account("a", map[string]any{"regions": []string{"tor1"}}), errClass{providers.Invalid, providers.None, "accountConfig"}},
		{"the token itself", account("a", map[string]any{"token": apiToken}), errClass{providers.Invalid, providers.None, "secretValue"}},
		{"unknown key", account("a", map[string]any{"token": "secret://ops/do-token", "region": "tor1"}), errClass{providers.Invalid, providers.None, "accountConfig"}},
		{"another provider", providers.Account{Name: "a", Provider: "aws", Config: acct.Config}, errClass{providers.Invalid, providers.None, "wrongProvider"}},
		{"missing secret", account("a", map[string]any{"token": "secret://ops/nothing"}), errClass{providers.Terminal, providers.None, "secretMissing"}},
		{"refused token", account("a", map[string]any{"token": "secret://ops/do-revoked"}), errClass{providers.Terminal, providers.None, "credentialsRefused"}},
		{"locked account", account("a", map[string]any{"token": "secret://ops/do-other"}), errClass{providers.Terminal, providers.None, "accountLocked"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := w.ad.Verify(t.Context(), c.acct)
			if got := classOf(err); (c.want == errClass{} && err != nil) || (c.want != errClass{} && got != c.want) {
				t.Fatalf("Verify: got %+v (%v), want %+v", got, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "CANARY") {
				t.Errorf("the error holds a token: %v", err)
			}
		})
	}
}

func TestRulesAndLocations(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	ctx := t.Context()
	for _, c := range []struct {
		cfg  map[string]any
		spot bool
	}{
		{map[string]any{"token": "secret://ops/do-token"}, false},
		{map[string]any{"token": "secret://ops/do-token", "allowSpot": true}, false},
		{map[string]any{"token": "secret://ops/do-token", "previews": true}, false},
		{map[string]any{"token": "secret://ops/do-token", "allowSpot": true, "previews": true}, true},
	} {
		r, err := w.ad.Rules(ctx, account("a", c.cfg))
		if err != nil {
			t.Fatal(err)
		}
		want := providers.Rules{ClusterLocations: []providers.LocationKind{providers.Region}, Spot: c.spot}
		if r.Spot != want.Spot || r.ZeroNodes || r.NodePoolZones || r.DiskSize || r.NodesPerZone || !slices.Equal(r.ClusterLocations, want.ClusterLocations) {
			t.Errorf("Rules(%v) = %+v", c.cfg, r)
		}
	}
	locs, err := w.ad.Locations(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	if len(locs) != 2 || locs[0].Name != "nyc2" || locs[0].Kind != providers.Region || locs[1].Name != "tor1" {
		t.Errorf("the account's regions are nyc2 and tor1: %+v", locs)
	}
	all, _ := w.ad.Locations(ctx, account("a", map[string]any{"token": "secret://ops/do-token"}))
	if len(all) != 6 {
		t.Errorf("without regions, every DOKS region: %+v", all)
	}
	mt, err := w.ad.MachineType(ctx, acct, "tor1", "gpu-h100x8-640gb")
	if err != nil || mt.VCPU != 160 || mt.MemoryGiB != 1920 || mt.Accelerators == nil || *mt.Accelerators != (providers.Accelerators{Type: "nvidia-h100", Count: 8}) {
		t.Errorf("gpu-h100x8-640gb: %+v %v", mt, err)
	}
	if mt, err := w.ad.MachineType(ctx, acct, "tor1", "gpu-mi300x1-192gb"); err != nil || mt.Accelerators.Type != "amd-mi300x" {
		t.Errorf("gpu-mi300x1-192gb: %+v %v", mt, err)
	}
	for _, c := range []struct{ loc, name string }{
		{"tor1", "s-8vcpu-16gb-retired"}, // takes no new droplets
		{"fra1", "gpu-h100x8-640gb"},     // not an account region
		{"nyc2", "gpu-mi300x1-192gb"},    // not offered there
		{"tor1", "p5.48xlarge"},          // another cloud's
	} {
		if _, err := w.ad.MachineType(ctx, acct, c.loc, c.name); !errors.Is(err, providers.ErrNotFound) {
			t.Errorf("%s in %s: want ErrNotFound, got %v", c.name, c.loc, err)
		}
	}
	// The sizes list is read once and kept for catalogTTL on the clock.
	if n := w.emu.Count("GET /v2/sizes"); n != 1 {
		t.Errorf("the sizes list was read %d times", n)
	}
	w.clk.Advance(6 * time.Minute)
	_, _ = w.ad.MachineType(ctx, acct, "tor1", "s-2vcpu-4gb")
	if n := w.emu.Count("GET /v2/sizes"); n != 2 {
		t.Errorf("after catalogTTL the sizes list was read %d times, want 2", n)
	}
}

// TestRetriesOff: godo.New over an oauth2 token source does not retry, so
// a 429 or a 503 is one request, and the error says what to do.
func TestRetriesOff(t *testing.T) {
	cases := []struct {
		name  string
		fault doemu.Fault
		call  func(w *world) error
		route string
		want  errClass
		after time.Duration
	}{
		{"429 on a read", doemu.Fault{Route: "GET /v2/account", Status: 429, RetryAfter: 30 * time.Second},
			func(w *world) error { return w.ad.Verify(t.Context(), acct) }, "GET /v2/account",
			errClass{providers.Throttled, providers.None, ""}, 30 * time.Second},
		{"503 on a read", doemu.Fault{Route: "GET /v2/account", Status: 503},
			func(w *world) error { return w.ad.Verify(t.Context(), acct) }, "GET /v2/account",
			errClass{providers.Unavailable, providers.None, ""}, 0},
		{"429 on a create", doemu.Fault{Route: "POST /v2/kubernetes/clusters", Status: 429, RetryAfter: 5 * time.Second},
			func(w *world) error {
				_, err := w.ad.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-r", Location: "tor1"})
				return err
			}, "POST /v2/kubernetes/clusters", errClass{providers.Throttled, providers.None, ""}, 5 * time.Second},
		{"503 on a create", doemu.Fault{Route: "POST /v2/kubernetes/clusters", Status: 503},
			func(w *world) error {
				_, err := w.ad.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-r", Location: "tor1"})
				return err
			}, "POST /v2/kubernetes/clusters", errClass{providers.Unavailable, providers.Maybe, ""}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, doemu.Options{}, "")
			w.emu.Inject(c.fault)
			err := c.call(w)
			if got := classOf(err); got != c.want || providers.RetryAfterOf(err) != c.after {
				t.Fatalf("got %+v after %s (%v), want %+v after %s", got, providers.RetryAfterOf(err), err, c.want, c.after)
			}
			if n := w.emu.Count(c.route); n != 1 {
				t.Errorf("%s was sent %d times; the SDK must not retry", c.route, n)
			}
		})
	}
}

// TestThrottledByTheService: the emulator's own rate limit, with and
// without Retry-After; without it the wait comes from RateLimit-Reset once
// the hour's budget is spent.
func TestThrottledByTheService(t *testing.T) {
	w := newWorld(t, doemu.Options{RatePerMinute: 1}, "")
	_ = w.ad.Verify(t.Context(), acct)
	w.clk.Advance(15 * time.Second)
	err := w.ad.Verify(t.Context(), acct)
	if providers.ClassOf(err) != providers.Throttled || providers.RetryAfterOf(err) != 45*time.Second {
		t.Fatalf("per-minute limit: %v, retry after %s", err, providers.RetryAfterOf(err))
	}
	w = newWorld(t, doemu.Options{RatePerHour: 2, NoRetryAfter: true}, "")
	_ = w.ad.Verify(t.Context(), acct)
	w.clk.Advance(10 * time.Minute)
	_ = w.ad.Verify(t.Context(), acct)
	err = w.ad.Verify(t.Context(), acct)
	if providers.ClassOf(err) != providers.Throttled || providers.RetryAfterOf(err) != 50*time.Minute {
		t.Fatalf("hourly limit without Retry-After: %v, retry after %s", err, providers.RetryAfterOf(err))
	}
}

// TestErrorClasses: each of the emulator's error answers, reached through
// the adapter's calls, maps to its class and side effect.
func TestErrorClasses(t *testing.T) {
	type step func(w *world, c providers.Cluster) error
	ensurePool := func(spec providers.NodePoolSpec) step {
		return func(w *world, c providers.Cluster) error {
			_, err := w.ad.EnsureNodePool(t.Context(), acct, c.Ref, spec)
			return err
		}
	}
	getCluster := func(w *world, c providers.Cluster) error {
		_, err := w.ad.GetCluster(t.Context(), acct, c.Ref)
		return err
	}
	big := cpuPool("fa-big")
	big.NodeCount = 30
	cases := []struct {
		name  string
		opts  doemu.Options
		fault *doemu.Fault
		call  step
		want  errClass
	}{
		{name: "400", fault: &doemu.Fault{Route: "GET /v2/kubernetes/clusters/{cluster_id}", Status: 400}, call: getCluster, want: errClass{providers.Invalid, providers.None, ""}},
		{name: "401", fault: &doemu.Fault{Status: 401}, call: getCluster, want: errClass{providers.Terminal, providers.None, "credentialsRefused"}},
		{name: "403 read-only token", call: func(w *world, c providers.Cluster) error {
			_, err := w.ad.EnsureNodePool(t.Context(), account("ro", map[string]any{"token": "secret://ops/do-ro"}), c.Ref, cpuPool("fa-ro"))
			return err
		}, want: errClass{providers.Terminal, providers.None, "forbidden"}},
		{name: "404", call: func(w *world, c providers.Cluster) error {
			_, err := w.ad.GetCluster(t.Context(), acct, providers.ClusterRef{ID: "4f1c2b7e-0000-4000-8000-00000000dead"})
			return err
		}, want: errClass{providers.NotFound, providers.None, ""}},
		{name: "409", fault: &doemu.Fault{Route: "POST /v2/kubernetes/clusters/{cluster_id}/node_pools", Status: 409}, call: ensurePool(cpuPool("fa-c")), want: errClass{providers.Conflict, providers.None, ""}},
		{name: "422 invalid", call: func(w *world, c providers.Cluster) error {
			_, err := w.ad.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-old", Location: "tor1", Version: "1.20"})
			return err
		}, want: errClass{providers.Invalid, providers.None, ""}},
		{name: "422 droplet limit", call: ensurePool(big), want: errClass{providers.Terminal, providers.None, "quota"}},
		{name: "422 stockout", call: func(w *world, c providers.Cluster) error {
			w.emu.Stockout("gpu-h100x8-640gb", "tor1", true)
			_, err := w.ad.EnsureNodePool(t.Context(), acct, c.Ref, gpuPool("fa-gpu"))
			return err
		}, want: errClass{providers.Unavailable, providers.None, "stockout"}},
		{name: "500 on a read", fault: &doemu.Fault{Route: "GET /v2/kubernetes/clusters/{cluster_id}", Status: 500}, call: getCluster, want: errClass{providers.Unavailable, providers.None, ""}},
		{name: "500 on a write", fault: &doemu.Fault{Route: "PUT /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}", Status: 500}, call: func(w *world, c providers.Cluster) error {
			_, err := w.ad.ResizeNodePool(t.Context(), acct, c.Ref, "fa-system", providers.Size{NodeCount: 2})
			return err
		}, want: errClass{providers.Unavailable, providers.Maybe, ""}},
		// Twice: net/http itself replays a GET once when a reused
		// keep-alive connection closes unanswered (never a write).
		{name: "dropped read", fault: &doemu.Fault{Route: "GET /v2/kubernetes/clusters/{cluster_id}", Drop: true, Times: 2}, call: getCluster, want: errClass{providers.Unknown, providers.None, ""}},
		{name: "dropped write", fault: &doemu.Fault{Route: "DELETE /v2/kubernetes/clusters/{cluster_id}", Drop: true}, call: func(w *world, c providers.Cluster) error {
			_, err := w.ad.DeleteCluster(t.Context(), acct, c.Ref)
			return err
		}, want: errClass{providers.Unknown, providers.Maybe, ""}},
		{name: "unknown status", fault: &doemu.Fault{Route: "POST /v2/kubernetes/clusters/{cluster_id}/node_pools", Status: 418, ID: "teapot", Message: "short and stout"}, call: ensurePool(cpuPool("fa-t")), want: errClass{providers.Unknown, providers.Maybe, ""}},
		{name: "busy cluster", call: func(w *world, c providers.Cluster) error {
			if _, err := w.ad.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-busy", Location: "tor1"}); err != nil {
				return err
			}
			_, err := w.ad.EnsureNodePool(t.Context(), acct, providers.ClusterRef{Location: "tor1", Name: "fa-busy"}, cpuPool("fa-p"))
			return err
		}, want: errClass{providers.Conflict, providers.None, ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, c.opts, "")
			cl := w.ready(t, "fa-errors")
			if c.fault != nil {
				w.emu.Inject(*c.fault)
			}
			from := w.emu.Mark()
			err := c.call(w, cl)
			if c.fault != nil && c.fault.Status == 418 {
				for i := from; i < w.emu.Mark(); i++ {
					w.bad[i] = true // a status the description does not have
				}
			}
			if got := classOf(err); got != c.want {
				t.Fatalf("got %+v (%v), want %+v", got, err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "Ensure") && !strings.HasPrefix(err.Error(), "Get") && !strings.HasPrefix(err.Error(), "Resize") && !strings.HasPrefix(err.Error(), "Delete") {
				t.Errorf("the error does not name its call: %v", err)
			}
		})
	}
}

// TestLostAnswers: DOKS has no client tokens; a create whose answer was
// lost after DigitalOcean acted is found by name and tag when the journal
// asks again, never made twice.
func TestLostAnswers(t *testing.T) {
	for _, dup := range []bool{false, true} {
		t.Run(map[bool]string{false: "uniqueNames", true: "duplicateNamesAllowed"}[dup], func(t *testing.T) {
			w := newWorld(t, doemu.Options{AllowDuplicateNames: dup}, "")
			ctx := t.Context()
			spec := providers.ClusterSpec{Name: "fa-lost", Location: "tor1", Labels: map[string]string{providers.LabelSubstratePool: "pool_lost"}}
			w.emu.Inject(doemu.Fault{Route: "POST /v2/kubernetes/clusters", Drop: true})
			mark := w.emu.Mark()
			_, err := w.ad.EnsureCluster(ctx, acct, spec)
			if got := classOf(err); got != (errClass{providers.Unknown, providers.Maybe, ""}) {
				t.Fatalf("a lost create: %+v %v", got, err)
			}
			if got := w.emu.Since(mark); !slices.Equal(got, []string{"GET /v2/kubernetes/clusters", "POST /v2/kubernetes/clusters"}) {
				t.Fatalf("the first attempt asked %v", got)
			}
			mark = w.emu.Mark()
			c, err := w.ad.EnsureCluster(ctx, acct, spec)
			if err != nil {
				t.Fatalf("the retry: %v", err)
			}
			if got := w.emu.Since(mark); !slices.Equal(got, []string{"GET /v2/kubernetes/clusters"}) {
				t.Fatalf("the retry asked %v: it must find the first cluster, not make another", got)
			}
			if cs := w.emu.Clusters(); len(cs) != 1 || cs[0].ID != c.Ref.ID {
				t.Fatalf("clusters at DigitalOcean: %+v", cs)
			}
			for range 3 {
				_, _ = w.ad.GetCluster(ctx, acct, c.Ref)
			}
			pool := cpuPool("fa-lost-cpu")
			w.emu.Inject(doemu.Fault{Route: "POST /v2/kubernetes/clusters/{cluster_id}/node_pools", Drop: true})
			if _, err := w.ad.EnsureNodePool(ctx, acct, c.Ref, pool); providers.SideEffectOf(err) != providers.Maybe {
				t.Fatalf("a lost pool create: %v", err)
			}
			mark = w.emu.Mark()
			p, err := w.ad.EnsureNodePool(ctx, acct, c.Ref, pool)
			if err != nil {
				t.Fatalf("the pool retry: %v", err)
			}
			if got := w.emu.Since(mark); !slices.Equal(got, []string{"GET /v2/kubernetes/clusters/{cluster_id}"}) {
				t.Fatalf("the pool retry asked %v", got)
			}
			pools := w.emu.Clusters()[0].Pools
			if len(pools) != 2 || pools[1].ID != p.ID {
				t.Fatalf("pools at DigitalOcean: %+v", pools)
			}
		})
	}
}

// TestRequestsPerStep pins how many requests each step makes.
func TestRequestsPerStep(t *testing.T) {
	w := newWorld(t, doemu.Options{Steps: doemu.Steps{Cluster: 1, Node: 1, Upgrade: 1, Delete: 1, Drain: 1}}, "")
	ctx := t.Context()
	const (
		list       = "GET /v2/kubernetes/clusters"
		create     = "POST /v2/kubernetes/clusters"
		get        = "GET /v2/kubernetes/clusters/{cluster_id}"
		put        = "PUT /v2/kubernetes/clusters/{cluster_id}"
		del        = "DELETE /v2/kubernetes/clusters/{cluster_id}"
		upgrades   = "GET /v2/kubernetes/clusters/{cluster_id}/upgrades"
		upgrade    = "POST /v2/kubernetes/clusters/{cluster_id}/upgrade"
		creds      = "GET /v2/kubernetes/clusters/{cluster_id}/credentials"
		addPool    = "POST /v2/kubernetes/clusters/{cluster_id}/node_pools"
		putPool    = "PUT /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}"
		deletePool = "DELETE /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}"
		sizes      = "GET /v2/sizes"
	)
	spec := providers.ClusterSpec{Name: "fa-steps", Location: "tor1", Version: "1.34", Labels: map[string]string{providers.LabelSubstratePool: "pool_steps"}}
	var c providers.Cluster
	byName := providers.ClusterRef{Location: "tor1", Name: "fa-steps"}
	// A second adapter over the same emulator: a restarted agent.
	cold, err := digitalocean.Open(block(t, "apiURL: "+w.srv.URL+"\n"), store, digitalocean.WithClock(w.clk))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"Verify", func() error { return w.ad.Verify(ctx, acct) }, []string{"GET /v2/account"}},
		{"Locations", func() error { _, err := w.ad.Locations(ctx, acct); return err }, []string{"GET /v2/kubernetes/options"}},
		{"MachineType, cold", func() error { _, err := w.ad.MachineType(ctx, acct, "tor1", "s-2vcpu-4gb"); return err }, []string{sizes}},
		{"MachineType, warm", func() error { _, err := w.ad.MachineType(ctx, acct, "tor1", "s-2vcpu-4gb"); return err }, nil},
		{"Rules", func() error { _, err := w.ad.Rules(ctx, acct); return err }, nil},
		{"EnsureCluster, new", func() error { var err error; c, err = w.ad.EnsureCluster(ctx, acct, spec); return err }, []string{list, create}},
		{"GetCluster by id", func() error { var err error; c, err = w.ad.GetCluster(ctx, acct, c.Ref); return err }, []string{get}},
		// The id the create answered is remembered: a read by name is one GET.
		{"GetCluster by name", func() error { _, err := w.ad.GetCluster(ctx, acct, byName); return err }, []string{get}},
		{"GetCluster by name, another adapter", func() error { _, err := cold.GetCluster(ctx, acct, byName); return err }, []string{list, get}},
		{"GetCluster by name, another adapter again", func() error { _, err := cold.GetCluster(ctx, acct, byName); return err }, []string{get}},
		{"EnsureCluster, as it is", func() error { _, err := w.ad.EnsureCluster(ctx, acct, spec); return err }, []string{list}},
		{"EnsureCluster, relabelled", func() error {
			spec.Labels = map[string]string{providers.LabelSubstratePool: "pool_steps", "fleet-agent.dev/extra": "x"}
			_, err := w.ad.EnsureCluster(ctx, acct, spec)
			return err
		}, []string{list, put}},
		{"EnsureNodePool, new", func() error { _, err := w.ad.EnsureNodePool(ctx, acct, c.Ref, cpuPool("fa-cpu")); return err }, []string{get, addPool}},
		{"EnsureNodePool, as it is", func() error { _, err := w.ad.EnsureNodePool(ctx, acct, c.Ref, cpuPool("fa-cpu")); return err }, []string{get}},
		{"GetNodePool", func() error { _, err := w.ad.GetNodePool(ctx, acct, c.Ref, "fa-cpu"); return err }, []string{get}},
		{"ListNodePools", func() error { _, err := w.ad.ListNodePools(ctx, acct, c.Ref); return err }, []string{get}},
		{"ResizeNodePool", func() error {
			_, err := w.ad.ResizeNodePool(ctx, acct, c.Ref, "fa-cpu", providers.Size{NodeCount: 2})
			return err
		}, []string{get, putPool}},
		{"ResizeNodePool, same size", func() error {
			_, err := w.ad.ResizeNodePool(ctx, acct, c.Ref, "fa-cpu", providers.Size{NodeCount: 2})
			return err
		}, []string{get}},
		{"Credentials", func() error { _, err := w.ad.Credentials(ctx, acct, c.Ref); return err }, []string{creds}},
		{"ListClusters", func() error { _, err := w.ad.ListClusters(ctx, acct, providers.LabelSubstratePool); return err }, []string{list}},
		{"DeleteNodePool", func() error { _, err := w.ad.DeleteNodePool(ctx, acct, c.Ref, "fa-cpu"); return err }, []string{get, deletePool}},
		{"EnsureCluster, upgrade", func() error { s := spec; s.Version = "1.35"; _, err := w.ad.EnsureCluster(ctx, acct, s); return err }, []string{list, upgrades, upgrade}},
		{"GetCluster, upgraded", func() error { var err error; c, err = w.ad.GetCluster(ctx, acct, c.Ref); return err }, []string{get}},
		{"RevokeAccess", func() error { return w.ad.RevokeAccess(ctx, acct, c.Ref) }, []string{get}},
		{"DeleteCluster by id", func() error { _, err := w.ad.DeleteCluster(ctx, acct, c.Ref); return err }, []string{del}},
	}
	for _, s := range steps {
		mark := w.emu.Mark()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := w.emu.Since(mark); !slices.Equal(got, s.want) {
			t.Errorf("%s asked %v, want %v", s.name, got, s.want)
		}
	}
	if c.Outputs.Version != "1.35.1-do.0" {
		t.Errorf("after the upgrade: %+v", c.Outputs)
	}
}

func TestDevicePluginOn(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	ctx := t.Context()
	off := false
	unset := w.emu.Seed(doemu.SeedCluster{Team: "team-a", Name: "theirs", Region: "tor1", Pools: []doemu.SeedPool{{Name: "default", Size: "s-2vcpu-4gb", Count: 1}}})
	amdOnly := w.emu.Seed(doemu.SeedCluster{Team: "team-a", Name: "nv-off", Region: "tor1", NvidiaPlugin: &off, Pools: []doemu.SeedPool{{Name: "default", Size: "s-2vcpu-4gb", Count: 1}}})
	amd := providers.NodePoolSpec{Name: "fa-amd", Shape: providers.Shape{MachineType: "gpu-mi300x1-192gb"}, Size: providers.Size{NodeCount: 1}}
	cases := []struct {
		name    string
		cluster string
		spec    providers.NodePoolSpec
		refused bool
	}{
		{"NVIDIA pool, plugin left unset", unset, gpuPool("fa-gpu"), true},
		{"CPU pool, plugin left unset", unset, cpuPool("fa-cpu"), false},
		{"NVIDIA pool, NVIDIA plugin off", amdOnly, gpuPool("fa-gpu"), false},
		{"AMD pool, AMD plugin unset", amdOnly, amd, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := providers.ClusterRef{ID: c.cluster}
			mark := w.emu.Mark()
			_, err := w.ad.EnsureNodePool(ctx, acct, ref, c.spec)
			if !c.refused {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if classOf(err) != (errClass{providers.Invalid, providers.None, "devicePluginOn"}) || !strings.Contains(err.Error(), `"enabled":false`) {
				t.Fatalf("want devicePluginOn saying how to turn it off, got %v", err)
			}
			if slices.Contains(w.emu.Since(mark), "POST /v2/kubernetes/clusters/{cluster_id}/node_pools") {
				t.Error("the refused pool was sent")
			}
		})
	}
}

func TestShapeRefusals(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	c := w.ready(t, "fa-shape")
	mk := func(mut func(*providers.NodePoolSpec)) providers.NodePoolSpec {
		s := cpuPool("fa-shape-cpu")
		mut(&s)
		return s
	}
	cases := map[string]struct {
		spec   providers.NodePoolSpec
		reason string
	}{
		"diskGiB":           {mk(func(s *providers.NodePoolSpec) { s.DiskGiB = 200 }), "diskSize"},
		"zones":             {mk(func(s *providers.NodePoolSpec) { s.Zones = []string{"tor1-a"} }), "zones"},
		"spot, not allowed": {mk(func(s *providers.NodePoolSpec) { s.Spot = true }), "spotUnsupported"},
		"fixed at 0":        {mk(func(s *providers.NodePoolSpec) { s.NodeCount = 0 }), "zeroNodes"},
		"bad autoscaling":   {mk(func(s *providers.NodePoolSpec) { s.Autoscaling = &providers.Autoscaling{MinNodes: 3, MaxNodes: 2} }), "autoscaling"},
		"unknown size":      {mk(func(s *providers.NodePoolSpec) { s.MachineType = "m7i.large" }), "machineType"},
		"wrong GPUs": {mk(func(s *providers.NodePoolSpec) {
			s.Accelerators = &providers.Accelerators{Type: "nvidia-h100", Count: 8}
		}), "accelerators"},
		"upper-case name": {mk(func(s *providers.NodePoolSpec) { s.Name = "FA" }), "name"},
	}
	for name, cs := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := w.ad.EnsureNodePool(t.Context(), acct, c.Ref, cs.spec)
			if got := classOf(err); got != (errClass{providers.Invalid, providers.None, cs.reason}) {
				t.Fatalf("got %+v (%v), want Invalid %s", got, err, cs.reason)
			}
		})
	}
	if _, err := w.ad.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-x", Location: "ams3"}); providers.ReasonOf(err) != "location" {
		t.Errorf("a region outside the account's: %v", err)
	}
	if _, err := w.ad.EnsureCluster(t.Context(), acct, providers.ClusterSpec{Name: "fa-x", Location: "tor1", Labels: map[string]string{"team": "a"}}); providers.ReasonOf(err) != "label" {
		t.Errorf("a label a tag cannot hold: %v", err)
	}
	if _, err := w.ad.ReadAdoptable(t.Context(), acct, "tor1/theirs"); providers.ReasonOf(err) != "adoptID" {
		t.Errorf("an adopt id that is not a UUID: %v", err)
	}
	if _, err := w.ad.ListClusters(t.Context(), acct, "example.com/team"); providers.ClassOf(err) != providers.Invalid {
		t.Errorf("listing by a label no tag carries: %v", err)
	}
}

// TestSpotNotTaken: where DigitalOcean ignores the guessed Spot field, the
// pool it makes is on demand, and the adapter says so rather than calling
// it Spot.
func TestSpotNotTaken(t *testing.T) {
	w := newWorld(t, doemu.Options{IgnoreSpot: true}, "")
	spotAcct := account("spot", map[string]any{"token": "secret://ops/do-token", "allowSpot": true, "previews": true})
	c := w.ready(t, "fa-spot")
	spec := cpuPool("fa-spot-cpu")
	spec.Spot, spec.Labels = true, providers.PoolLabels("pool_helpers000000000000abcdef", true)
	_, err := w.ad.EnsureNodePool(t.Context(), spotAcct, c.Ref, spec)
	if got := classOf(err); got != (errClass{providers.Terminal, providers.Done, "spotNotTaken"}) {
		t.Fatalf("got %+v (%v)", got, err)
	}
	if _, err := w.ad.EnsureNodePool(t.Context(), spotAcct, c.Ref, spec); providers.ReasonOf(err) != "shapeChange" {
		t.Fatalf("the on-demand pool then differs from the Spot flavor: %v", err)
	}
}

func TestLabelsTravelAsTags(t *testing.T) {
	// Names taken twice, so that the owner's cluster can share ours.
	w := newWorld(t, doemu.Options{AllowDuplicateNames: true}, "")
	ctx := t.Context()
	w.emu.Seed(doemu.SeedCluster{Team: "team-a", Name: "fa-tags", Region: "tor1", Tags: []string{"production"}, Pools: []doemu.SeedPool{{Name: "default", Size: "s-2vcpu-4gb", Count: 1}}})
	c := w.ready(t, "fa-tags")
	state := w.emu.Clusters()[1]
	if !slices.Equal(state.Tags, []string{"fleet-agent", "fleet-agent:substrate-pool:pool_helpers000000000000abcdef"}) {
		t.Fatalf("tags at DigitalOcean: %v", state.Tags)
	}
	if c.Labels[providers.LabelSubstratePool] != "pool_helpers000000000000abcdef" || len(c.Labels) != 1 {
		t.Errorf("labels read back: %v", c.Labels)
	}
	// The owner's cluster of the same name carries no tag of ours: not
	// listed, not found by name.
	listed, err := w.ad.ListClusters(ctx, acct, providers.LabelSubstratePool)
	if err != nil || len(listed) != 1 || listed[0].Ref.ID != c.Ref.ID {
		t.Fatalf("ListClusters: %v %+v", err, listed)
	}
	got, err := w.ad.GetCluster(ctx, acct, providers.ClusterRef{Location: "tor1", Name: "fa-tags"})
	if err != nil || got.Ref.ID != c.Ref.ID {
		t.Fatalf("by name: %v %+v", err, got.Ref)
	}
	p := w.readyPool(t, c.Ref, cpuPool("fa-tags-cpu"))
	pools := w.emu.Clusters()[1].Pools
	if p.Labels[providers.LabelSubstratePool] == "" || pools[1].Labels[providers.LabelSubstratePool] != "pool_helpers000000000000abcdef" {
		t.Errorf("the pool's Kubernetes labels: %v / %v", p.Labels, pools[1].Labels)
	}
}

func TestCredentialsAreReviewed(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	c := w.ready(t, "fa-review")
	cred, err := w.ad.Credentials(t.Context(), acct, c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if !cred.ExpiresAt.Equal(epoch.Add(providers.CredentialTTL)) || cred.Endpoint != c.Outputs.Endpoint {
		t.Fatalf("credential %s", cred)
	}
	if !w.emu.Accepts(cred.Endpoint, cred.Token) {
		t.Fatal("the emulator does not take the adapter's credential")
	}
	w.clk.Advance(providers.CredentialTTL)
	if w.emu.Accepts(cred.Endpoint, cred.Token) {
		t.Fatal("the credential outlived 600 s")
	}
}

type recordingRevoker struct {
	calls []providers.Cluster
	creds []providers.Credential
}

func (r *recordingRevoker) RevokeInCluster(_ context.Context, c providers.Cluster, cred providers.Credential) error {
	r.calls = append(r.calls, c)
	r.creds = append(r.creds, cred)
	return nil
}

func TestRevokeAccessSeam(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	rec := &recordingRevoker{}
	withSeam, err := digitalocean.Open(block(t, "apiURL: "+w.srv.URL+"\n"), store, digitalocean.WithClock(w.clk), digitalocean.WithInClusterRevoker(rec))
	if err != nil {
		t.Fatal(err)
	}
	c := w.ready(t, "fa-revoke")
	if err := w.ad.RevokeAccess(t.Context(), acct, c.Ref); err != nil {
		t.Fatalf("without the in-cluster part: %v", err)
	}
	for range 2 {
		if err := withSeam.RevokeAccess(t.Context(), acct, c.Ref); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.calls) != 2 || rec.calls[0].Ref.ID != c.Ref.ID || !w.emu.Accepts(rec.creds[0].Endpoint, rec.creds[0].Token) {
		t.Fatalf("the seam got %+v", rec.calls)
	}
	if _, err := w.ad.DeleteCluster(t.Context(), acct, c.Ref); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, _ = w.ad.GetCluster(t.Context(), acct, c.Ref)
	}
	if err := withSeam.RevokeAccess(t.Context(), acct, c.Ref); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("revoking on a gone cluster: %v", err)
	}
}

// TestDeleteAnsweredTwice: whether DigitalOcean refuses a second delete of
// a cluster it is deleting is not documented; a 409 or 422 there, with the
// cluster reading back as being deleted, is what was asked.
func TestDeleteAnsweredTwice(t *testing.T) {
	for _, status := range []int{409, 422} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			w := newWorld(t, doemu.Options{}, "")
			c := w.ready(t, "fa-delete")
			if _, err := w.ad.DeleteCluster(t.Context(), acct, c.Ref); err != nil {
				t.Fatal(err)
			}
			w.emu.Inject(doemu.Fault{Route: "DELETE /v2/kubernetes/clusters/{cluster_id}", Status: status})
			got, err := w.ad.DeleteCluster(t.Context(), acct, c.Ref)
			if err != nil || got.Status != providers.ClusterDeleting || got.Ref.ID != c.Ref.ID {
				t.Fatalf("a second delete answered %d: %+v %v", status, got, err)
			}
			// A refusal of a cluster that is not being deleted stays one.
			d := w.ready(t, "fa-delete-other")
			w.emu.Inject(doemu.Fault{Route: "DELETE /v2/kubernetes/clusters/{cluster_id}", Status: status})
			if _, err := w.ad.DeleteCluster(t.Context(), acct, d.Ref); err == nil {
				t.Fatalf("a refused delete of a running cluster passed")
			}
		})
	}
}

// TestKnownIDIsOnlyAHint: a remembered cluster id that no longer names the
// cluster (deleted, and one of the same name made again elsewhere) is
// dropped, and the list finds the cluster of that name now.
func TestKnownIDIsOnlyAHint(t *testing.T) {
	w := newWorld(t, doemu.Options{Steps: doemu.Steps{Cluster: 1, Node: 1, Upgrade: 1, Delete: 1, Drain: 1}}, "")
	ctx := t.Context()
	first := w.ready(t, "fa-hint")
	byName := providers.ClusterRef{Location: "tor1", Name: "fa-hint"}
	if _, err := w.ad.DeleteCluster(ctx, acct, first.Ref); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		_, err := w.ad.GetCluster(ctx, acct, first.Ref)
		if errors.Is(err, providers.ErrNotFound) {
			break
		}
		if i == 10 {
			t.Fatalf("the deleted cluster is still there: %v", err)
		}
	}
	other, err := digitalocean.Open(block(t, "apiURL: "+w.srv.URL+"\n"), store, digitalocean.WithClock(w.clk))
	if err != nil {
		t.Fatal(err)
	}
	second, err := other.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: "fa-hint", Location: "tor1", Version: "1.34",
		Labels: map[string]string{providers.LabelSubstratePool: "pool_helpers000000000000abcdef"}})
	if err != nil || second.Ref.ID == first.Ref.ID {
		t.Fatalf("the second cluster: %v %s", err, second.Ref.ID)
	}
	mark := w.emu.Mark()
	got, err := w.ad.GetCluster(ctx, acct, byName)
	if err != nil || got.Ref.ID != second.Ref.ID {
		t.Fatalf("by name after the cluster was made again: %v %s, want %s", err, got.Ref.ID, second.Ref.ID)
	}
	want := []string{"GET /v2/kubernetes/clusters/{cluster_id}", "GET /v2/kubernetes/clusters", "GET /v2/kubernetes/clusters/{cluster_id}"}
	if steps := w.emu.Since(mark); !slices.Equal(steps, want) {
		t.Errorf("asked %v, want %v", steps, want)
	}
	if _, err := w.ad.DeleteCluster(ctx, acct, second.Ref); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err = w.ad.GetCluster(ctx, acct, byName)
	}
	if !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("by name once both are gone: %v", err)
	}
}
