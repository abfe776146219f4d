package fake_test

import (
	"slices"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

// TestRemoveNodesTakesExactlyTheNamedNodes: RemoveNodes removes the nodes
// named by providerID and leaves the pool at the size asked, reading
// Updating until its work is done; a providerID of another pool (or not
// the fake's) is refused with Invalid and nothing goes; a node already
// gone is no error; a node number taken is never given again; a resize
// that shrinks still drops the highest numbers (the provider chooses).
func TestRemoveNodesTakesExactlyTheNamedNodes(t *testing.T) {
	cfg := config(t)
	cfg.Steps = fake.Steps{Cluster: 1, NodePool: 1, Update: 2, Delete: 1}
	f := open(t, cfg, clock.NewFake(epoch))
	ctx := t.Context()
	c, err := f.EnsureCluster(ctx, acct, clusterSpec("c1"))
	if err != nil {
		t.Fatal(err)
	}
	c = runUntil(t, f, c.Ref, 5)
	for _, name := range []string{"np", "other"} {
		if _, err := f.EnsureNodePool(ctx, acct, c.Ref, providers.NodePoolSpec{Name: name, Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	settle := func(name string) providers.NodePool {
		t.Helper()
		for range 10 {
			np, err := f.GetNodePool(ctx, acct, c.Ref, name)
			if err != nil {
				t.Fatal(err)
			}
			if np.Status == providers.NodePoolRunning {
				return np
			}
		}
		t.Fatalf("node pool %s never settled", name)
		return providers.NodePool{}
	}
	settle("np")
	settle("other")
	nodes := func() []string {
		rec := f.Snapshot().Clusters[c.Ref.ID].NodePools["np"]
		return rec.Nodes(c.Ref.Name)
	}
	if got := nodes(); !slices.Equal(got, []string{"c1-np-0", "c1-np-1", "c1-np-2", "c1-np-3", "c1-np-4"}) {
		t.Fatalf("nodes before: %v", got)
	}

	// Refused before anything goes: one providerID of another pool.
	_, err = f.RemoveNodes(ctx, acct, c.Ref, "np", []string{fake.ProviderID("c1", "np", 1), fake.ProviderID("c1", "other", 3)}, providers.Size{NodeCount: 3})
	if providers.ClassOf(err) != providers.Invalid {
		t.Fatalf("a providerID of another pool: %v, want Invalid", err)
	}
	for _, bad := range []string{"aws:///us-east-1a/i-1", "fake://c1/np/c1-np-x", "fake://c1/np/c1-np-01"} {
		if _, err := f.RemoveNodes(ctx, acct, c.Ref, "np", []string{bad}, providers.Size{NodeCount: 4}); providers.ClassOf(err) != providers.Invalid {
			t.Fatalf("providerID %q: %v, want Invalid", bad, err)
		}
	}
	if got := nodes(); len(got) != 5 {
		t.Fatalf("a refused call removed nodes: %v", got)
	}

	np, err := f.RemoveNodes(ctx, acct, c.Ref, "np", []string{fake.ProviderID("c1", "np", 1), fake.ProviderID("c1", "np", 3)}, providers.Size{NodeCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	if np.Status != providers.NodePoolUpdating || np.NodeCount != 3 {
		t.Fatalf("answer: %s with %d nodes, want updating with 3", np.Status, np.NodeCount)
	}
	if got := nodes(); !slices.Equal(got, []string{"c1-np-0", "c1-np-2", "c1-np-4"}) {
		t.Fatalf("nodes after the removal: %v", got)
	}
	if np := settle("np"); np.NodeCount != 3 {
		t.Fatalf("settled at %d nodes", np.NodeCount)
	}
	// The same call again (a caller that lost the answer): the nodes are
	// gone already, the size is held; nothing else goes.
	if _, err := f.RemoveNodes(ctx, acct, c.Ref, "np", []string{fake.ProviderID("c1", "np", 1), fake.ProviderID("c1", "np", 3)}, providers.Size{NodeCount: 3}); err != nil {
		t.Fatalf("the call again: %v", err)
	}
	if got := nodes(); !slices.Equal(got, []string{"c1-np-0", "c1-np-2", "c1-np-4"}) {
		t.Fatalf("nodes after the call again: %v", got)
	}
	// Growing gives new numbers, never a removed one; a resize that
	// shrinks drops the highest.
	if _, err := f.ResizeNodePool(ctx, acct, c.Ref, "np", providers.Size{NodeCount: 5}); err != nil {
		t.Fatal(err)
	}
	settle("np")
	if got := nodes(); !slices.Equal(got, []string{"c1-np-0", "c1-np-2", "c1-np-4", "c1-np-5", "c1-np-6"}) {
		t.Fatalf("nodes after growing: %v", got)
	}
	if _, err := f.ResizeNodePool(ctx, acct, c.Ref, "np", providers.Size{NodeCount: 4}); err != nil {
		t.Fatal(err)
	}
	settle("np")
	if got := nodes(); !slices.Equal(got, []string{"c1-np-0", "c1-np-2", "c1-np-4", "c1-np-5"}) {
		t.Fatalf("nodes after a resize down: %v", got)
	}
	if got := f.Snapshot().Clusters[c.Ref.ID].NodePools["other"].Nodes("c1"); len(got) != 5 {
		t.Fatalf("the other pool lost nodes: %v", got)
	}
	// A pool that is gone: NotFound.
	if _, err := f.RemoveNodes(ctx, acct, c.Ref, "nope", nil, providers.Size{NodeCount: 1}); providers.ClassOf(err) != providers.NotFound {
		t.Fatalf("a pool that is not there: %v, want NotFound", err)
	}
}
