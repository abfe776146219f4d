package substrate_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// noIdentity answers the first n cluster creates as done, without the
// cluster (DOKS accepting a create with no id, a 2xx the client could not
// read): the work happened, the answer does not say what it made.
type noIdentity struct {
	substrate.Provider
	left *atomic.Int32
}

func (p noIdentity) EnsureCluster(ctx context.Context, acct providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	c, err := p.Provider.EnsureCluster(ctx, acct, spec)
	if err == nil && p.left.Add(-1) >= 0 {
		return providers.Cluster{}, nil
	}
	return c, err
}

// TestCreateDoneWithoutIdentity: a create answered "it happened" without
// the object, with and without a crash right after the answer is recorded,
// is read back by name: the substrate converges on the one cluster made,
// and no pass fails on the journal.
func TestCreateDoneWithoutIdentity(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "no crash"
		if crash {
			name = "crash once the create succeeded"
		}
		t.Run(name, func(t *testing.T) {
			left := &atomic.Int32{}
			left.Store(1)
			crashed := false
			e := newEnv(t, func(o *substrate.Options) {
				o.Providers["fake"] = noIdentity{Provider: o.Providers["fake"], left: left}
				o.Hooks = &substrate.Hooks{At: func(p substrate.Point) bool {
					if crash && !crashed && p.Kind == substrate.PointTransition && p.Step == "createCluster" && p.To == state.Succeeded {
						crashed = true
						return true
					}
					return false
				}}
			})
			e.applyStep(gpuStep)
			if crash {
				for i := 0; !crashed; i++ {
					err := e.rec.ReconcileOnce(t.Context())
					if i == 40 || (err != nil && !crashed) {
						t.Fatalf("no crash once the create succeeded (pass %d): %v\n%s", i, err, e.describe())
					}
					e.clock.Advance(10 * time.Second)
				}
				e.restart()
			}
			e.converge(10*time.Second, 40)
			e.check(gpuStep)
			if n := len(e.fake.Snapshot().Clusters); n != 2 { // ours and the adoptable one
				t.Fatalf("%d clusters at the provider, want 2:\n%s", n, e.describe())
			}
		})
	}
}

// TestNodePoolKeepsComingBack: a node pool of a removed flavor that comes
// back after each delete is deleted a few times (each under its own
// journal key, however many), then the substrate goes to error saying so
// instead of deleting forever.
func TestNodePoolKeepsComingBack(t *testing.T) {
	e := newEnv(t, nil)
	two := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{
		{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}, {Name: "old", MachineType: "fake-cpu-4", Nodes: 1}}}}}
	e.applyStep(two)
	e.converge(10*time.Second, 40)
	e.applyStep(gpuStep)
	o := testOwner(gpuID())
	var clusterRef providers.ClusterRef
	for _, c := range e.fake.Snapshot().Clusters {
		if !c.Seeded {
			clusterRef = providers.ClusterRef{ID: c.ID, Name: c.Name, Location: c.Location}
		}
	}
	back := 0
	for i := 0; i < 60; i++ {
		if _, err := e.rec.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		_ = e.fake.Advance()
		if _, err := e.fake.GetNodePool(t.Context(), fleetAccount, clusterRef, o.NodePoolName("old")); err != nil && back < 10 {
			// Gone: somebody makes it again.
			back++
			if _, err := e.fake.EnsureNodePool(t.Context(), fleetAccount, clusterRef, providers.NodePoolSpec{Name: o.NodePoolName("old"),
				Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}, Labels: o.PoolLabels(false)}); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(10 * time.Second)
	}
	st := e.status("gpu")
	if st.State != "error" || !strings.Contains(st.Message, "keeps coming back") {
		t.Fatalf("after %d returns: %s %q", back, st.State, st.Message)
	}
	if back > 6 {
		t.Errorf("deleted %d times; the bound is a few", back)
	}
}

// TestClusterKeepsDisappearing: a cluster the provider keeps removing is
// made again a few times, then the substrate says so instead of creating
// clusters without bound.
func TestClusterKeepsDisappearing(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 40)
	removed := 0
	for i := 0; i < 80; i++ {
		for _, c := range e.fake.Snapshot().Clusters {
			if !c.Seeded && c.Status == providers.ClusterRunning && removed < 10 {
				if _, err := e.fake.DeleteCluster(t.Context(), fleetAccount, providers.ClusterRef{ID: c.ID}); err != nil {
					t.Fatal(err)
				}
				removed++
			}
		}
		for range 3 {
			_ = e.fake.Advance()
		}
		if _, err := e.rec.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		e.clock.Advance(10 * time.Second)
	}
	st := e.status("gpu")
	if st.State != "error" || !strings.Contains(st.Message, "keeps disappearing") {
		t.Fatalf("after %d removals: %s %q", removed, st.State, st.Message)
	}
	if removed > 6 {
		t.Errorf("made again %d times; the bound is a few", removed)
	}
}
