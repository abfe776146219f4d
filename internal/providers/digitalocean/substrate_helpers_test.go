package digitalocean_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/killtest"
)

// referenceDocument is the reference's DOKS example.
const referenceDocument = "../../../testdata/documents/valid/kubernetes-pool-doks.json"

// doksSecrets hold the API token where the reference document's reference
// points.
var doksSecrets = secretStore{"secret://root/do-api-token": apiToken}

// doksSteps are DOKS-like durations on the injected clock (a cluster in
// about five minutes, a node in about two, a delete in one), each read of
// the object counting as one more step of ten seconds.
var doksSteps = doemu.Steps{Cluster: 30, Node: 12, Upgrade: 30, Delete: 6, Drain: 6}

const doksStepEvery = 10 * time.Second

// flavorDoc is a flavor of the document, as JSON.
type flavorDoc map[string]any

func h100Flavor(nodes int) flavorDoc {
	return flavorDoc{"name": "h100", "machineType": "gpu-h100x8-640gb", "nodes": nodes, "gpus": map[string]any{"type": "nvidia-h100", "count": 8}}
}

// l40sSpot is the second flavor: GPUs again, on Spot (a DigitalOcean
// preview the account opts into with allowSpot and previews).
func l40sSpot() flavorDoc {
	return flavorDoc{"name": "l40s", "machineType": "gpu-l40sx1-48gb", "nodes": 1, "spot": true, "gpus": map[string]any{"type": "nvidia-l40s", "count": 1}}
}

// doksDocument is the reference's DOKS document with the account opted into
// the Spot preview and the pool's flavors replaced; without flavors the pool
// is left out (a teardown, applied with prune).
func doksDocument(t testing.TB, flavors ...flavorDoc) string {
	t.Helper()
	raw, err := os.ReadFile(referenceDocument)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	acct := doc["providerAccounts"].([]any)[0].(map[string]any)
	cfg := acct["config"].(map[string]any)
	cfg["allowSpot"], cfg["previews"] = true, true
	pool := doc["pools"].([]any)[0].(map[string]any)
	sub := pool["policy"].(map[string]any)["substrate"].(map[string]any)
	if len(flavors) == 0 {
		doc["pools"] = []any{}
	} else {
		fl := make([]any, len(flavors))
		for i, f := range flavors {
			fl[i] = map[string]any(f)
		}
		sub["flavors"] = fl
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// doksAgent is one agent's worth of real parts over the emulator: a bbolt
// state file, the adapter (made again at every start, as a restarted
// process would), the plan's live checks, and a reconciler on the injected
// clock that can be crashed and started again over the same file and the
// same emulator.
type doksAgent struct {
	t    *testing.T
	clk  *clock.Fake
	emu  *doemu.Emulator
	url  string
	path string
	// logs is the reconciler's log, read once its passes have returned.
	logs *bytes.Buffer
	// kill, when set, wraps the adapter of every start: it kills the agent
	// from outside right after one provider call.
	kill *killtest.KillAfter

	store *state.Store
	ad    *digitalocean.Adapter
	rec   *substrate.Reconciler
}

func newDOKSAgent(t *testing.T, opts doemu.Options, kill *killtest.KillAfter) *doksAgent {
	t.Helper()
	clk := clock.NewFake(epoch)
	opts.Clock = clk
	if opts.Accounts == nil {
		opts.Accounts = []doemu.Account{{Token: apiToken, Team: "team-a", Email: "ops@example.com", Previews: true, DropletLimit: 40}}
	}
	if opts.Steps == (doemu.Steps{}) {
		opts.Steps, opts.StepEvery = doksSteps, doksStepEvery
	}
	emu := doemu.New(opts)
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	a := &doksAgent{t: t, clk: clk, emu: emu, url: srv.URL, path: filepath.Join(t.TempDir(), "fleet.db"), logs: &bytes.Buffer{}, kill: kill}
	a.start()
	t.Cleanup(func() {
		if a.store != nil {
			_ = a.store.Close()
		}
	})
	t.Cleanup(func() { checkWire(t, emu, nil) })
	return a
}

func (a *doksAgent) start() {
	a.t.Helper()
	var err error
	if a.store, err = state.Open(a.path, state.Options{Now: a.clk.Now, NoSync: true, Installation: testInstallation}); err != nil {
		a.t.Fatal(err)
	}
	if a.ad, err = digitalocean.Open(block(a.t, "apiURL: "+a.url+"\n"), doksSecrets, digitalocean.WithClock(a.clk)); err != nil {
		a.t.Fatal(err)
	}
	var prov substrate.Provider = a.ad
	if a.kill != nil {
		prov = a.kill.Provider(prov)
	}
	a.rec = substrate.New(substrate.Options{Store: a.store, Providers: map[string]substrate.Provider{providers.DigitalOcean: prov},
		Clock: a.clk, Log: zerolog.New(zerolog.SyncWriter(a.logs))})
}

// restart kills the agent where it stands: the file is closed with no
// cleanup of the reconciler's (no pass runs between the test's calls; a
// store the kill closed already stays closed), and it starts again over it.
func (a *doksAgent) restart() {
	a.t.Helper()
	if err := a.store.Close(); err != nil {
		a.t.Fatal(err)
	}
	a.start()
}

// apply plans the document with its live checks against the emulator and
// applies it, as `fleet-agent apply` does.
func (a *doksAgent) apply(text string, prune bool) {
	a.t.Helper()
	d, errs := fleet.Validate("doks.json", []byte(text))
	if errs != nil {
		a.t.Fatal(errs.Text())
	}
	snap, _, err := a.store.SnapshotAt()
	if err != nil {
		a.t.Fatal(err)
	}
	live := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{providers.DigitalOcean: a.ad}, Secrets: doksSecrets}).For(snap)
	res, err := apply.Apply(a.t.Context(), a.store, d, apply.Options{Prune: prune, Now: a.clk.Now, Live: live})
	if err != nil {
		a.t.Fatalf("apply: %v", err)
	}
	for _, c := range res.Plan.Changes {
		if strings.Contains(c.Note, "not checked live") {
			a.t.Fatalf("the plan checked %s %s offline: %s", c.Kind, c.Name, c.Note)
		}
	}
}

// journal is what the state file holds of the substrates: their records,
// whether every one converged at its wanted generation, and the journal's
// operations that are not finished (by key and state).
type journal struct {
	records   []state.SubstrateRecord
	converged bool
	open      []string
}

func (a *doksAgent) journal() journal {
	a.t.Helper()
	var j journal
	err := a.store.View(func(tx *state.Tx) error {
		recs, err := tx.Substrates()
		if err != nil {
			return err
		}
		ops, err := tx.JournalOps("")
		j = journal{records: recs, converged: true}
		for _, r := range recs {
			j.converged = j.converged && r.Seen != nil && r.Seen.Converged && r.Seen.ObservedGeneration == r.Want.Generation
		}
		for _, op := range ops {
			if !op.State.Terminal() {
				j.open = append(j.open, op.Key+" "+string(op.State))
			}
		}
		return err
	})
	if err != nil {
		a.t.Fatal(err)
	}
	return j
}

func (a *doksAgent) converged() bool { return a.journal().converged }

// converge reconciles, the clock moving on by the reconciler's poll (10 s)
// between passes, until every substrate converged; it fails after max
// passes.
func (a *doksAgent) converge(max int) int {
	a.t.Helper()
	for i := range max {
		if err := a.rec.ReconcileOnce(a.t.Context()); err != nil {
			a.t.Fatalf("pass %d: %v", i, err)
		}
		if a.converged() {
			return i + 1
		}
		a.clk.Advance(substrate.DefaultPoll)
	}
	a.t.Fatalf("not converged after %d passes: %+v", max, a.status())
	return max
}

// status is the one substrate's surface.
func (a *doksAgent) status() substrate.Status {
	a.t.Helper()
	list, err := substrate.Statuses(a.store)
	if err != nil {
		a.t.Fatal(err)
	}
	if len(list) != 1 {
		a.t.Fatalf("%d substrates, want 1", len(list))
	}
	return list[0]
}

func (a *doksAgent) poolID() string {
	a.t.Helper()
	recs := a.journal().records
	if len(recs) != 1 {
		a.t.Fatalf("%d substrate records, want 1", len(recs))
	}
	return recs[0].Want.PoolID
}

// ours are the emulator's clusters carrying the adapter's marker tag.
func (a *doksAgent) ours() []doemu.ClusterState {
	var out []doemu.ClusterState
	for _, c := range a.emu.Clusters() {
		if slices.Contains(c.Tags, "fleet-agent") {
			out = append(out, c)
		}
	}
	return out
}

// bodies are the JSON bodies of the requests a route served, in order.
func (a *doksAgent) bodies(route string) []map[string]any {
	a.t.Helper()
	var out []map[string]any
	for _, x := range a.emu.Exchanges() {
		if x.Route != route {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(x.Body, &m); err != nil {
			a.t.Fatalf("%s: body %q: %v", route, x.Body, err)
		}
		out = append(out, m)
	}
	return out
}

// phase is what one step of the lifecycle cost at the emulator.
type phase struct {
	name      string
	passes    int
	simulated time.Duration
	wall      time.Duration
	routes    []string
}

func (p phase) count(route string) int {
	n := 0
	for _, r := range p.routes {
		if r == route {
			n++
		}
	}
	return n
}

// measure runs a step and records the requests it made.
func (a *doksAgent) measure(name string, step func() int) phase {
	a.t.Helper()
	mark, began, wall := a.emu.Mark(), a.clk.Now(), time.Now()
	passes := step()
	return phase{name: name, passes: passes, simulated: a.clk.Now().Sub(began), wall: time.Since(wall), routes: a.emu.Since(mark)}
}

// table renders the phases for the golden file: passes, simulated time and
// the requests by route. Wall time is left out (it varies); tests log it.
func table(phases []phase) []byte {
	var b bytes.Buffer
	for _, p := range phases {
		fmt.Fprintf(&b, "%s: %d passes, %s on the clock, %d requests\n", p.name, p.passes, p.simulated, len(p.routes))
		counts := map[string]int{}
		for _, r := range p.routes {
			counts[r]++
		}
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %3d  %s\n", counts[k], k)
		}
	}
	return b.Bytes()
}

func hasAll(tags []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(tags, w) {
			return false
		}
	}
	return true
}

func pluginOff(p *bool) bool { return p != nil && !*p }

func describeClusters(cs []doemu.ClusterState) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s %s %s %v\n", c.ID, c.Name, c.State, c.Tags)
		for _, p := range c.Pools {
			fmt.Fprintf(&b, "  %s %s x%d spot=%v labels=%v tags=%v\n", p.Name, p.Size, p.Count, p.Spot, p.Labels, p.Tags)
		}
	}
	return b.String()
}
