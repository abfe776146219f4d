package gkeemu_test

import (
	"strings"
	"testing"
	"time"

	container "google.golang.org/api/container/v1"

	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// upgradeEnv serves versions (newest first) with creates that finish on
// the first look and upgrades that take ten minutes of the clock.
func upgradeEnv(t *testing.T, versions ...string) *env {
	return start(t, func(o *gkeemu.Options) {
		o.Versions, o.DefaultVersion = versions, versions[len(versions)-1]
		o.Steps = gkeemu.Steps{Cluster: 1, NodePool: 1, Update: 600, Delete: 1}
		o.StepEvery = time.Second
	})
}

func (v *env) op(t *testing.T, loc string, op *container.Operation) *container.Operation {
	t.Helper()
	got, err := v.ctr.Projects.Locations.Operations.Get(parent(loc) + "/operations/" + op.Name).Context(t.Context()).Do()
	if err != nil {
		t.Fatalf("operations.get: %v", err)
	}
	return got
}

// metric is one metric of an operation's progress, or -1.
func metric(op *container.Operation, name string) int64 {
	if op.Progress == nil {
		return -1
	}
	for _, m := range op.Progress.Metrics {
		if m.Name == name {
			return m.IntValue
		}
	}
	return -1
}

func (v *env) upgradeMaster(t *testing.T, zone, name, version string) (*container.Operation, error) {
	t.Helper()
	return v.ctr.Projects.Locations.Clusters.Update(clusterName(zone, name), &container.UpdateClusterRequest{
		Update: &container.ClusterUpdate{DesiredMasterVersion: version}}).Context(t.Context()).Do()
}

func (v *env) upgradePool(t *testing.T, zone, cluster, pool, version string) (*container.Operation, error) {
	t.Helper()
	name := clusterName(zone, cluster) + "/nodePools/" + pool
	p, err := v.ctr.Projects.Locations.Clusters.NodePools.Get(name).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	return v.ctr.Projects.Locations.Clusters.NodePools.Update(name, &container.UpdateNodePoolRequest{
		NodeVersion: version, ImageType: p.Config.ImageType}).Context(t.Context()).Do()
}

func refusedWith(t *testing.T, what string, err error, wantStatus, wantText string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: taken, want %s", what, wantStatus)
		return
	}
	g := gerr(t, err)
	if g.Code != 400 || status(g) != wantStatus || !strings.Contains(g.Message, wantText) {
		t.Errorf("%s: %d %s %q, want 400 %s saying %q", what, g.Code, status(g), g.Message, wantStatus, wantText)
	}
}

func (v *env) createAt(t *testing.T, zone, name, version string) {
	t.Helper()
	req := cpuCluster(name, 3)
	req.Cluster.InitialClusterVersion = version
	op, err := v.ctr.Projects.Locations.Clusters.Create(parent(zone), req).Context(t.Context()).Do()
	if err != nil {
		t.Fatal(err)
	}
	v.wait(t, zone, op, 5)
}

// TestMasterUpgradeOneMinorOnTheClock: clusters.update with
// desiredMasterVersion goes up one minor per operation, on the clock, with
// its progress; a jump of two minors and a second change while it runs are
// refused with GKE's statuses.
func TestMasterUpgradeOneMinorOnTheClock(t *testing.T) {
	v := upgradeEnv(t, "1.35.1-gke.1200000", "1.34.3-gke.1100000", "1.33.5-gke.1400000")
	zone := "us-central1-a"
	v.createAt(t, zone, "c1", "1.33")
	_, err := v.upgradeMaster(t, zone, "c1", "1.35")
	refusedWith(t, "a jump of two minors", err, "INVALID_ARGUMENT", "one minor version at a time")
	op, err := v.upgradeMaster(t, zone, "c1", "1.34")
	if err != nil {
		t.Fatal(err)
	}
	if op.OperationType != "UPGRADE_MASTER" || op.Status != "RUNNING" {
		t.Fatalf("the upgrade: %+v", op)
	}
	_, err = v.upgradeMaster(t, zone, "c1", "1.34")
	refusedWith(t, "a second upgrade while one runs", err, "FAILED_PRECONDITION", "Please wait and try again once it's done")
	_, err = v.upgradePool(t, zone, "c1", "system", "1.34")
	refusedWith(t, "a node upgrade while the master's runs", err, "FAILED_PRECONDITION", "Please wait and try again once it's done")
	v.clk.Advance(5 * time.Minute)
	if got := v.op(t, zone, op); got.Status != "RUNNING" || metric(got, "NODES_DONE") != 0 {
		t.Errorf("after 5 of 10 minutes: %s, progress %+v", got.Status, got.Progress)
	}
	if c, _ := v.ctr.Projects.Locations.Clusters.Get(clusterName(zone, "c1")).Context(t.Context()).Do(); c.Status != "RECONCILING" || c.CurrentMasterVersion != "1.33.5-gke.1400000" {
		t.Errorf("during the upgrade: %s at %s", c.Status, c.CurrentMasterVersion)
	}
	v.clk.Advance(5 * time.Minute)
	if got := v.op(t, zone, op); got.Status != "DONE" || metric(got, "NODES_DONE") != 1 {
		t.Errorf("after 10 minutes: %s, progress %+v", got.Status, got.Progress)
	}
	if c, _ := v.ctr.Projects.Locations.Clusters.Get(clusterName(zone, "c1")).Context(t.Context()).Do(); c.Status != "RUNNING" || c.CurrentMasterVersion != "1.34.3-gke.1100000" {
		t.Errorf("after the upgrade: %s at %s", c.Status, c.CurrentMasterVersion)
	}
	_, err = v.upgradeMaster(t, zone, "c1", "1.33")
	refusedWith(t, "a downgrade", err, "INVALID_ARGUMENT", "cannot be downgraded")
}

// TestNodePoolUpgrade: nodePools.update with nodeVersion replaces a pool's
// nodes on the clock, the operation counting them; a version newer than the
// master and a second change while it runs are refused.
func TestNodePoolUpgrade(t *testing.T) {
	v := upgradeEnv(t, "1.35.1-gke.1200000", "1.34.3-gke.1100000", "1.33.5-gke.1400000")
	zone := "us-central1-a"
	v.createAt(t, zone, "c1", "1.33")
	_, err := v.upgradePool(t, zone, "c1", "system", "1.34")
	refusedWith(t, "nodes newer than the master", err, "INVALID_ARGUMENT", "must not be newer than the master version 1.33.5-gke.1400000")
	op, err := v.upgradeMaster(t, zone, "c1", "1.34")
	if err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(10 * time.Minute)
	v.wait(t, zone, op, 2)

	op, err = v.upgradePool(t, zone, "c1", "system", "1.34")
	if err != nil {
		t.Fatal(err)
	}
	if op.OperationType != "UPGRADE_NODES" || !strings.HasSuffix(op.TargetLink, "/nodePools/system") || metric(op, "NODES_TOTAL") != 3 || metric(op, "NODES_DONE") != 0 {
		t.Fatalf("the node upgrade: %+v %+v", op, op.Progress)
	}
	_, err = v.upgradePool(t, zone, "c1", "system", "1.34")
	refusedWith(t, "a second change while it runs", err, "FAILED_PRECONDITION", "Please wait and try again once it's done")
	v.clk.Advance(200 * time.Second)
	if got := v.op(t, zone, op); got.Status != "RUNNING" || metric(got, "NODES_DONE") != 1 {
		t.Errorf("after a third of the time: %s, progress %+v", got.Status, got.Progress)
	}
	pool := func() *container.NodePool {
		p, err := v.ctr.Projects.Locations.Clusters.NodePools.Get(clusterName(zone, "c1") + "/nodePools/system").Context(t.Context()).Do()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := pool(); p.Status != "RECONCILING" || p.Version != "1.33.5-gke.1400000" {
		t.Errorf("during the upgrade the pool is %s at %s", p.Status, p.Version)
	}
	v.clk.Advance(400 * time.Second)
	if got := v.op(t, zone, op); got.Status != "DONE" || metric(got, "NODES_DONE") != 3 {
		t.Errorf("after the time: %s, progress %+v", got.Status, got.Progress)
	}
	if p := pool(); p.Status != "RUNNING" || p.Version != "1.34.3-gke.1100000" {
		t.Errorf("after the upgrade the pool is %s at %s", p.Status, p.Version)
	}
	_, err = v.upgradePool(t, zone, "c1", "system", "1.33")
	refusedWith(t, "a node downgrade", err, "INVALID_ARGUMENT", "cannot be downgraded")
}

// TestMasterUpgradeKeepsTheKubeletSkew: the master does not go more than
// three minors past a node pool; the refusal names the pool.
func TestMasterUpgradeKeepsTheKubeletSkew(t *testing.T) {
	v := upgradeEnv(t, "1.34.1-gke.1", "1.33.1-gke.1", "1.32.1-gke.1", "1.31.1-gke.1", "1.30.1-gke.1")
	zone := "us-central1-a"
	v.createAt(t, zone, "c1", "1.30")
	for _, to := range []string{"1.31", "1.32", "1.33"} {
		op, err := v.upgradeMaster(t, zone, "c1", to)
		if err != nil {
			t.Fatalf("to %s with 1.30 nodes: %v", to, err)
		}
		v.clk.Advance(10 * time.Minute)
		v.wait(t, zone, op, 2)
	}
	_, err := v.upgradeMaster(t, zone, "c1", "1.34")
	refusedWith(t, "four minors past the nodes", err, "INVALID_ARGUMENT", "node pool system runs 1.30.1-gke.1")
}
