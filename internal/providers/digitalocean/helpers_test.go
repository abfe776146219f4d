package digitalocean_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu/wirecheck"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// The API tokens are canaries: no error, return value or log of the adapter
// may hold them.
const (
	apiToken   = "dop_v1_CANARY0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	otherToken = "dop_v1_CANARY1f2e3d4c5b6a79808172635445362718"
	roToken    = "dop_v1_CANARYreadonly000000000000000000000000"
)

// secretStore resolves references over a map.
type secretStore map[string]string

var errNoSecret = errors.New("no such secret")

func (s secretStore) Resolve(_ context.Context, ref string) (string, error) {
	v, ok := s[ref]
	if !ok {
		return "", errNoSecret
	}
	return v, nil
}

var store = secretStore{
	"secret://ops/do-token":   apiToken,
	"secret://ops/do-other":   otherToken,
	"secret://ops/do-ro":      roToken,
	"secret://ops/do-revoked": "dop_v1_CANARYrevokedtokennolongervalid000",
}

func account(name string, cfg map[string]any) providers.Account {
	raw, _ := json.Marshal(cfg)
	return providers.Account{Name: name, Provider: providers.DigitalOcean, Config: raw}
}

var acct = account("managed-k8s", map[string]any{"token": "secret://ops/do-token", "regions": []string{"tor1", "nyc2"}})

// world is an emulator behind a real HTTP server, on a fake clock, and the
// adapter pointed at it through its config block.
type world struct {
	emu *doemu.Emulator
	srv *httptest.Server
	clk *clock.Fake
	ad  *digitalocean.Adapter
	// bad marks exchanges that break the description on purpose.
	bad map[int]bool
}

func newWorld(t testing.TB, opts doemu.Options, extraYAML string) *world {
	t.Helper()
	clk := clock.NewFake(epoch)
	opts.Clock = clk
	if opts.Accounts == nil {
		opts.Accounts = []doemu.Account{
			{Token: apiToken, Team: "team-a", Email: "ops@example.com"},
			{Token: otherToken, Team: "team-a", Email: "ci@example.com"},
			{Token: roToken, Team: "team-a", Email: "viewer@example.com", ReadOnly: true},
		}
	}
	emu := doemu.New(opts)
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	ad, err := digitalocean.Open(block(t, "apiURL: "+srv.URL+"\n"+extraYAML), store, digitalocean.WithClock(clk))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	w := &world{emu: emu, srv: srv, clk: clk, ad: ad, bad: map[int]bool{}}
	t.Cleanup(func() { checkWire(t, emu, w.bad) })
	return w
}

func block(t testing.TB, s string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// checkWire holds every request the adapter sent, and every answer, against
// DigitalOcean's OpenAPI description.
func checkWire(t testing.TB, emu *doemu.Emulator, bad map[int]bool) {
	t.Helper()
	c, err := wirecheck.Shared()
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range emu.Exchanges() {
		for _, err := range c.Check(x) {
			if bad[i] && !strings.Contains(err.Error(), ": answer ") {
				continue
			}
			t.Errorf("wire: %v", err)
		}
	}
}

// ready creates a cluster through the adapter and reads it until it runs.
func (w *world) ready(t testing.TB, name string) providers.Cluster {
	t.Helper()
	c, err := w.ad.EnsureCluster(t.Context(), acct, providers.ClusterSpec{
		Name: name, Location: "tor1", Version: "1.34",
		Labels: map[string]string{providers.LabelSubstratePool: "pool_helpers000000000000abcdef"},
	})
	if err != nil {
		t.Fatalf("EnsureCluster %s: %v", name, err)
	}
	for range 20 {
		c, err = w.ad.GetCluster(t.Context(), acct, c.Ref)
		if err != nil {
			t.Fatalf("GetCluster: %v", err)
		}
		if c.Status == providers.ClusterRunning {
			return c
		}
	}
	t.Fatalf("cluster %s not running after 20 reads", name)
	return c
}

// readyPool ensures a pool and reads it until it runs.
func (w *world) readyPool(t *testing.T, ref providers.ClusterRef, spec providers.NodePoolSpec) providers.NodePool {
	t.Helper()
	if _, err := w.ad.EnsureNodePool(t.Context(), acct, ref, spec); err != nil {
		t.Fatalf("EnsureNodePool %s: %v", spec.Name, err)
	}
	for range 20 {
		p, err := w.ad.GetNodePool(t.Context(), acct, ref, spec.Name)
		if err != nil {
			t.Fatalf("GetNodePool: %v", err)
		}
		if p.Status == providers.NodePoolRunning {
			return p
		}
	}
	t.Fatalf("node pool %s not running after 20 reads", spec.Name)
	return providers.NodePool{}
}

func cpuPool(name string) providers.NodePoolSpec {
	return providers.NodePoolSpec{
		Name: name, Shape: providers.Shape{MachineType: "s-2vcpu-4gb"}, Size: providers.Size{NodeCount: 1},
		Labels: providers.PoolLabels("pool_helpers000000000000abcdef", false),
	}
}

func gpuPool(name string) providers.NodePoolSpec {
	return providers.NodePoolSpec{
		Name:   name,
		Shape:  providers.Shape{MachineType: "gpu-h100x8-640gb", Accelerators: &providers.Accelerators{Type: "nvidia-h100", Count: 8}},
		Size:   providers.Size{NodeCount: 1},
		Labels: providers.PoolLabels("pool_helpers000000000000abcdef", false),
	}
}

// errClass is what a test expects of an error.
type errClass struct {
	class  providers.Class
	side   providers.SideEffect
	reason string
}

func classOf(err error) errClass {
	return errClass{providers.ClassOf(err), providers.SideEffectOf(err), providers.ReasonOf(err)}
}

// testInstallation is the installation id of the state files the substrate
// tests make, so that the names they expect are fixed.
const testInstallation = "5eed0000000000000000000000000001"

// testOwner is who a test substrate's objects belong to.
func testOwner(poolID string) providers.Owner {
	return providers.Owner{Installation: testInstallation, PoolID: poolID}
}
