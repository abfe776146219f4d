package fake_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

// secrets is a resolver over a map, counting resolutions.
type secrets map[string]string

var errNoSecret = errors.New("no such secret")

func (s secrets) Resolve(_ context.Context, ref string) (string, error) {
	v, ok := s[ref]
	if !ok {
		return "", errNoSecret
	}
	return v, nil
}

var testSecrets = secrets{
	"secret://fake-token":  "s3cret",
	"secret://other-token": "s3cret",
	"secret://wrong-token": "nope",
}

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func account(name, project, token string) providers.Account {
	cfg := map[string]string{"project": project}
	if token != "" {
		cfg["token"] = token
	}
	raw, _ := json.Marshal(cfg)
	return providers.Account{Name: name, Provider: providers.FakeID, Config: raw}
}

var acct = account("managed-k8s", "team-a", "secret://fake-token")

// config is the fake's config for tests: state in t's temp dir, the token
// check on, one cluster to adopt.
func config(t *testing.T) fake.Config {
	cfg := fake.DefaultConfig()
	cfg.StatePath = filepath.Join(t.TempDir(), "fake.json")
	cfg.Token = "secret://fake-token"
	cfg.Adoptable = []fake.SeedCluster{{
		Name: "theirs", Location: "fake-east",
		NodePools: []fake.SeedNodePool{{Name: "default", MachineType: "fake-cpu-4", NodeCount: 2}},
	}}
	return cfg
}

func open(t *testing.T, cfg fake.Config, clk clock.Clock) *fake.Fake {
	t.Helper()
	f, err := fake.New(cfg, testSecrets, fake.WithClock(clk))
	if err != nil {
		t.Fatalf("fake.New: %v", err)
	}
	return f
}

func clusterSpec(name string) providers.ClusterSpec {
	return providers.ClusterSpec{Name: name, Location: "fake-east", ClientToken: "tok-" + name}
}

// runUntil reads a cluster until it runs; it fails after n reads.
func runUntil(t *testing.T, f *fake.Fake, ref providers.ClusterRef, n int) providers.Cluster {
	t.Helper()
	for range n {
		c, err := f.GetCluster(t.Context(), acct, ref)
		if err != nil {
			t.Fatalf("GetCluster: %v", err)
		}
		if c.Status == providers.ClusterRunning {
			return c
		}
	}
	t.Fatalf("cluster %s not running after %d reads", ref, n)
	return providers.Cluster{}
}

// fakeProvider names the embedded fake in mutant, so that its methods can
// be overridden and still reached.
type fakeProvider = fake.Fake
