package substrate_test

import (
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// TestLateSizeIsSetBackAfterTheNextListing pins what the journal does
// after a late resize (docs/ha.md, "The fence per term"): a request of a
// leader whose term ended lands after the new leader converged, and sets
// another size. The next sweep that lists the substrate's node pools (the
// cluster's node pool revision moved, or a day passed) finds our node pool
// off the document's size, and the substrate's next pass, a full one, sets
// the document's size again. Nothing else is called at rest.
func TestLateSizeIsSetBackAfterTheNextListing(t *testing.T) {
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
	moved := 0
	for _, wait := range []time.Duration{time.Minute, time.Minute, substrate.DefaultNodePoolCheckEvery} {
		e.clock.Advance(wait)
		rep := e.sweep()
		if rep.Ghosts+rep.Orphans+rep.NodePoolOrphans != 0 {
			t.Fatalf("sweep %+v", rep)
		}
		moved += rep.Moved
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		if moved > 0 {
			break
		}
	}
	if moved != 1 {
		t.Fatalf("no sweep found the late size (moved %d)", moved)
	}
	e.converge(10*time.Second, 30)
	if n := size(); n != 1 {
		t.Errorf("after the next pass: %d nodes, want the document's 1", n)
	}
	e.check(gpuStep)
}
