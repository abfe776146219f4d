package substrate_test

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

var fleetAccount = providers.Account{Name: crashtest.Account, Provider: "fake", Config: []byte(`{"token":"secret://fake-token","project":"fleet"}`)}

var gpuStep = crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}}}}

func gpuID() string { return inventory.ID("root", inventory.Pool, "gpu") }

// makeCluster makes a running cluster at the fake behind the agent's back.
func (e *env) makeCluster(name string, labels map[string]string) providers.Cluster {
	e.t.Helper()
	c, err := e.fake.EnsureCluster(e.t.Context(), fleetAccount, providers.ClusterSpec{Name: name, Location: "fake-east",
		Labels: labels})
	if err != nil {
		e.t.Fatal(err)
	}
	for range 5 {
		_ = e.fake.Advance()
	}
	return c
}

func (e *env) sweep() substrate.SweepReport {
	e.t.Helper()
	rep, err := e.rec.Sweep(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// TestSweepTakesBackAnUnrecordedCluster: the state file is restored from a
// backup taken before the cluster was made; the sweep finds the cluster by
// its label and takes it back, and nothing is made twice.
func TestSweepTakesBackAnUnrecordedCluster(t *testing.T) {
	e := newEnvOn(t, nil, false) // restores the file itself
	e.applyStep(gpuStep)
	backup := e.statePath + ".bak"
	copyFile(t, e.statePath, backup)
	e.converge(10*time.Second, 30)
	e.crash()
	copyFile(t, backup, e.statePath)
	e.start()
	if rep := e.sweep(); rep.Adopted != 1 || rep.Orphans+rep.Reported != 0 {
		t.Fatalf("sweep %+v", rep)
	}
	e.converge(10*time.Second, 30)
	if e.fake.Calls("EnsureCluster") != 0 || e.fake.Calls("EnsureNodePool") != 0 {
		t.Fatalf("made again: EnsureCluster %d EnsureNodePool %d", e.fake.Calls("EnsureCluster"), e.fake.Calls("EnsureNodePool"))
	}
	e.check(gpuStep)
	if rep := e.sweep(); rep != (substrate.SweepReport{Listed: 1}) {
		t.Fatalf("second sweep %+v", rep)
	}
}

// TestSweepOrphans: a second cluster of ours for a pool (certainly ours:
// label, name, known pool) is removed; one whose pool this state file does
// not know is reported and left alone; a cluster left after a teardown is
// removed.
func TestSweepOrphans(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 30)
	id := gpuID()
	twin := e.makeCluster("fa-twin-"+testOwner(id).Suffix(), testOwner(id).Labels())
	stranger := e.makeCluster("fa-x-zzzzzz", map[string]string{providers.LabelSubstratePool: "pool_someoneelseszzzzzz"})
	// Another installation's cluster for a pool of the same id (staging
	// beside prod in one account), under its own name and under ours: it
	// is never an orphan of ours.
	other := providers.Owner{Installation: "0ther000000000000000000000000000", PoolID: id}
	theirs := e.makeCluster(substrate.ClusterName("gpu", other), other.Labels())
	ourName := e.makeCluster("fa-twin2-"+testOwner(id).Suffix(), other.Labels())
	rep := e.sweep()
	if rep.Orphans != 1 || rep.Reported != 1 || rep.Adopted != 0 || rep.Foreign != 2 {
		t.Fatalf("sweep %+v", rep)
	}
	e.converge(10*time.Second, 30)
	if st := e.status("gpu"); !strings.Contains(st.Message, "installation "+other.Installation) {
		t.Errorf("the status does not name the other installation: %q", st.Message)
	}
	truth := e.fake.Snapshot()
	if _, ok := truth.Clusters[twin.Ref.ID]; ok {
		t.Fatal("the twin is still there")
	}
	if _, ok := truth.Clusters[stranger.Ref.ID]; !ok {
		t.Fatal("a cluster this state file cannot explain was deleted")
	}
	for _, c := range []providers.Cluster{theirs, ourName} {
		if _, ok := truth.Clusters[c.Ref.ID]; !ok {
			t.Fatalf("another installation's cluster %s was deleted", c.Ref.Name)
		}
		if _, err := e.fake.DeleteCluster(t.Context(), fleetAccount, c.Ref); err != nil {
			t.Fatal(err)
		}
	}
	// Its owner removes it; then the provider holds what the document says.
	if _, err := e.fake.DeleteCluster(t.Context(), fleetAccount, stranger.Ref); err != nil {
		t.Fatal(err)
	}
	_ = e.fake.Advance()
	e.check(gpuStep)
	// Torn down, and a cluster with its name and label appears again.
	last := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Left: true}}, Prune: true}
	e.applyStep(last)
	e.converge(10*time.Second, 30)
	leak := e.makeCluster(substrate.ClusterName("gpu", testOwner(id)), testOwner(id).Labels())
	if rep := e.sweep(); rep.Orphans != 1 {
		t.Fatalf("sweep after teardown %+v", rep)
	}
	e.converge(10*time.Second, 30)
	if _, ok := e.fake.Snapshot().Clusters[leak.Ref.ID]; ok {
		t.Fatal("the leaked cluster is still there")
	}
	if st := e.status("gpu"); st.State != "deleted" {
		t.Fatalf("%+v", st)
	}
	if !strings.Contains(e.logs.String(), "made by hand") {
		t.Fatal("the reported cluster was not logged")
	}
}

// TestSweepGhosts: a cluster and a node pool deleted behind the agent's
// back are made again; an extra node pool of ours is removed; an adopted
// cluster that is gone is an error that says so.
func TestSweepGhosts(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 30)
	st := e.status("gpu")
	ref := providers.ClusterRef{ID: st.Cluster.ID}
	// A node pool goes, and an extra one of ours appears.
	if _, err := e.fake.DeleteNodePool(t.Context(), fleetAccount, ref, st.NodePools[0].Name); err != nil {
		t.Fatal(err)
	}
	extra := testOwner(gpuID()).NodePoolName("old")
	if _, err := e.fake.EnsureNodePool(t.Context(), fleetAccount, ref, providers.NodePoolSpec{Name: extra,
		Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}, Labels: testOwner(gpuID()).PoolLabels(false)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = e.fake.Advance()
	}
	if rep := e.sweep(); rep.Ghosts != 1 || rep.NodePoolOrphans != 1 {
		t.Fatalf("sweep %+v", rep)
	}
	e.converge(10*time.Second, 30)
	e.check(gpuStep)
	// The cluster goes.
	if _, err := e.fake.DeleteCluster(t.Context(), fleetAccount, ref); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = e.fake.Advance()
	}
	if rep := e.sweep(); rep.Ghosts != 1 {
		t.Fatalf("sweep %+v", rep)
	}
	e.converge(10*time.Second, 30)
	e.check(gpuStep)
	if again := e.status("gpu"); again.Cluster.ID == st.Cluster.ID || again.Cluster.ID == "" {
		t.Fatalf("not made again: %+v", again)
	}
	// An adopted cluster that goes is an error, not something to make.
	adopt := crashtest.Step{Pools: []crashtest.Pool{{Name: "own", Adopt: true, Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}}}}
	e.applyStep(adopt)
	e.converge(10*time.Second, 30)
	own := e.status("own")
	if _, err := e.fake.DeleteCluster(t.Context(), fleetAccount, providers.ClusterRef{ID: own.Cluster.ID}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = e.fake.Advance()
	}
	if rep := e.sweep(); rep.Ghosts != 1 {
		t.Fatalf("sweep %+v", rep)
	}
	for range 3 {
		_ = e.rec.ReconcileOnce(t.Context())
		e.clock.Advance(10 * time.Second)
	}
	if own := e.status("own"); own.State != "error" || !strings.Contains(own.Message, "is gone at the provider") {
		t.Fatalf("%+v", own)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSweepAtRest: at rest the sweep lists the account's clusters and
// nothing more; a substrate's node pools are listed again when its
// cluster's node pool revision moves (a node pool deleted behind the
// agent's back is found by the next sweep), and at the latest after
// NodePoolCheckEvery.
func TestSweepAtRest(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(gpuStep)
	e.converge(10*time.Second, 30)
	lists := func() int { return e.fake.Calls("ListNodePools") }
	steps := []struct {
		what  string
		do    func()
		lists int // ListNodePools calls the sweep makes
		rep   substrate.SweepReport
	}{
		{what: "the first sweep after the start", lists: 1},
		{what: "at rest", lists: 0},
		{what: "at rest again", lists: 0},
		{what: "a node pool deleted behind the agent's back", lists: 1, rep: substrate.SweepReport{Ghosts: 1}, do: func() {
			st := e.status("gpu")
			if _, err := e.fake.DeleteNodePool(t.Context(), fleetAccount, providers.ClusterRef{ID: st.Cluster.ID}, st.NodePools[0].Name); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				_ = e.fake.Advance()
			}
		}},
		{what: "made again by the next passes: the revision moved", lists: 1, do: func() { e.converge(10*time.Second, 30) }},
		{what: "at rest after that", lists: 0},
		{what: "a day later, whatever the revision says", lists: 1, do: func() { e.clock.Advance(substrate.DefaultNodePoolCheckEvery) }},
		{what: "at rest after the check", lists: 0},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		before := lists()
		rep := e.sweep()
		if got := lists() - before; got != s.lists {
			t.Errorf("%s: the sweep listed node pools %d times, want %d", s.what, got, s.lists)
		}
		if rep.Ghosts != s.rep.Ghosts || rep.NodePoolOrphans != 0 || rep.Listed != 1 {
			t.Errorf("%s: sweep %+v", s.what, rep)
		}
	}
	e.check(gpuStep)
}
