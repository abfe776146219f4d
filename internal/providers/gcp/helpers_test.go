package gcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu/wirecheck"
)

const (
	project = "fa-emu-project"
	saEmail = "fleet-agent@fa-emu-project.iam.gserviceaccount.com"
	keyRef  = "secret://gke-key"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// secretStore is a resolver over a map.
type secretStore struct {
	mu sync.Mutex
	m  map[string]string
}

var errNoSecret = errors.New("no such secret")

func (s *secretStore) Resolve(_ context.Context, ref string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ref]
	if !ok {
		return "", errNoSecret
	}
	return v, nil
}

func (s *secretStore) set(ref, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[ref] = v
}

// env is an emulator, an adapter pointed at it, and an account whose key
// the emulator issued.
type env struct {
	emu     *gkeemu.Emulator
	clk     *clock.Fake
	secrets *secretStore
	ad      *gcp.Adapter
	acct    providers.Account
	key     string
}

type envOpts struct {
	emu     func(*gkeemu.Options)
	cfg     func(*gcp.Config)
	zones   []string
	options []gcp.Option
}

// newEnv starts an emulator and opens the adapter on it through its
// Factory, as the binary does. Every answer the emulator gave is checked
// against the discovery documents when the test ends.
func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	eo := gkeemu.DefaultOptions()
	eo.Clock = clk
	if o.emu != nil {
		o.emu(&eo)
	}
	emu, err := gkeemu.Start(eo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	wirecheck.Register(t, emu)
	key, err := emu.AddServiceAccount(saEmail, project)
	if err != nil {
		t.Fatal(err)
	}
	st := &secretStore{m: map[string]string{keyRef: string(key)}}
	cfg := gcp.DefaultConfig()
	cfg.ContainerEndpoint, cfg.ComputeEndpoint = emu.ContainerEndpoint(), emu.ComputeEndpoint()
	cfg.OperationWait = gcp.OperationWait{Every: 0, Polls: 20}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	ad, err := gcp.New(cfg, st, append([]gcp.Option{gcp.WithClock(clk)}, o.options...)...)
	if err != nil {
		t.Fatal(err)
	}
	zones := o.zones
	if zones == nil {
		zones = []string{"us-central1-a", "us-central1-b"}
	}
	return &env{emu: emu, clk: clk, secrets: st, ad: ad, acct: account("managed-k8s", project, zones, keyRef), key: string(key)}
}

func account(name, projectID string, zones []string, ref string) providers.Account {
	cfg := map[string]any{"projectId": projectID, "credentials": ref}
	if len(zones) > 0 {
		cfg["zones"] = zones
	}
	raw, _ := json.Marshal(cfg)
	return providers.Account{Name: name, Provider: providers.GCP, Config: raw}
}

// accepts asks the emulator's TokenReview route, as kube-apiserver's
// webhook would, whether a credential's token is good, and checks that the
// credential names the CA the cluster hands out.
func (v *env) accepts(t *testing.T) func(providers.Credential) bool {
	return func(c providers.Credential) bool {
		body, _ := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": c.Token}})
		resp, err := http.Post(v.emu.TokenReviewURL(), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Errorf("tokenreview: %v", err)
			return false
		}
		defer resp.Body.Close()
		var tr struct {
			Status struct {
				Authenticated bool `json:"authenticated"`
			} `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
			t.Errorf("tokenreview: %v", err)
			return false
		}
		return tr.Status.Authenticated && bytes.Equal(c.CACert, v.emu.CAPEM())
	}
}

// autoAdvance moves the fake clock whenever something waits on it, so that
// an adapter waiting for an operation on the clock gets there.
func autoAdvance(t *testing.T, clk *clock.Fake, step time.Duration) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
				if clk.Waiters() > 0 {
					clk.Advance(step)
				}
			}
		}
	}()
}

func clusterSpec(name string) providers.ClusterSpec {
	return providers.ClusterSpec{Name: name, Location: "us-central1", Labels: map[string]string{providers.LabelSubstratePool: poolID}, ClientToken: "tok-" + name}
}

const poolID = "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"

// ready creates a cluster and observes it until it runs.
func (v *env) ready(t *testing.T, spec providers.ClusterSpec) providers.Cluster {
	t.Helper()
	c, err := v.ad.EnsureCluster(t.Context(), v.acct, spec)
	if err != nil {
		t.Fatalf("EnsureCluster: %v", err)
	}
	for range 20 {
		c, err = v.ad.GetCluster(t.Context(), v.acct, c.Ref)
		if err == nil && c.Status == providers.ClusterRunning {
			return c
		}
	}
	t.Fatalf("cluster %s not running: %+v %v", spec.Name, c, err)
	return c
}

// readyPool ensures a pool and observes it until it runs.
func (v *env) readyPool(t *testing.T, ref providers.ClusterRef, spec providers.NodePoolSpec) providers.NodePool {
	t.Helper()
	if _, err := v.ad.EnsureNodePool(t.Context(), v.acct, ref, spec); err != nil {
		t.Fatalf("EnsureNodePool %s: %v", spec.Name, err)
	}
	var p providers.NodePool
	var err error
	for range 20 {
		p, err = v.ad.GetNodePool(t.Context(), v.acct, ref, spec.Name)
		if err == nil && p.Status == providers.NodePoolRunning {
			return p
		}
	}
	t.Fatalf("pool %s not running: %+v %v", spec.Name, p, err)
	return p
}

func gpuPool(name string) providers.NodePoolSpec {
	return providers.NodePoolSpec{Name: name,
		Shape:  providers.Shape{MachineType: "a3-highgpu-8g", Accelerators: &providers.Accelerators{Type: "nvidia-h100-80gb", Count: 8}},
		Size:   providers.Size{NodeCount: 1},
		Labels: testOwner(poolID).PoolLabels(false)}
}

func cpuPool(name string) providers.NodePoolSpec {
	return providers.NodePoolSpec{Name: name, Shape: providers.Shape{MachineType: "e2-standard-4"}, Size: providers.Size{NodeCount: 1}, Labels: testOwner(poolID).PoolLabels(false)}
}

// testInstallation is the installation id of the state files the substrate
// tests make, so that the names they expect are fixed.
const testInstallation = "5eed0000000000000000000000000001"

// testOwner is who a test substrate's objects belong to.
func testOwner(poolID string) providers.Owner {
	return providers.Owner{Installation: testInstallation, PoolID: poolID}
}
