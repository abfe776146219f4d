package substrate_test

import (
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// TestLateSizeStaysUntilAFullPass pins what the journal does after a late
// resize (docs/ha.md, "The fence per term"): a request of a leader whose
// term ended lands after the new leader converged, and sets another size.
// A converged substrate at rest calls nothing and its sweep looks for
// clusters and node pools gone or extra, not at their sizes, so the late
// size stays, even past the daily node pool listing; the next full pass
// (here an agent starting, as one that takes the lead does) sets the
// document's size again.
func TestLateSizeStaysUntilAFullPass(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 30)
	st := e.status("gpu")
	name := st.NodePools[0].Name
	size := func() int { return e.fake.Snapshot().Clusters[st.Cluster.ID].NodePools[name].NodeCount }
	if _, err := e.fake.ResizeNodePool(t.Context(), fleetAccount, providers.ClusterRef{ID: st.Cluster.ID}, name, providers.Size{NodeCount: 3}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = e.fake.Advance()
	}
	for _, wait := range []time.Duration{time.Minute, time.Minute, substrate.DefaultNodePoolCheckEvery} {
		e.clock.Advance(wait)
		if rep := e.sweep(); rep.Ghosts+rep.Orphans+rep.NodePoolOrphans != 0 {
			t.Fatalf("sweep %+v", rep)
		}
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := size(); n != 3 {
			t.Fatalf("at rest the size moved to %d: the window in docs/ha.md is narrower than it says", n)
		}
	}
	e.restart()
	e.converge(10*time.Second, 30)
	if n := size(); n != 1 {
		t.Errorf("after a full pass: %d nodes, want the document's 1", n)
	}
	e.check(gpuStep)
}
