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
				substrate.SetCrashAt(o, func(p substrate.Point) bool {
					if crash && !crashed && p.Kind == substrate.PointTransition && p.Step == "createCluster" && p.To == state.Succeeded {
						crashed = true
						return true
					}
					return false
				})
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

// countingMetrics counts failed passes.
type countingMetrics struct {
	substrate.Metrics
	failed atomic.Int32
}

func (m *countingMetrics) PassFailed(string) { m.failed.Add(1) }

// TestFailedPassReachesTheStatus: a pass that fails before it finishes
// (here a journal record no build knows) says so in the substrate's status
// and a metric, not only in the log: the page must not keep the last good
// message while the substrate is wedged.
func TestFailedPassReachesTheStatus(t *testing.T) {
	m := &countingMetrics{Metrics: nopMetrics{}}
	e := newEnv(t, func(o *substrate.Options) { o.Metrics = m })
	e.applyStep(gpuStep)
	name := substrate.ClusterName("gpu", testOwner(gpuID()))
	bogus := &state.JournalOp{Key: gpuID() + "/createCluster/" + name + "/g1", PoolID: gpuID(), Step: "createCluster",
		Object: name, Generation: 1, State: "bogus", Request: []byte(`{}`)}
	if err := e.store.Update(func(tx *state.Tx) error { return tx.SwapJournalOp(nil, bogus) }); err != nil {
		t.Fatal(err)
	}
	if err := e.rec.ReconcileOnce(t.Context()); err == nil {
		t.Fatal("the pass did not fail")
	}
	st := e.status("gpu")
	if st.State != "error" || !strings.Contains(st.Message, "a pass failed") || !strings.Contains(st.Message, "bogus") {
		t.Fatalf("status %s %q", st.State, st.Message)
	}
	if m.failed.Load() != 1 {
		t.Fatalf("%d failed passes counted", m.failed.Load())
	}
}

type nopMetrics struct{}

func (nopMetrics) JournalOp(string, string)           {}
func (nopMetrics) SweepDecision(string)               {}
func (nopMetrics) PassFailed(string)                  {}
func (nopMetrics) SubstrateStates(map[string]int)     {}
func (nopMetrics) SubstrateNodes(_, _ map[string]int) {}

// TestClaimAdviceAndTeardownOfAWaitedCluster: a pool adopting the cluster
// another pool created is told that archiving the creator deletes the
// cluster (not "archive it and wait"), and when the creator is torn down
// anyway, its teardown says who was waiting.
func TestClaimAdviceAndTeardownOfAWaitedCluster(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 40)
	name := substrate.ClusterName("gpu", testOwner(gpuID()))
	both := crashtest.Step{Pools: []crashtest.Pool{gpuStep.Pools[0], {Name: "own", Adopt: true, Flavors: []crashtest.Flavor{{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 1}}}}}
	doc := strings.ReplaceAll(crashtest.Document(both), crashtest.Adoptable, "fake-east/"+name)
	e.apply(doc, false)
	for range 5 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	st := e.status("own")
	if st.State != "error" || !strings.Contains(st.Message, "archiving that pool deletes the cluster") {
		t.Fatalf("the adopting pool: %s %q", st.State, st.Message)
	}
	// The creator is archived: its cluster is deleted, and it says so.
	left := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Left: true}, both.Pools[1]}, Prune: true}
	e.apply(strings.ReplaceAll(crashtest.Document(left), crashtest.Adoptable, "fake-east/"+name), true)
	said := false
	for range 10 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st := e.status("gpu"); strings.Contains(st.Message, "pool own waits to adopt this cluster") {
			said = true
		}
		_ = e.fake.Advance()
		e.clock.Advance(10 * time.Second)
	}
	if !said || !strings.Contains(e.logs.String(), "waits to adopt this cluster") {
		t.Fatalf("the teardown of a cluster another pool waits for never said so; gpu: %+v\nown: %+v\n%s", e.status("gpu"), e.status("own"), e.describe())
	}
}

// TestNodePoolUnderOurNameNotOurs: a node pool with our name that lost our
// labels (relabelled by hand, or made by someone else) is never resized:
// the flavor is in error saying so.
func TestNodePoolUnderOurNameNotOurs(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 40)
	o := testOwner(gpuID())
	var ref providers.ClusterRef
	for _, c := range e.fake.Snapshot().Clusters {
		if !c.Seeded {
			ref = providers.ClusterRef{ID: c.ID, Name: c.Name, Location: c.Location}
		}
	}
	np, err := e.fake.GetNodePool(t.Context(), fleetAccount, ref, o.NodePoolName("h100"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.EnsureNodePool(t.Context(), fleetAccount, ref, providers.NodePoolSpec{Name: np.Name, Shape: np.Shape, Size: np.Size,
		Labels: map[string]string{providers.LabelSubstratePool: gpuID(), providers.LabelInstallation: "0ther000000000000000000000000beef"}}); err != nil {
		t.Fatal(err)
	}
	bigger := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 3}}}}}
	e.applyStep(bigger)
	for range 5 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = e.fake.Advance()
		e.clock.Advance(10 * time.Second)
	}
	st := e.status("gpu")
	if st.State != "error" || !strings.Contains(st.Message, "belongs to installation 0ther") {
		t.Fatalf("status %s %q", st.State, st.Message)
	}
	after, err := e.fake.GetNodePool(t.Context(), fleetAccount, ref, np.Name)
	if err != nil || after.NodeCount != np.NodeCount {
		t.Fatalf("the node pool that is not ours was changed: %+v %v", after, err)
	}
}
