package digitalocean_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// routeListClusters is the account's listing, the sweep's one read.
const routeListClusters = "GET /v2/kubernetes/clusters"

// doksAccount is the reference document's account as the substrate reads
// it from the state file (doksDocument opts it into the Spot preview).
func doksAccount() providers.Account {
	raw, _ := json.Marshal(map[string]any{"token": "secret://root/do-api-token", "regions": []string{"tor1"}, "allowSpot": true, "previews": true})
	return providers.Account{Name: "managed-k8s", Provider: providers.DigitalOcean, Config: raw}
}

// sweep runs the discovery sweep once.
func (a *doksAgent) sweep() substrate.SweepReport {
	a.t.Helper()
	rep, err := a.rec.Sweep(a.t.Context())
	if err != nil {
		a.t.Fatal(err)
	}
	return rep
}

// rest runs the agent at rest for d on the clock as Run schedules it (a
// pass of every substrate each Every, the sweep each SweepEvery) and
// returns the requests it made, by route.
func (a *doksAgent) rest(d time.Duration) map[string]int {
	a.t.Helper()
	mark := a.emu.Mark()
	for at := time.Duration(0); at < d; at += substrate.DefaultEvery {
		a.clk.Advance(substrate.DefaultEvery)
		if err := a.rec.ReconcileOnce(a.t.Context()); err != nil {
			a.t.Fatal(err)
		}
		if (at+substrate.DefaultEvery)%substrate.DefaultSweepEvery == 0 {
			if rep := a.sweep(); rep != (substrate.SweepReport{Listed: 1}) {
				a.t.Fatalf("at rest, at %s: sweep %+v", at, rep)
			}
		}
	}
	out := map[string]int{}
	for _, r := range a.emu.Since(mark) {
		out[r]++
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func describe(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%d", k, m[k])
	}
	return s
}

// TestSweepAtRestOnDOKS measures what a converged substrate costs at rest
// on the emulator over a day on the injected clock, against the floor: one
// listing of the account's clusters per sweep interval, and one full read
// of the node pools a day. A node pool resized at the provider (as the
// control panel or doctl does, through the API) is seen by the first sweep
// after it, and set back.
func TestSweepAtRestOnDOKS(t *testing.T) {
	a := newDOKSAgent(t, doemu.Options{}, nil)
	a.apply(doksDocument(t, h100Flavor(2)), false)
	a.converge(200)
	acct := doksAccount()
	st := a.status()
	ref := providers.ClusterRef{ID: st.Cluster.ID}

	// What the floor is made of, read through an adapter of its own with
	// nothing cached (as a day later): one listing of the account, one
	// full read of the pools.
	cold, err := digitalocean.Open(block(t, "apiURL: "+a.url+"\n"), doksSecrets, digitalocean.WithClock(a.clk))
	if err != nil {
		t.Fatal(err)
	}
	unit := func(read func() error) int {
		mark := a.emu.Mark()
		if err := read(); err != nil {
			t.Fatal(err)
		}
		return len(a.emu.Since(mark))
	}
	list := unit(func() error { _, err := cold.ListClusters(t.Context(), acct, providers.LabelSubstratePool); return err })
	full := unit(func() error { _, err := cold.ListNodePools(t.Context(), acct, ref); return err })
	perInterval := float64(time.Hour / substrate.DefaultSweepEvery)
	floor := perInterval*float64(list) + float64(full)*float64(time.Hour)/float64(substrate.DefaultNodePoolCheckEvery)

	// The first sweep after a start lists the pools (nothing is trusted
	// yet); the day measured starts after it.
	a.sweep()
	day := a.rest(substrate.DefaultNodePoolCheckEvery)
	perHour := float64(sum(day)) / 24
	t.Logf("DOKS at rest: %.2f requests per substrate per hour (a day:%s); floor %.2f (listing %d request(s) x %.0f per hour + a full read of %d a day); ratio %.2f",
		perHour, describe(day), floor, list, perInterval, full, perHour/floor)
	if perHour > floor {
		t.Errorf("at rest the agent makes %.2f requests per hour, above the floor of %.2f:%s", perHour, floor, describe(day))
	}
	if day[routeListClusters] != 24*int(perInterval) {
		t.Errorf("%d listings of the account in a day, want one per sweep (%d)", day[routeListClusters], 24*int(perInterval))
	}

	// A node pool resized at the provider: the first sweep once it shows
	// sees it, and the next passes set the document's size again.
	np := st.NodePools[0].Name
	if _, err := a.ad.ResizeNodePool(t.Context(), acct, ref, np, providers.Size{NodeCount: 3}); err != nil {
		t.Fatal(err)
	}
	a.clk.Advance(substrate.DefaultSweepEvery)
	if rep := a.sweep(); rep.Moved != 1 {
		t.Fatalf("the sweep after a resize at the provider: %+v, want the pool moved", rep)
	}
	a.converge(200)
	if p, err := a.ad.GetNodePool(t.Context(), acct, ref, np); err != nil || p.NodeCount != 2 {
		t.Fatalf("after the passes: %+v %v, want 2 nodes again", p, err)
	}
	a.clk.Advance(substrate.DefaultSweepEvery)
	a.sweep() // the passes' own resize moved the revision: one listing
	if again := a.rest(time.Hour); again[routeGetCluster] != 0 || again[routeListClusters] != int(perInterval) {
		t.Errorf("an hour at rest after the resize:%s", describe(again))
	}

	// A node pool deleted at the provider: the first sweep once it is gone
	// finds it missing, and the next passes make it again.
	if _, err := a.ad.DeleteNodePool(t.Context(), acct, ref, np); err != nil {
		t.Fatal(err)
	}
	gone := false
	for range int(substrate.DefaultSweepEvery / doksStepEvery) {
		a.clk.Advance(doksStepEvery)
		if _, err := a.ad.GetNodePool(t.Context(), acct, ref, np); errors.Is(err, providers.ErrNotFound) {
			gone = true
			break
		}
	}
	if !gone {
		t.Fatalf("the node pool is not gone %s after its delete", substrate.DefaultSweepEvery)
	}
	if rep := a.sweep(); rep.Ghosts != 1 {
		t.Fatalf("the sweep after a delete at the provider: %+v, want the pool missing", rep)
	}
	a.converge(200)
	if p, err := a.ad.GetNodePool(t.Context(), acct, ref, np); err != nil || p.NodeCount != 2 {
		t.Fatalf("after the passes: %+v %v, want the pool made again with 2 nodes", p, err)
	}
}
