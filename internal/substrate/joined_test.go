package substrate_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// readyGate is the drain scenarios' cluster whose new Nodes are Ready and
// joined only once the test lets them (ready: how many of a node pool's
// Nodes are; -1: all).
type readyGate struct {
	*drainWorld
	mu    sync.Mutex
	ready int
}

func (g *readyGate) PoolNodes(ctx context.Context, t substrate.Target, nodePool string) (substrate.PoolNodes, error) {
	n, err := g.drainWorld.PoolNodes(ctx, t, nodePool)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ready >= 0 {
		n.Ready, n.Joined = min(n.Ready, g.ready), min(n.Joined, g.ready)
	}
	return n, err
}

// TestBlueGreenWaitsForTheNewNodesToJoin: with an in-cluster half, the
// new node pool of a replacement counts as joined only once its Nodes are
// Ready in the cluster and joined the pool, not when the provider reports
// it running: until then the old pool is neither drained nor deleted, and
// the substrate says how many of how many Nodes are there. Then the
// replacement goes on to one node pool of the new shape.
func TestBlueGreenWaitsForTheNewNodesToJoin(t *testing.T) {
	half := 0.5
	bg := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 2, Replace: true}
	pool := crashtest.Pool{Name: "gpu", Budget: &half, Flavors: []crashtest.Flavor{bg}}
	w := newDrainWorld(&half)
	g := &readyGate{drainWorld: w, ready: -1}
	e := newEnv(t, func(o *substrate.Options) { o.InCluster = g })
	w.env = e
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	o := testOwner(pool.ID())
	g1, g2 := o.NodePoolName("h100"), o.NodePoolName(fleet.GenerationName("h100", 2))

	g.mu.Lock()
	g.ready = 1
	g.mu.Unlock()
	pool.Flavors[0].MachineType = "fake-cpu-8"
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	running := false
	for range 20 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
		truth := e.fake.Snapshot().Clusters[e.status("gpu").Cluster.ID]
		if np, ok := truth.NodePools[g2]; ok && np.Status == "running" && np.NodeCount == 2 {
			running = true
		}
		if _, ok := truth.NodePools[g1]; !ok {
			t.Fatalf("the old node pool %s went while 1 of 2 Nodes of %s was Ready", g1, g2)
		}
	}
	if _, drains := w.peakOf(); !running || drains != 0 {
		t.Fatalf("new pool running at the provider: %v; drain passes of the old pool: %d, want none", running, drains)
	}
	st := e.status("gpu")
	if want := "1 of 2 Nodes of " + g2 + " Ready and joined"; !strings.Contains(st.Message, want) {
		t.Fatalf("status says %q, want it to say %q", st.Message, want)
	}

	g.mu.Lock()
	g.ready = -1
	g.mu.Unlock()
	e.converge(10*time.Second, 40)
	truth := e.fake.Snapshot().Clusters[e.status("gpu").Cluster.ID]
	if _, ok := truth.NodePools[g1]; ok || len(truth.NodePools) != 1 {
		t.Fatalf("after the Nodes joined: node pools %v, want only %s", keys(truth.NodePools), g2)
	}
	if bad := w.verdict(); bad != "" {
		t.Fatal(bad)
	}
}
