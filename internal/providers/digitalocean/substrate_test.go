package digitalocean_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/killtest"
	"github.com/fleet-agent/fleet-agent/internal/testutil/golden"
)

// Routes the lifecycle asserts on.
const (
	routeCreateCluster = "POST /v2/kubernetes/clusters"
	routeGetCluster    = "GET /v2/kubernetes/clusters/{cluster_id}"
	routeDeleteCluster = "DELETE /v2/kubernetes/clusters/{cluster_id}"
	routeCreatePool    = "POST /v2/kubernetes/clusters/{cluster_id}/node_pools"
	routeUpdatePool    = "PUT /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}"
	routeDeletePool    = "DELETE /v2/kubernetes/clusters/{cluster_id}/node_pools/{node_pool_id}"
	routeSizes         = "GET /v2/sizes"
)

// TestSubstrateLifecycle: the reference's DOKS document (with a second,
// Spot GPU flavor) is planned with its live checks and applied on a real
// bbolt file; the substrate reconciler brings the cluster and one node pool
// per flavor up on the emulator, on DOKS-like durations of the injected
// clock, and stays creating for want of the node daemon. The emulator holds
// what the documented surface names: the cluster `fa-gpu-fleet-<6>` tagged with the
// pool id, device plugins off, node pools `fa-<6>-<flavor>` labelled with the
// pool id (and capacity=spot on the Spot one), the GPU size and Spot on the
// wire. Converged, passes make no request; a restart reads the cluster and
// its node pools once. A resize converges in place with one PUT; a discovery
// sweep lists the account's clusters once; a teardown with prune leaves
// nothing of ours at the emulator and nothing in the journal. The requests
// of each phase are held to testdata/substrate-requests.golden.
func TestSubstrateLifecycle(t *testing.T) {
	a := newDOKSAgent(t, doemu.Options{}, nil)
	var phases []phase

	phases = append(phases, a.measure("plan and apply", func() int {
		a.apply(doksDocument(t, h100Flavor(2), l40sSpot()), false)
		return 0
	}))
	poolID := a.poolID()
	if st := a.status(); st.State != "pending" {
		t.Fatalf("before a pass: %+v", st)
	}

	create := a.measure("create", func() int { return a.converge(200) })
	phases = append(phases, create)
	t.Logf("create converged in %d passes, %s on the clock, %s of wall time", create.passes, create.simulated, create.wall.Round(time.Millisecond))
	st := a.status()
	if st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) || st.Mode != "create" {
		t.Fatalf("after create: %+v", st)
	}
	ours := a.ours()
	if len(ours) != 1 {
		t.Fatalf("%d clusters of ours at the emulator, want 1:\n%s", len(ours), describeClusters(ours))
	}
	c := ours[0]
	name := substrate.ClusterName("gpu-fleet", testOwner(poolID))
	tail := testOwner(poolID).Suffix()
	switch {
	case c.Name != name || name != "fa-gpu-fleet-"+tail || c.Region != "tor1" || c.State != "running":
		t.Errorf("cluster %s %s in %s, want %s running in tor1", c.Name, c.State, c.Region, name)
	case !hasAll(c.Tags, "fleet-agent", "fleet-agent:substrate-pool:"+poolID, "fleet-agent:installation:"+testInstallation):
		t.Errorf("cluster tags %v: want the marker and the pool id", c.Tags)
	case !pluginOff(c.NvidiaPlugin) || !pluginOff(c.AmdPlugin):
		t.Errorf("device plugins %v %v: want both off", c.NvidiaPlugin, c.AmdPlugin)
	case st.Cluster.ID != c.ID || st.Cluster.GlobalID != c.ID || st.Cluster.Location != "tor1" || st.Cluster.Endpoint == "" || st.Cluster.Version == "":
		t.Errorf("status cluster %+v, emulator id %s", st.Cluster, c.ID)
	}
	want := map[string]struct {
		size   string
		count  int
		spot   bool
		labels map[string]string
		tags   []string
	}{
		"fa-system":            {"s-2vcpu-4gb", 1, false, nil, []string{"fleet-agent"}},
		"fa-" + tail + "-h100": {"gpu-h100x8-640gb", 2, false, testOwner(poolID).PoolLabels(false), []string{"fleet-agent", "fleet-agent:substrate-pool:" + poolID, "fleet-agent:installation:" + testInstallation}},
		"fa-" + tail + "-l40s": {"gpu-l40sx1-48gb", 1, true, testOwner(poolID).PoolLabels(true), []string{"fleet-agent", "fleet-agent:substrate-pool:" + poolID, "fleet-agent:installation:" + testInstallation, "fleet-agent:capacity:spot"}},
	}
	if len(c.Pools) != len(want) {
		t.Fatalf("%d node pools, want %d:\n%s", len(c.Pools), len(want), describeClusters(ours))
	}
	for _, p := range c.Pools {
		w, ok := want[p.Name]
		switch {
		case !ok:
			t.Errorf("unexpected node pool %s", p.Name)
		case p.Size != w.size || p.Count != w.count || p.Nodes != w.count || p.Spot != w.spot || p.Deleting:
			t.Errorf("node pool %s: %s x%d (%d nodes) spot %v, want %s x%d spot %v", p.Name, p.Size, p.Count, p.Nodes, p.Spot, w.size, w.count, w.spot)
		case len(p.Labels) != len(w.labels) || !hasAll(p.Tags, w.tags...):
			t.Errorf("node pool %s: labels %v tags %v, want labels %v tags %v", p.Name, p.Labels, p.Tags, w.labels, w.tags)
		}
		for k, v := range w.labels {
			if p.Labels[k] != v {
				t.Errorf("node pool %s: label %s=%q, want %q", p.Name, k, p.Labels[k], v)
			}
		}
	}
	if len(st.NodePools) != 2 || st.NodePools[0].Status != "running" || st.NodePools[1].Status != "running" {
		t.Errorf("status node pools %+v", st.NodePools)
	}
	// On the wire: the cluster asks for the device plugins off; the GPU
	// size and Spot go in the node pools' creates, once each.
	cb := a.bodies(routeCreateCluster)
	if len(cb) != 1 || cb[0]["region"] != "tor1" || cb[0]["name"] != name || !wireOff(cb[0]["nvidia_gpu_device_plugin"]) || !wireOff(cb[0]["amd_gpu_device_plugin"]) {
		t.Errorf("cluster creates %v", cb)
	}
	pb := a.bodies(routeCreatePool)
	if len(pb) != 2 {
		t.Fatalf("%d node pool creates, want 2: %v", len(pb), pb)
	}
	for _, b := range pb {
		switch b["name"] {
		case "fa-" + tail + "-h100":
			if b["size"] != "gpu-h100x8-640gb" || b["count"] != 2.0 || b["spot"] != nil {
				t.Errorf("h100 create %v", b)
			}
		case "fa-" + tail + "-l40s":
			if b["size"] != "gpu-l40sx1-48gb" || b["count"] != 1.0 || b["spot"] != true || b["labels"].(map[string]any)[providers.LabelCapacity] != "spot" {
				t.Errorf("l40s create %v", b)
			}
		default:
			t.Errorf("node pool create %v", b)
		}
	}

	// Converged: passes make no request.
	idle := a.measure("idle (10 passes, 10 minutes)", func() int {
		for range 10 {
			a.clk.Advance(time.Minute)
			if err := a.rec.ReconcileOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		return 10
	})
	phases = append(phases, idle)
	if len(idle.routes) != 0 {
		t.Errorf("a converged substrate's passes made %d requests: %v", len(idle.routes), idle.routes)
	}
	// A restart cannot know what changed while it was down: one full look.
	restart := a.measure("restart (one pass)", func() int {
		a.restart()
		if err := a.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		return 1
	})
	phases = append(phases, restart)
	// The cluster, then its node pools (DOKS lists them inside the cluster:
	// a second read of it), and the sizes for their GPUs (a new process's
	// catalogue is empty).
	if want := []string{routeGetCluster, routeGetCluster, routeSizes}; !slices.Equal(restart.routes, want) {
		t.Errorf("a restart: %v, want %v", restart.routes, want)
	}

	resize := a.measure("resize h100 2 -> 3", func() int {
		a.apply(doksDocument(t, h100Flavor(3), l40sSpot()), false)
		return a.converge(100)
	})
	phases = append(phases, resize)
	if resize.count(routeUpdatePool) != 1 || resize.count(routeCreatePool)+resize.count(routeCreateCluster) != 0 {
		t.Errorf("a resize: %v", resize.routes)
	}
	for _, p := range a.ours()[0].Pools {
		if p.Name == "fa-"+tail+"-h100" && (p.Count != 3 || p.Nodes != 3) {
			t.Errorf("h100 after the resize: count %d, %d nodes", p.Count, p.Nodes)
		}
	}
	if got := a.status().Cluster.ID; got != c.ID {
		t.Fatalf("the cluster was replaced: %s -> %s", c.ID, got)
	}

	sweep := a.measure("discovery sweep", func() int {
		rep, err := a.rec.Sweep(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Listed != 1 || rep.Orphans+rep.Ghosts+rep.Reported+rep.Adopted+rep.NodePoolOrphans+rep.Errors != 0 {
			t.Errorf("sweep: %+v", rep)
		}
		return 0
	})
	phases = append(phases, sweep)

	teardown := a.measure("teardown (pool left out, prune)", func() int {
		a.apply(doksDocument(t), true)
		return a.converge(100)
	})
	phases = append(phases, teardown)
	t.Logf("teardown converged in %d passes, %s on the clock, %s of wall time", teardown.passes, teardown.simulated, teardown.wall.Round(time.Millisecond))
	if left := a.ours(); len(left) != 0 {
		t.Errorf("left at the emulator after teardown:\n%s", describeClusters(left))
	}
	if st := a.status(); st.State != "deleted" || len(st.NodePools) != 0 {
		t.Errorf("after teardown: %+v", st)
	}
	if teardown.count(routeDeleteCluster) != 1 || teardown.count(routeDeletePool) != 2 {
		t.Errorf("teardown deletes: %v", teardown.routes)
	}
	if open := a.journal().open; len(open) != 0 {
		t.Errorf("unfinished operations after teardown: %v", open)
	}
	totals := map[string]int{}
	for _, x := range a.emu.Exchanges() {
		totals[x.Route]++
	}
	if totals[routeCreateCluster] != 1 || totals[routeCreatePool] != 2 {
		t.Errorf("creates over the whole run: %d clusters, %d node pools", totals[routeCreateCluster], totals[routeCreatePool])
	}
	golden.Check(t, filepath.Join("testdata", "substrate-requests.golden"), table(phases))

	// The API token (a canary) is in no log line and not in the state file.
	db, err := os.ReadFile(a.path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(db), apiToken) || strings.Contains(a.logs.String(), apiToken) {
		t.Error("the DigitalOcean token reached the state file or the log")
	}
}

func wireOff(v any) bool {
	m, ok := v.(map[string]any)
	return ok && m["enabled"] == false
}

// TestSubstrateCrashAfterCreate: the reconciler is killed right after the
// emulator accepted a create and before anything recorded it; restarted
// over the same state file and emulator, it finds the first attempt's
// object by name (DOKS has no client tokens) and converges with no twin.
func TestSubstrateCrashAfterCreate(t *testing.T) {
	for _, step := range []string{"createCluster", "createNodePool"} {
		t.Run(step, func(t *testing.T) {
			calls := map[string]killtest.Call{"createCluster": killtest.EnsureCluster, "createNodePool": killtest.EnsureNodePool}
			kill := &killtest.KillAfter{Call: calls[step]}
			a := newDOKSAgent(t, doemu.Options{}, kill)
			kill.Kill = func() {
				if err := a.store.Close(); err != nil {
					t.Error(err)
				}
			}
			a.apply(doksDocument(t, h100Flavor(2), l40sSpot()), false)
			for i := 0; !kill.Fired(); i++ {
				if i == 100 {
					t.Fatalf("the %s call was never made", step)
				}
				err := a.rec.ReconcileOnce(t.Context())
				if kill.Fired() {
					if err == nil {
						t.Fatal("a pass whose store was closed under it reported no error")
					}
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				a.clk.Advance(substrate.DefaultPoll)
			}
			// Started again over the same file: what the kill left in it.
			a.restart()
			var inFlight []string
			if err := a.store.View(func(tx *state.Tx) error {
				ops, err := tx.JournalOps("")
				for _, op := range ops {
					if op.Step == step && op.State == state.InFlight {
						inFlight = append(inFlight, op.Key)
					}
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(inFlight) != 1 {
				t.Fatalf("%d %s operations in flight at the crash, want 1", len(inFlight), step)
			}
			a.converge(200)
			if st := a.status(); st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) {
				t.Fatalf("after the restart: %+v", st)
			}
			ours := a.ours()
			if len(ours) != 1 || len(ours[0].Pools) != 3 {
				t.Fatalf("twins at the emulator:\n%s", describeClusters(ours))
			}
			names := map[string]int{}
			for _, p := range ours[0].Pools {
				names[p.Name]++
			}
			for n, k := range names {
				if k != 1 {
					t.Errorf("%d node pools named %s", k, n)
				}
			}
			if n := a.emu.Count(routeCreateCluster); n != 1 {
				t.Errorf("%d cluster creates, want 1", n)
			}
			if n := a.emu.Count(routeCreatePool); n != 2 {
				t.Errorf("%d node pool creates, want 2", n)
			}
			if open := a.journal().open; len(open) != 0 {
				t.Errorf("unfinished operations: %v", open)
			}
		})
	}
}

// TestSubstrateClusterTrouble: DigitalOcean puts the cluster in error while
// it provisions: the substrate is an error with DigitalOcean's message and
// makes no node pool; the journal holds that create as refused for this
// generation, so once DigitalOcean has the cluster running again it takes a
// changed document to go on, which then finds the same cluster (no second
// create). A running cluster that goes to error is noticed by the discovery
// sweep and reported with DigitalOcean's message, and the substrate goes on
// by itself once the cluster runs again. A degraded cluster still takes node
// pool changes: a resize converges.
func TestSubstrateClusterTrouble(t *testing.T) {
	a := newDOKSAgent(t, doemu.Options{}, nil)
	pass := func(n int) {
		for range n {
			if err := a.rec.ReconcileOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
			a.clk.Advance(substrate.DefaultPoll)
		}
	}
	a.apply(doksDocument(t, h100Flavor(1)), false)
	pass(3)
	ours := a.ours()
	if len(ours) != 1 || ours[0].State != "provisioning" {
		t.Fatalf("before the trouble:\n%s", describeClusters(ours))
	}
	id := ours[0].ID
	const why = "the control plane could not be provisioned in tor1"
	if err := a.emu.SetClusterState(id, "error", why); err != nil {
		t.Fatal(err)
	}
	pass(3)
	if st := a.status(); st.State != "error" || !strings.Contains(st.Message, why) {
		t.Fatalf("a cluster in error while it provisions: %+v", st)
	}
	if n := a.emu.Count(routeCreatePool); n != 0 {
		t.Fatalf("%d node pools made on a cluster in error", n)
	}
	if err := a.emu.SetClusterState(id, "running", ""); err != nil {
		t.Fatal(err)
	}
	a.apply(doksDocument(t, h100Flavor(2)), false)
	a.converge(100)
	if st := a.status(); st.State != "creating" || st.Cluster.ID != id || len(st.NodePools) != 1 || st.NodePools[0].Nodes != 2 {
		t.Fatalf("after a changed document: %+v", st)
	}
	if n := a.emu.Count(routeCreateCluster); n != 1 {
		t.Fatalf("%d cluster creates, want 1", n)
	}

	const lost = "the control plane is unreachable"
	if err := a.emu.SetClusterState(id, "error", lost); err != nil {
		t.Fatal(err)
	}
	if _, err := a.rec.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	pass(1)
	if st := a.status(); st.State != "error" || !strings.Contains(st.Message, lost) {
		t.Fatalf("a running cluster gone to error, after a sweep: %+v", st)
	}
	if err := a.emu.SetClusterState(id, "running", ""); err != nil {
		t.Fatal(err)
	}
	a.clk.Advance(substrate.DefaultEvery)
	a.converge(20)
	if st := a.status(); st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) {
		t.Fatalf("once running again: %+v", st)
	}

	const sick = "2 of 3 nodes of the control plane are unhealthy"
	if err := a.emu.SetClusterState(id, "degraded", sick); err != nil {
		t.Fatal(err)
	}
	a.apply(doksDocument(t, h100Flavor(3)), false)
	a.converge(100)
	if st := a.status(); st.State != "creating" || len(st.NodePools) != 1 || st.NodePools[0].Nodes != 3 {
		t.Fatalf("a resize on a degraded cluster: %+v", st)
	}
	if c := a.ours(); c[0].State != "degraded" || slices.IndexFunc(c[0].Pools, func(p doemu.PoolState) bool { return p.Count == 3 && p.Nodes == 3 }) < 0 {
		t.Fatalf("at the emulator:\n%s", describeClusters(c))
	}
}
