package substrate_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
	"github.com/fleet-agent/fleet-agent/internal/substrate/drain"
)

// TestBlueGreenReplacesAShapeChange: a blue/green flavor whose machine type
// changes gets a new node pool under its next generation's name; the old
// one keeps running until the new one's nodes are up, then is deleted;
// no in-place change is ever sent. A second change makes generation 3.
func TestBlueGreenReplacesAShapeChange(t *testing.T) {
	e := newEnv(t, nil)
	bg := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 2, Replace: true}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{bg}}
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	o := testOwner(pool.ID())
	g1, g2, g3 := o.NodePoolName("h100"), o.NodePoolName(fleet.GenerationName("h100", 2)), o.NodePoolName(fleet.GenerationName("h100", 3))
	st := e.status("gpu")
	truth := e.fake.Snapshot().Clusters[st.Cluster.ID]
	if _, ok := truth.NodePools[g1]; !ok || len(truth.NodePools) != 1 {
		t.Fatalf("first generation: %v", keys(truth.NodePools))
	}
	// A node pool now takes a few looks to be made, so that the old
	// one is seen beside the new one while it comes up.
	e.fakeCfg.Steps.NodePool = 4
	e.restart()
	updates := e.fake.Calls("EnsureNodePool")

	pool.Flavors[0].MachineType = "fake-cpu-8"
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	// While the new pool is made, the old one is still there and the
	// substrate says it is replacing.
	sawBoth, sawReason := false, false
	for range 30 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		truth := e.fake.Snapshot().Clusters[st.Cluster.ID]
		_, has1 := truth.NodePools[g1]
		np2, has2 := truth.NodePools[g2]
		if has2 && !has1 && np2.Status != providers.NodePoolRunning {
			t.Fatalf("the old node pool went before the new one ran (%s)", np2.Status)
		}
		sawBoth = sawBoth || has1 && has2
		for _, c := range e.status("gpu").Conditions {
			sawReason = sawReason || c.Reason == substrate.ReasonReplacing && strings.Contains(c.Message, "replacing node pool "+g1)
		}
		if e.converged() {
			break
		}
		e.clock.Advance(10 * time.Second)
	}
	if !sawBoth || !sawReason {
		t.Fatalf("both pools seen %v, Replacing seen %v:\n%s", sawBoth, sawReason, e.describe())
	}
	e.check(crashtest.Step{Pools: []crashtest.Pool{pool}})
	truth = e.fake.Snapshot().Clusters[st.Cluster.ID]
	if np, ok := truth.NodePools[g2]; !ok || len(truth.NodePools) != 1 || np.MachineType != "fake-cpu-8" {
		t.Fatalf("after the replacement: %v", keys(truth.NodePools))
	}
	// One create, never an update of the old pool's shape.
	if n := e.fake.Calls("EnsureNodePool"); n != updates+1 {
		t.Fatalf("%d EnsureNodePool calls for the replacement, want 1", n-updates)
	}
	if st := e.status("gpu"); st.State == "error" || len(st.NodePools) != 1 || st.NodePools[0].Name != g2 {
		t.Fatalf("status after the replacement: %+v", st)
	}

	// A resize of generation 2 is made in place; then a second shape
	// change makes generation 3.
	pool.Flavors[0].Nodes = 3
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	if truth := e.fake.Snapshot().Clusters[st.Cluster.ID]; truth.NodePools[g2] == nil || truth.NodePools[g2].NodeCount != 3 {
		t.Fatalf("generation 2 was not resized in place: %v", keys(truth.NodePools))
	}
	pool.Flavors[0].MachineType = "fake-h100x8"
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 40)
	e.check(crashtest.Step{Pools: []crashtest.Pool{pool}})
	if truth := e.fake.Snapshot().Clusters[st.Cluster.ID]; truth.NodePools[g3] == nil || len(truth.NodePools) != 1 {
		t.Fatalf("after the second replacement: %v", keys(truth.NodePools))
	}
}

// TestBlueGreenDeleteWaitsForAWindow: outside the maintenance windows the
// new node pool is made at once, and the old one is kept (OutsideWindow,
// saying when the next opens) until a window opens.
func TestBlueGreenDeleteWaitsForAWindow(t *testing.T) {
	e := newEnv(t, nil)
	doc := windowDoc(`{"days":["tue"],"start":"00:00","duration":"4h"}`)
	bg := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 1, Replace: true}
	e.apply(doc(bg), false)
	e.converge(10*time.Second, 40)
	bg.MachineType = "fake-cpu-8"
	e.apply(doc(bg), false)
	for range 20 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	if d := e.fake.Calls("DeleteNodePool"); d != 0 {
		t.Fatalf("outside the window: %d deletes", d)
	}
	o := testOwner(crashtest.Pool{Name: "gpu"}.ID())
	st := e.status("gpu")
	truth := e.fake.Snapshot().Clusters[st.Cluster.ID]
	if np := truth.NodePools[o.NodePoolName("h100-g2")]; np == nil || np.Status != providers.NodePoolRunning || truth.NodePools[o.NodePoolName("h100")] == nil {
		t.Fatalf("outside the window: %v", keys(truth.NodePools))
	}
	if !strings.Contains(st.Message, "waits for a maintenance window") || !strings.Contains(st.Message, "the drain and delete of "+o.NodePoolName("h100")) {
		t.Fatalf("message %q", st.Message)
	}
	// Into the window (Tuesday 00:00 UTC; the clock is on a Monday).
	now := e.clock.Now()
	e.clock.Advance(now.Truncate(24*time.Hour).Add(24*time.Hour).Sub(now) + time.Minute)
	e.converge(10*time.Second, 40)
	truth = e.fake.Snapshot().Clusters[st.Cluster.ID]
	if len(truth.NodePools) != 1 || truth.NodePools[o.NodePoolName("h100-g2")] == nil {
		t.Fatalf("inside the window: %v", keys(truth.NodePools))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestBlueGreenNeverTakesMoreThanTheBudget measures, at every point between
// journal steps (before and after every provider call) and after every
// pass, how many of the flavor's wanted nodes are not in a running node
// pool, through a replacement of a three-node flavor; the most ever must
// be within the pool's disruption budget (one of three: the pool sets
// none).
func TestBlueGreenNeverTakesMoreThanTheBudget(t *testing.T) {
	const wanted = 3
	var (
		mu    sync.Mutex
		e     *env
		worst int
		looks int
	)
	measure := func() {
		if e == nil || e.fake == nil {
			return
		}
		running := 0
		for _, c := range e.fake.Snapshot().Clusters {
			for _, np := range c.NodePools {
				if np.Status == providers.NodePoolRunning && strings.Contains(np.Name, "-h100") {
					running += np.NodeCount
				}
			}
		}
		mu.Lock()
		worst, looks = max(worst, wanted-running), looks+1
		mu.Unlock()
	}
	e = newEnv(t, func(o *substrate.Options) {
		substrate.SetCrashAt(o, func(substrate.Point) bool { measure(); return false })
	})
	bg := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: wanted, Replace: true}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{bg}}
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	e.fakeCfg.Steps.NodePool, e.fakeCfg.Steps.Delete = 4, 3
	e.restart()
	mu.Lock()
	worst, looks = 0, 0
	mu.Unlock()
	measure()
	pool.Flavors[0].MachineType = "fake-cpu-8"
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	for range 40 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		measure()
		if e.converged() {
			break
		}
		e.clock.Advance(10 * time.Second)
	}
	e.check(crashtest.Step{Pools: []crashtest.Pool{pool}})
	budget := drain.Budget(nil, wanted)
	t.Logf("replacement of a %d-node flavor: at most %d of its nodes unavailable at once over %d looks (budget %d)", wanted, worst, looks, budget)
	if looks < 10 || worst > budget {
		t.Fatalf("at most %d nodes unavailable at once over %d looks; the budget is %d", worst, looks, budget)
	}
}

// TestOptingInMendsAShapeError: a shape change without replace is an
// error; the flavor opting in (the same shape asked) replaces the pool.
func TestOptingInMendsAShapeError(t *testing.T) {
	e := newEnv(t, nil)
	fl := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{fl}}
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	pool.Flavors[0].MachineType = "fake-cpu-8"
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	if st := e.status("gpu"); st.State != "error" || !strings.Contains(st.Message, "never change in place") {
		t.Fatalf("without replace: %s: %s", st.State, st.Message)
	}
	pool.Flavors[0].Replace = true
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	e.check(crashtest.Step{Pools: []crashtest.Pool{pool}})
	st := e.status("gpu")
	truth := e.fake.Snapshot().Clusters[st.Cluster.ID]
	if np := truth.NodePools[testOwner(pool.ID()).NodePoolName("h100-g2")]; np == nil || len(truth.NodePools) != 1 || np.MachineType != "fake-cpu-8" {
		t.Fatalf("after opting in: %v (%s: %s)", keys(truth.NodePools), st.State, st.Message)
	}
}
