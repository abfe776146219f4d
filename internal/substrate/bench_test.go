package substrate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

const benchPools = 100

// benchEnv converges 100 substrates of 4 flavors each on the fake.
func benchEnv(b *testing.B) *env {
	e := newEnv(b, nil)
	e.crash()
	e.fakeCfg.StatePath = "" // the provider's truth in memory: setting up 500 node pools on disk takes long and measures nothing
	e.fakeCfg.Steps = fake.Steps{}
	e.start()
	var step crashtest.Step
	for i := range benchPools {
		step.Pools = append(step.Pools, crashtest.Pool{Name: fmt.Sprintf("gpu-%03d", i), Flavors: []crashtest.Flavor{
			{Name: "h100", MachineType: "fake-h100x8", Nodes: 1},
			{Name: "l4", MachineType: "fake-l4x1", Nodes: 2, Spot: true},
			{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 1, Autoscaling: &[2]int{1, 3}},
			{Name: "cpu8", MachineType: "fake-cpu-8", Nodes: 1},
		}})
	}
	e.applyStep(step)
	e.converge(time.Second, 20)
	if n := len(e.records()); n != benchPools {
		b.Fatalf("%d substrates", n)
	}
	return e
}

// BenchmarkReconcileIdle: a reconcile of 100 converged substrates (nothing
// to do) against the floor, reading their records from the state file,
// measured in the same run; it reports both per substrate and their ratio
// (goal: at most 3).
func BenchmarkReconcileIdle(b *testing.B) {
	e := benchEnv(b)
	read := func() {
		if err := e.store.View(func(tx *state.Tx) error {
			recs, err := tx.Substrates()
			if len(recs) != benchPools {
				b.Fatalf("%d records", len(recs))
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	calls := e.fake.Calls("GetCluster") + e.fake.Calls("ListNodePools")
	// The floor and the reconcile alternate, so that a machine whose load
	// moves weighs on both alike.
	var floor, rec time.Duration
	for b.Loop() {
		t0 := time.Now()
		read()
		t1 := time.Now()
		if err := e.rec.ReconcileOnce(b.Context()); err != nil {
			b.Fatal(err)
		}
		floor, rec = floor+t1.Sub(t0), rec+time.Since(t1)
	}
	if e.fake.Calls("GetCluster")+e.fake.Calls("ListNodePools") != calls {
		b.Fatal("an idle reconcile called the provider")
	}
	per := float64(rec.Nanoseconds()) / float64(b.N) / benchPools
	perFloor := float64(floor.Nanoseconds()) / float64(b.N) / benchPools
	b.ReportMetric(per, "ns/substrate")
	b.ReportMetric(perFloor, "floor-ns/substrate")
	b.ReportMetric(per/perFloor, "x-floor")
}

// BenchmarkReconcileVerify: the first pass after a start, which reads every
// substrate's cluster and node pools back from the provider (2 calls each),
// against the same floor.
func BenchmarkReconcileVerify(b *testing.B) {
	e := benchEnv(b)
	floor := measure(func() { _ = e.store.View(func(tx *state.Tx) error { _, err := tx.Substrates(); return err }) })
	opts := substrate.Options{Store: e.store, Providers: map[string]substrate.Provider{"fake": e.fake}, Clock: e.clock}
	for b.Loop() {
		if err := substrate.New(opts).ReconcileOnce(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / benchPools
	b.ReportMetric(per, "ns/substrate")
	b.ReportMetric(per/(floor/benchPools), "x-floor")
}

// measure is the median time of fn over three rounds of 200 calls, in ns.
func measure(fn func()) float64 {
	var rounds []float64
	for range 3 {
		start := time.Now()
		for range 200 {
			fn()
		}
		rounds = append(rounds, float64(time.Since(start).Nanoseconds())/200)
	}
	if rounds[0] > rounds[1] {
		rounds[0], rounds[1] = rounds[1], rounds[0]
	}
	if rounds[1] > rounds[2] {
		rounds[1], rounds[2] = rounds[2], rounds[1]
	}
	if rounds[0] > rounds[1] {
		rounds[0], rounds[1] = rounds[1], rounds[0]
	}
	return rounds[1]
}
