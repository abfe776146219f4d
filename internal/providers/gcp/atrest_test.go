package gcp_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// sweep runs the discovery sweep once.
func (a *agent) sweep() substrate.SweepReport {
	a.t.Helper()
	rep, err := a.rec.Sweep(a.t.Context())
	if err != nil {
		a.t.Fatal(err)
	}
	return rep
}

// rest runs the agent at rest for d on the clock as Run schedules it (a
// pass of every substrate each Every, the sweep each SweepEvery) and
// returns the requests it made, by method.
func (a *agent) rest(d time.Duration) map[string]int {
	a.t.Helper()
	mark := a.v.emu.Mark()
	for at := time.Duration(0); at < d; at += substrate.DefaultEvery {
		a.v.clk.Advance(substrate.DefaultEvery)
		if err := a.rec.ReconcileOnce(a.t.Context()); err != nil {
			a.t.Fatal(err)
		}
		if (at+substrate.DefaultEvery)%substrate.DefaultSweepEvery == 0 {
			if rep := a.sweep(); rep != (substrate.SweepReport{Listed: 1}) {
				a.t.Fatalf("at rest, at %s: sweep %+v", at, rep)
			}
		}
	}
	return calls(a.v.emu, mark)
}

// TestSweepAtRestOnGKE measures what a converged substrate costs at rest
// on the emulator over a day on the injected clock, against the floor: one
// listing of the project's clusters per sweep interval, and one full read
// of the node pools a day. GKE's node pools show no live size, so the
// sweep also lists the project's operations (one request, every location)
// to see a resize; the measure allows exactly that one request more per
// interval. A node pool resized at the provider (as the console or gcloud
// does, through setSize) is seen by the first sweep after it, and set
// back. Variants: the emulator's defaults, and the other answer to its
// guesses about a resize (the pool's etag, status and initialNodeCount all
// stay as they were, so that only the operation tells).
func TestSweepAtRestOnGKE(t *testing.T) {
	for _, vr := range []variant{
		{name: "defaults"},
		{name: "onlyTheOperationTells", emu: func(o *gkeemu.Options) {
			o.Guesses = gkeemu.Guesses{ResizeKeepsEtag: true, PoolRunningDuringOps: true}
		}},
	} {
		t.Run(vr.name, func(t *testing.T) { atRestOnGKE(t, vr) })
	}
}

func atRestOnGKE(t *testing.T, vr variant) {
	v := newEnv(t, envOpts{zones: []string{"us-central1-a"}, emu: vr.emu})
	a := newAgent(t, v)
	a.apply(gkeDoc{h100: 1, l4: 1}.bytes(t), false)
	a.converge(200)
	st := a.status()
	ref := providers.ClusterRef{ID: st.Cluster.ID}

	// What the floor is made of, read through an adapter of its own with
	// nothing cached (as a day later): one listing of the project's
	// clusters, one full read of the substrate's pools.
	cfg := gcp.DefaultConfig()
	cfg.ContainerEndpoint, cfg.ComputeEndpoint = v.emu.ContainerEndpoint(), v.emu.ComputeEndpoint()
	cold, err := gcp.New(cfg, v.secrets, gcp.WithClock(v.clk))
	if err != nil {
		t.Fatal(err)
	}
	mark := v.emu.Mark()
	if _, err := cold.ListClusters(t.Context(), v.acct, providers.LabelSubstratePool); err != nil {
		t.Fatal(err)
	}
	list := calls(v.emu, mark)["clusters.list"]
	mark = v.emu.Mark()
	if _, err := cold.ListNodePools(t.Context(), v.acct, ref); err != nil {
		t.Fatal(err)
	}
	full := total(calls(v.emu, mark))
	perInterval := float64(time.Hour / substrate.DefaultSweepEvery)
	floor := perInterval*float64(list) + float64(full)*float64(time.Hour)/float64(substrate.DefaultNodePoolCheckEvery)
	allowed := floor + perInterval // the operations listing

	// The first sweep after a start lists the pools (nothing is trusted
	// yet); the day measured starts after it.
	a.sweep()
	day := a.rest(substrate.DefaultNodePoolCheckEvery)
	perHour := float64(total(day)) / 24
	t.Logf("GKE at rest: %.2f API requests per substrate per hour, %.2f token fetches (a day: %s); floor %.2f (clusters.list %d x %.0f per hour + a full read of %d a day), with the operations listing %.2f; ratio to the floor %.2f",
		perHour, float64(day["oauth2.token"])/24, describeCalls(day), floor, list, perInterval, full, allowed, perHour/floor)
	if perHour > allowed {
		t.Errorf("at rest the agent makes %.2f API requests per hour, above the floor and the operations listing, %.2f: %s", perHour, allowed, describeCalls(day))
	}
	if day["clusters.list"] != 24*int(perInterval) {
		t.Errorf("%d listings of the project's clusters in a day, want one per sweep (%d)", day["clusters.list"], 24*int(perInterval))
	}

	// A node pool resized at the provider: the first sweep once it is done
	// sees it, and the next passes set the document's size again.
	np := st.NodePools[0].Name
	if _, err := v.ad.ResizeNodePool(t.Context(), v.acct, ref, np, providers.Size{NodeCount: 2}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		v.emu.Advance()
	}
	v.clk.Advance(substrate.DefaultSweepEvery)
	if rep := a.sweep(); rep.Moved != 1 {
		t.Fatalf("the sweep after a resize at the provider: %+v, want the pool moved", rep)
	}
	a.converge(200)
	if p, err := v.ad.GetNodePool(t.Context(), v.acct, ref, np); err != nil || p.NodeCount != 1 {
		t.Fatalf("after the passes: %+v %v, want 1 node again", p, err)
	}
	v.clk.Advance(substrate.DefaultSweepEvery)
	a.sweep() // the passes' own resize moved the revision: one listing
	if again := a.rest(time.Hour); again["clusters.nodePools.list"] != 0 || again["clusters.list"] != int(perInterval) {
		t.Errorf("an hour at rest after the resize: %s", describeCalls(again))
	}

	// A node pool deleted at the provider: the first sweep once it is gone
	// finds it missing, and the next passes make it again.
	if _, err := v.ad.DeleteNodePool(t.Context(), v.acct, ref, np); err != nil {
		t.Fatal(err)
	}
	gone := false
	for range 20 {
		v.emu.Advance()
		if _, err := v.ad.GetNodePool(t.Context(), v.acct, ref, np); errors.Is(err, providers.ErrNotFound) {
			gone = true
			break
		}
	}
	if !gone {
		t.Fatal("the node pool is not gone after its delete")
	}
	v.clk.Advance(substrate.DefaultSweepEvery)
	if rep := a.sweep(); rep.Ghosts != 1 {
		t.Fatalf("the sweep after a delete at the provider: %+v, want the pool missing", rep)
	}
	a.converge(200)
	if p, err := v.ad.GetNodePool(t.Context(), v.acct, ref, np); err != nil || p.NodeCount != 1 {
		t.Fatalf("after the passes: %+v %v, want the pool made again with 1 node", p, err)
	}

	// Operations the project cannot list (a role without
	// container.operations.list, an outage): that sweep reads the node
	// pools, as without a revision, and finds nothing to say.
	if err := v.emu.FailNext("container.projects.locations.operations.list", 1, http.StatusForbidden); err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(substrate.DefaultSweepEvery)
	mark = v.emu.Mark()
	if rep := a.sweep(); rep != (substrate.SweepReport{Listed: 1}) {
		t.Fatalf("the sweep without operations: %+v", rep)
	}
	if c := calls(v.emu, mark); c["operations.list"] != 1 || c["clusters.nodePools.list"] != 1 {
		t.Fatalf("the sweep without operations: %s, want the node pools read", describeCalls(c))
	}
}
