package aws_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// sweep runs the discovery sweep once.
func (e *substrateEnv) sweep() substrate.SweepReport {
	e.t.Helper()
	rep, err := e.rec.Sweep(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// rest runs the agent at rest for d on the clock as Run schedules it (a
// pass of every substrate each Every, the sweep each SweepEvery) and
// returns the requests it made, by operation.
func (e *substrateEnv) rest(d time.Duration) map[string]int {
	e.t.Helper()
	before := e.emu.Counts()
	for at := time.Duration(0); at < d; at += substrate.DefaultEvery {
		e.clk.Advance(substrate.DefaultEvery)
		if err := e.rec.ReconcileOnce(e.t.Context()); err != nil {
			e.t.Fatal(err)
		}
		if (at+substrate.DefaultEvery)%substrate.DefaultSweepEvery == 0 {
			if rep := e.sweep(); rep != (substrate.SweepReport{Listed: 1}) {
				e.t.Fatalf("at rest, at %s: sweep %+v", at, rep)
			}
		}
	}
	return since(before, e.emu.Counts())
}

// unit is the requests one read makes.
func (e *substrateEnv) unit(read func() error) map[string]int {
	e.t.Helper()
	before := e.emu.Counts()
	if err := read(); err != nil {
		e.t.Fatal(err)
	}
	return since(before, e.emu.Counts())
}

func sumCalls(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestSweepAtRestOnEKS measures what a converged substrate costs at rest
// on the emulator over a day on the injected clock, against the floor: one
// listing of the account's clusters per sweep interval (EKS lists names
// only, so the listing is ListClusters and a DescribeCluster per cluster),
// and one full read of the node groups a day. EKS gives nothing cheaper
// than its node groups themselves to tell that one changed (no revision on
// the cluster, ListNodegroups names only): the sweep reads them each
// interval, and the measure holds it to exactly that. A node group resized
// at the provider (as the console does, through UpdateNodegroupConfig) is
// seen by the first sweep after it is done, and set back.
func TestSweepAtRestOnEKS(t *testing.T) {
	e := newSubstrateEnv(t, nil)
	ctx := t.Context()
	e.apply(referenceDocument(t, nil), false)
	e.converge(200)
	st := e.status()
	ref := providers.ClusterRef{ID: st.Cluster.ID}

	// What the floor is made of, read through an adapter of its own with
	// nothing cached (as a day later).
	cold := e.open()
	list := sumCalls(e.unit(func() error { _, err := cold.ListClusters(ctx, e.acct, providers.LabelSubstratePool); return err }))
	full := sumCalls(e.unit(func() error { _, err := cold.ListNodePools(ctx, e.acct, ref); return err }))
	// The node groups' own read, caches warm: what EKS needs to tell.
	groups := e.unit(func() error { _, err := cold.ListNodePools(ctx, e.acct, ref); return err })
	perInterval := float64(time.Hour / substrate.DefaultSweepEvery)
	floor := perInterval*float64(list) + float64(full)*float64(time.Hour)/float64(substrate.DefaultNodePoolCheckEvery)
	allowed := perInterval*float64(list+sumCalls(groups)) + float64(full)*float64(time.Hour)/float64(substrate.DefaultNodePoolCheckEvery)

	e.sweep()
	day := e.rest(substrate.DefaultNodePoolCheckEvery)
	perHour := float64(sumCalls(day)) / 24
	t.Logf("EKS at rest: %.2f requests per substrate per hour (a day: %v); floor %.2f (listing %d x %.0f per hour + a full read of %d a day); with the node groups' read each interval (%v) %.2f; ratio to the floor %.2f",
		perHour, day, floor, list, perInterval, full, groups, allowed, perHour/floor)
	if perHour > allowed {
		t.Errorf("at rest the agent makes %.2f requests per hour, above %.2f: %v", perHour, allowed, day)
	}
	if day["ListClusters"] != 24*int(perInterval) {
		t.Errorf("%d listings of the account in a day, want one per sweep (%d)", day["ListClusters"], 24*int(perInterval))
	}

	// A node group resized at the provider: the first sweep once the
	// update is done sees it, and the next passes set it back.
	np := st.NodePools[0].Name
	was := st.NodePools[0].Nodes
	if _, err := e.adapter.ResizeNodePool(ctx, e.acct, ref, np, providers.Size{NodeCount: was + 1}); err != nil {
		t.Fatal(err)
	}
	settled := false
	for range int(substrate.DefaultSweepEvery / time.Minute) {
		e.clk.Advance(time.Minute)
		if p, err := e.adapter.GetNodePool(ctx, e.acct, ref, np); err == nil && p.Status == providers.NodePoolRunning {
			settled = true
			break
		}
	}
	if !settled {
		t.Fatalf("the resize at the provider is not done after %s", substrate.DefaultSweepEvery)
	}
	if rep := e.sweep(); rep.Moved != 1 {
		t.Fatalf("the sweep after a resize at the provider: %+v, want the group moved", rep)
	}
	e.converge(200)
	if got := fmt.Sprint(e.status().NodePools[0].Nodes); got != fmt.Sprint(was) {
		t.Fatalf("after the passes: %s nodes, want %d", got, was)
	}
}
