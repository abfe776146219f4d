package gcp_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/killtest"
)

// The reference's GKE pool, and the names the documented surface gives its cluster
// and node pools.
var (
	refPoolID   = inventory.ID("root", inventory.Pool, "gpu-fleet")
	refCluster  = substrate.ClusterName("gpu-fleet", testOwner(refPoolID))
	refH100Pool = testOwner(refPoolID).NodePoolName("h100")
	refL4Pool   = testOwner(refPoolID).NodePoolName("l4")
)

// gkeDoc is the reference's GKE example
// (testdata/documents/valid/kubernetes-pool-gke.json) with what a run on
// the emulator needs changed, and nothing else:
//   - the account's projectId is the emulator's project, and the account
//     gets a credentials reference (the reference's has none; the adapter
//     requires one);
//   - a second flavor, l4: Spot, g2-standard-8 with the nvidia-l4 it is
//     built with, pinned to us-central1-a, a 200 GiB disk.
//
// h100 and l4 are the flavors' nodes; l4Scale, when set, makes the l4
// flavor autoscale between its bounds instead; noZones drops the account's zones
// (the cluster then spreads over GKE's default zones of the region);
// noPool leaves the pool out (applied with prune: the teardown).
type gkeDoc struct {
	h100, l4        int
	l4Scale         *[2]int
	noZones, noPool bool
	// l4Name is the second flavor's name ("" is l4).
	l4Name string
}

func (d gkeDoc) bytes(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile("../../../testdata/documents/valid/kubernetes-pool-gke.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	acct := doc["providerAccounts"].([]any)[0].(map[string]any)["config"].(map[string]any)
	acct["projectId"], acct["credentials"] = project, keyRef
	if d.noZones {
		delete(acct, "zones")
	}
	pool := doc["pools"].([]any)[0].(map[string]any)
	sub := pool["policy"].(map[string]any)["substrate"].(map[string]any)
	flavors := sub["flavors"].([]any)
	flavors[0].(map[string]any)["nodes"] = d.h100
	l4 := map[string]any{
		"name": cmp.Or(d.l4Name, "l4"), "machineType": "g2-standard-8", "nodes": d.l4, "spot": true,
		"gpus": map[string]any{"type": "nvidia-l4", "count": 1}, "zones": []any{"us-central1-a"}, "diskGiB": 200,
	}
	if d.l4Scale != nil {
		delete(l4, "nodes")
		l4["autoscaling"] = map[string]any{"minNodes": d.l4Scale[0], "maxNodes": d.l4Scale[1]}
	}
	sub["flavors"] = append(flavors, l4)
	if d.noPool {
		doc["pools"] = []any{}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// agent is the substrate half of one fleet-agent over the emulator: a
// bbolt state file, the adapter, and a reconciler on the injected clock
// that can be crashed and started again over the same file.
type agent struct {
	t    *testing.T
	v    *env
	path string
	// logs are the reconciler's; read once no pass runs (ReconcileOnce
	// returns after its passes).
	logs *bytes.Buffer
	// kill, when set, wraps the adapter of every start: it kills the
	// agent from outside right after one provider call; killSeen once a
	// pass returned after it.
	kill     *killtest.KillAfter
	killSeen bool

	store    *state.Store
	rec      *substrate.Reconciler
	restarts int
}

func newAgent(t *testing.T, v *env) *agent {
	a := &agent{t: t, v: v, path: filepath.Join(t.TempDir(), "fleet.db"), logs: &bytes.Buffer{}}
	a.start()
	t.Cleanup(a.stop)
	return a
}

func (a *agent) start() {
	a.t.Helper()
	var err error
	if a.store, err = state.Open(a.path, state.Options{Now: a.v.clk.Now, NoSync: true, Installation: testInstallation}); err != nil {
		a.t.Fatal(err)
	}
	var prov substrate.Provider = a.v.ad
	if a.kill != nil {
		prov = a.kill.Provider(prov)
	}
	a.rec = substrate.New(substrate.Options{Store: a.store, Providers: map[string]substrate.Provider{providers.GCP: prov},
		Clock: a.v.clk, Log: zerolog.New(zerolog.SyncWriter(a.logs))})
}

// stop is a kill -9: the state file is closed with no cleanup of the
// reconciler's (no pass runs between the test's calls; a store the kill
// closed already stays closed).
func (a *agent) stop() {
	if a.store != nil {
		if err := a.store.Close(); err != nil {
			a.t.Error(err)
		}
	}
	a.rec, a.store = nil, nil
}

// restart stops the agent and starts it again over the same state file
// (with the same kill).
func (a *agent) restart() {
	a.t.Helper()
	a.stop()
	a.restarts++
	a.start()
}

// apply plans the document with the live checks over the adapter, as
// `fleet-agent apply` does, and applies it.
func (a *agent) apply(doc []byte, prune bool) {
	a.t.Helper()
	d, errs := fleet.Validate("fleet.json", doc)
	if errs != nil {
		a.t.Fatal(errs.Text())
	}
	snap, _, err := a.store.SnapshotAt()
	if err != nil {
		a.t.Fatal(err)
	}
	live := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{providers.GCP: a.v.ad}}).For(snap)
	if _, err := apply.Apply(a.t.Context(), a.store, d, apply.Options{Prune: prune, Live: live, Now: a.v.clk.Now}); err != nil {
		a.t.Fatalf("apply: %v", err)
	}
}

func (a *agent) record() state.SubstrateRecord {
	a.t.Helper()
	var recs []state.SubstrateRecord
	if err := a.store.View(func(tx *state.Tx) (err error) { recs, err = tx.Substrates(); return }); err != nil {
		a.t.Fatal(err)
	}
	if len(recs) != 1 {
		a.t.Fatalf("%d substrate records, want 1", len(recs))
	}
	return recs[0]
}

func (a *agent) converged() bool {
	r := a.record()
	return r.Seen != nil && r.Seen.Converged && r.Seen.ObservedGeneration == r.Want.Generation
}

// converge runs passes, the clock 10 s on between them (the emulator's
// operations move per observation), until the substrate converged. A pass
// the kill ended restarts the agent. It returns the passes it took.
func (a *agent) converge(max int) int {
	a.t.Helper()
	for i := range max {
		err := a.rec.ReconcileOnce(a.t.Context())
		switch {
		case a.kill != nil && a.kill.Fired() && !a.killSeen:
			if err == nil {
				a.t.Fatalf("pass %d: its store was closed under it and it reported no error", i)
			}
			a.killSeen = true
			a.restart()
		case err != nil:
			a.t.Fatalf("pass %d: %v", i, err)
		case a.converged():
			return i + 1
		}
		a.v.clk.Advance(10 * time.Second)
	}
	a.t.Fatalf("not converged after %d passes: %+v", max, a.status())
	return max
}

func (a *agent) status() substrate.Status {
	a.t.Helper()
	list, err := substrate.Statuses(a.store)
	if err != nil || len(list) != 1 {
		a.t.Fatalf("statuses: %v %+v", err, list)
	}
	return list[0]
}

// journal is every operation of the journal.
func (a *agent) journal() []state.JournalOp {
	a.t.Helper()
	var ops []state.JournalOp
	if err := a.store.View(func(tx *state.Tx) (err error) { ops, err = tx.JournalOps(""); return }); err != nil {
		a.t.Fatal(err)
	}
	return ops
}

// calls counts the requests since a mark by method, the API's by their
// discovery id without its common prefix, token fetches as oauth2.token.
func calls(emu *gkeemu.Emulator, mark int) map[string]int {
	out := map[string]int{}
	for _, x := range emu.Exchanges()[mark:] {
		id := strings.TrimPrefix(x.MethodID, "container.projects.locations.")
		out[id]++
	}
	return out
}

func total(m map[string]int) (api int) {
	for id, n := range m {
		if id != "oauth2.token" {
			api += n
		}
	}
	return api
}

func describeCalls(m map[string]int) string {
	parts := []string{}
	for _, id := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, id+"="+strconv.Itoa(m[id]))
	}
	return strings.Join(parts, " ")
}

// created finds the node pool create requests on the wire, by pool name.
func created(t *testing.T, emu *gkeemu.Emulator) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for _, x := range emu.Exchanges() {
		if x.MethodID != "container.projects.locations.clusters.nodePools.create" || x.Status != 200 {
			continue
		}
		var req struct {
			NodePool map[string]any `json:"nodePool"`
		}
		if err := json.Unmarshal(x.RequestBody, &req); err != nil {
			t.Fatal(err)
		}
		name, _ := req.NodePool["name"].(string)
		out[name] = append(out[name], req.NodePool)
	}
	return out
}

// TestSubstrateBringsGKEUpAndDown: the reference's GKE document, with a
// Spot flavor beside its GPU flavor, applied through internal/apply (live
// checks over the adapter) on a real bbolt file; the substrate reconciler
// over the adapter and the emulator brings the cluster and one node pool
// per flavor up (creating, waiting for the node daemon), with the
// contract's names and labels and the GPU and Spot settings on the wire;
// converged passes make no request; a resize converges in place; a teardown
// leaves nothing of ours at the emulator. Requests are counted per phase,
// and no token or key reaches the state file or the logs. Variants:
// operations that finish after a few reads; operations that take GKE-like
// times on the clock (a cluster 5 minutes, a node pool 2); the other answer
// to each of the emulator's guesses; an account without zones (the cluster
// spreads over three zones and a flavor's nodes are per zone).
func TestSubstrateBringsGKEUpAndDown(t *testing.T) {
	for _, vr := range []variant{
		{name: "observed"},
		{name: "timed", emu: func(o *gkeemu.Options) {
			o.Steps = gkeemu.Steps{Cluster: 300, NodePool: 120, Update: 30, Delete: 120}
			o.StepEvery = time.Second
		}},
		{name: "otherGuesses", emu: func(o *gkeemu.Options) {
			o.Guesses = gkeemu.Guesses{HonourAssertionExpiry: true, InitialCountTracksResize: true, PoolRunningDuringOps: true}
		}},
		{name: "spread", noZones: true},
	} {
		t.Run(vr.name, func(t *testing.T) { upAndDown(t, vr) })
	}
}

type variant struct {
	name    string
	emu     func(*gkeemu.Options)
	noZones bool
}

func upAndDown(t *testing.T, vr variant) {
	// The zones the cluster's nodes go to: the account's, else the
	// region's first three (GKE's default spread).
	zones := []string{"us-central1-a"}
	if vr.noZones {
		zones = []string{"us-central1-a", "us-central1-b", "us-central1-c"}
	}
	perZone := func(n int) map[string]int {
		m := map[string]int{}
		for _, z := range zones {
			m[z] = n
		}
		return m
	}
	v := newEnv(t, envOpts{zones: zones, emu: vr.emu})
	a := newAgent(t, v)
	emu := v.emu
	type figure struct {
		phase   string
		passes  int
		wall    time.Duration
		clocked time.Duration
		calls   map[string]int
	}
	var figures []figure
	phase := func(name string, f func() int) map[string]int {
		mark, began, at := emu.Mark(), time.Now(), v.clk.Now()
		passes := f()
		c := calls(emu, mark)
		figures = append(figures, figure{name, passes, time.Since(began), v.clk.Now().Sub(at), c})
		return c
	}
	t.Cleanup(func() {
		for _, f := range figures {
			t.Logf("%-15s %3d passes %6s wall %6s clock %4d API requests %3d tokens: %s", f.phase, f.passes,
				f.wall.Round(time.Millisecond), f.clocked, total(f.calls), f.calls["oauth2.token"], describeCalls(f.calls))
		}
	})

	// Plan and apply: the live checks verify the account (the plan's check
	// and the apply's preflight of the call, one each) and read the
	// catalogue.
	c := phase("apply", func() int { a.apply(gkeDoc{h100: 2, l4: 1, noZones: vr.noZones}.bytes(t), false); return 0 })
	if c["getServerConfig"] != 2 || c["compute.machineTypes.get"] == 0 || c["clusters.create"] != 0 {
		t.Fatalf("the apply's live checks: %s", describeCalls(c))
	}
	if st := a.status(); st.State != "pending" {
		t.Fatalf("after the apply: %+v", st)
	}

	// Up.
	c = phase("create", func() int { return a.converge(200) })
	st := a.status()
	if st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) || st.Mode != "create" {
		t.Fatalf("after the create: %s: %s", st.State, st.Message)
	}
	snap := emu.Snapshot()
	if len(snap.Clusters) != 1 || len(snap.Running) != 0 {
		t.Fatalf("clusters at the emulator: %+v, running %v", snap.Clusters, snap.Running)
	}
	cl, ok := snap.Cluster("us-central1", refCluster)
	if !ok {
		t.Fatalf("no cluster %s in us-central1: %+v", refCluster, snap.Clusters)
	}
	if st.Cluster.GlobalID != cl.SelfLink || st.Cluster.ID != "projects/"+project+"/locations/us-central1/clusters/"+refCluster ||
		st.Cluster.Endpoint != "https://"+cl.Endpoint || cl.Status != "RUNNING" || !slices.Equal(cl.Locations, zones) {
		t.Fatalf("the cluster: status %+v, emulator %+v", st.Cluster, cl)
	}
	if cl.Labels["fleet-agent_ddev_ssubstrate-pool"] != refPoolID || cl.Labels["fleet-agent_ddev_sinstallation"] != testInstallation || len(cl.Labels) != 2 {
		t.Fatalf("the cluster's resource labels: %v", cl.Labels)
	}
	var names []string
	for _, p := range cl.Pools {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	want := []string{"fa-system", refH100Pool, refL4Pool}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("node pools %v, want %v", names, want)
	}
	h100, _ := cl.Pool(refH100Pool)
	l4, _ := cl.Pool(refL4Pool)
	sys, _ := cl.Pool("fa-system")
	wantH100 := gkeemu.PoolState{Name: refH100Pool, Status: "RUNNING", MachineType: "a3-highgpu-8g", DiskGB: 100,
		Accelerators: []gkeemu.Accelerator{{Type: "nvidia-h100-80gb", Count: 8, Driver: "DEFAULT"}},
		Labels:       testOwner(refPoolID).Labels(),
		Locations:    zones, InitialNodeCount: 2, Nodes: perZone(2)}
	wantL4 := gkeemu.PoolState{Name: refL4Pool, Status: "RUNNING", MachineType: "g2-standard-8", DiskGB: 200, Spot: true,
		Accelerators: []gkeemu.Accelerator{{Type: "nvidia-l4", Count: 1, Driver: "DEFAULT"}},
		Labels:       testOwner(refPoolID).PoolLabels(true),
		Locations:    []string{"us-central1-a"}, InitialNodeCount: 1, Nodes: map[string]int{"us-central1-a": 1}}
	for _, w := range []struct {
		have, want gkeemu.PoolState
		resource   map[string]string
	}{
		{h100, wantH100, map[string]string{"fleet-agent_ddev_ssubstrate-pool": refPoolID, "fleet-agent_ddev_sinstallation": testInstallation}},
		{l4, wantL4, map[string]string{"fleet-agent_ddev_ssubstrate-pool": refPoolID, "fleet-agent_ddev_sinstallation": testInstallation, "fleet-agent_ddev_scapacity": "spot"}},
	} {
		got := w.have
		if fmt.Sprint(got.ResourceLabels) != fmt.Sprint(w.resource) {
			t.Errorf("pool %s: resource labels %v, want %v", got.Name, got.ResourceLabels, w.resource)
		}
		got.ResourceLabels = nil
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", w.want) {
			t.Errorf("pool at the emulator:\n have %+v\n want %+v", got, w.want)
		}
	}
	// The system pool GKE needs to create a cluster never carries the
	// node labels, so the node daemon never runs there.
	if len(sys.Labels) != 0 || sys.Nodes["us-central1-a"] != 1 {
		t.Errorf("the system pool: %+v", sys)
	}
	// On the wire: the GPUs as GKE takes them (the count a string, the
	// driver named), spot on the Spot flavor only.
	wire := created(t, emu)
	if len(wire[refH100Pool]) != 1 || len(wire[refL4Pool]) != 1 {
		t.Fatalf("accepted node pool creates: %d %s, %d %s", len(wire[refH100Pool]), refH100Pool, len(wire[refL4Pool]), refL4Pool)
	}
	onWire := func(np map[string]any) string {
		cfg := np["config"].(map[string]any)
		b, _ := json.Marshal(map[string]any{"accelerators": cfg["accelerators"], "spot": cfg["spot"], "labels": cfg["labels"], "locations": np["locations"], "diskSizeGb": cfg["diskSizeGb"]})
		return string(b)
	}
	for name, want := range map[string]string{
		refH100Pool: `{"accelerators":[{"acceleratorCount":"8","acceleratorType":"nvidia-h100-80gb","gpuDriverInstallationConfig":{"gpuDriverVersion":"DEFAULT"}}],"diskSizeGb":null,"labels":{"fleet-agent.dev/installation":"` + testInstallation + `","fleet-agent.dev/substrate-pool":"` + refPoolID + `"},"locations":null,"spot":null}`,
		refL4Pool:   `{"accelerators":[{"acceleratorCount":"1","acceleratorType":"nvidia-l4","gpuDriverInstallationConfig":{"gpuDriverVersion":"DEFAULT"}}],"diskSizeGb":200,"labels":{"fleet-agent.dev/capacity":"spot","fleet-agent.dev/installation":"` + testInstallation + `","fleet-agent.dev/substrate-pool":"` + refPoolID + `"},"locations":["us-central1-a"],"spot":true}`,
	} {
		if got := onWire(wire[name][0]); got != want {
			t.Errorf("create of %s on the wire:\n have %s\n want %s", name, got, want)
		}
	}
	if c["clusters.create"] != 1 || c["clusters.nodePools.create"] < 2 || c["clusters.delete"] != 0 {
		t.Fatalf("create phase: %s", describeCalls(c))
	}

	// Idle: converged passes make no request, and a discovery sweep lists
	// the project's clusters and operations once and finds nothing to do.
	c = phase("idle", func() int {
		for range 5 {
			v.clk.Advance(time.Minute)
			if err := a.rec.ReconcileOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		return 5
	})
	if len(c) != 0 {
		t.Fatalf("converged passes made requests: %s", describeCalls(c))
	}
	c = phase("sweep", func() int {
		rep, err := a.rec.Sweep(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Listed != 1 || rep.Adopted+rep.Orphans+rep.Reported+rep.Ghosts+rep.NodePoolOrphans+rep.Errors != 0 {
			t.Fatalf("sweep: %+v", rep)
		}
		return 0
	})
	if c["clusters.list"] != 1 || c["operations.list"] != 1 || total(c) > 2+c["clusters.nodePools.list"]+c["compute.instanceGroupManagers.get"] {
		t.Fatalf("sweep: %s", describeCalls(c))
	}

	// Resize in place: h100 down to one node per zone; l4 from a fixed
	// node to autoscaling between 2 and 4, which takes two operations (its
	// count raised into the bounds, then the bounds) one after the other.
	phase("resize apply", func() int {
		a.apply(gkeDoc{h100: 1, l4Scale: &[2]int{2, 4}, noZones: vr.noZones}.bytes(t), false)
		return 0
	})
	c = phase("resize", func() int { return a.converge(200) })
	snap = emu.Snapshot()
	cl, _ = snap.Cluster("us-central1", refCluster)
	h100, _ = cl.Pool(refH100Pool)
	l4, _ = cl.Pool(refL4Pool)
	if len(snap.Clusters) != 1 || cl.ID != snap.Clusters[0].ID || len(cl.Pools) != 3 || len(snap.Running) != 0 {
		t.Fatalf("after the resize: %+v", snap)
	}
	if fmt.Sprint(h100.Nodes) != fmt.Sprint(perZone(1)) || h100.Autoscaling != nil ||
		fmt.Sprint(l4.Nodes) != "map[us-central1-a:2]" || l4.Autoscaling == nil || *l4.Autoscaling != (gkeemu.Bounds{Min: 2, Max: 4}) {
		t.Fatalf("after the resize: h100 %+v, l4 %+v", h100, l4)
	}
	if st := a.status(); st.State != "creating" || st.Cluster.GlobalID != cl.SelfLink {
		t.Fatalf("after the resize: %+v", st)
	}
	if c["clusters.nodePools.setSize"] < 2 || c["clusters.nodePools.setAutoscaling"] < 1 ||
		c["clusters.create"]+c["clusters.nodePools.create"]+c["clusters.nodePools.delete"] != 0 {
		t.Fatalf("resize phase: %s", describeCalls(c))
	}

	// Down: the pool left out, with prune.
	phase("teardown apply", func() int {
		a.apply(gkeDoc{noZones: vr.noZones, noPool: true}.bytes(t), true)
		return 0
	})
	c = phase("teardown", func() int { return a.converge(200) })
	if st := a.status(); st.State != "deleted" || len(st.NodePools) != 0 {
		t.Fatalf("after the teardown: %+v", st)
	}
	snap = emu.Snapshot()
	if len(snap.Clusters) != 0 || len(snap.Groups) != 0 || len(snap.Running) != 0 {
		t.Fatalf("left at the emulator: %+v", snap)
	}
	if c["clusters.delete"] != 1 || c["clusters.nodePools.delete"] < 2 {
		t.Fatalf("teardown phase: %s", describeCalls(c))
	}
	// A teardown leaves nothing in the journal.
	if ops := a.journal(); len(ops) != 0 {
		t.Fatalf("%d operations left in the journal, the first %s %s", len(ops), ops[0].Key, ops[0].State)
	}

	// Canary: neither the key nor any token the emulator minted is in the
	// state file (every page of it, freed ones too) or the logs.
	a.stop()
	file, err := os.ReadFile(a.path)
	if err != nil {
		t.Fatal(err)
	}
	secrets := mintedTokens(t, emu)
	if len(secrets) == 0 {
		t.Fatal("no token was minted")
	}
	var key struct {
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal([]byte(v.key), &key); err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, strings.Split(key.PrivateKey, "\n")[1:4]...)
	for _, s := range secrets {
		if bytes.Contains(file, []byte(s)) || strings.Contains(a.logs.String(), s) {
			t.Fatalf("a secret (%.12s...) reached the state file or the logs", s)
		}
	}
}

// mintedTokens are every access token the emulator's token endpoint gave.
func mintedTokens(t *testing.T, emu *gkeemu.Emulator) []string {
	t.Helper()
	var out []string
	for _, x := range emu.Exchanges() {
		if x.MethodID != "oauth2.token" || x.Status != 200 {
			continue
		}
		var tok struct {
			AccessToken string `json:"access_token"`
		}
		if err := json.Unmarshal(x.Body, &tok); err != nil || tok.AccessToken == "" {
			t.Fatalf("token answer: %s", x.Body)
		}
		out = append(out, tok.AccessToken)
	}
	return out
}

// TestSubstrateCrashAfterCreateAccepted: the reconciler is killed right
// after GKE accepted a create and before the journal recorded the answer
// (the call's outcome lives only at GKE); started again over the same
// state file and the same emulator, it reads the object back by its name
// instead of creating it again, and converges with no twin: one create
// request for it in all, one cluster, one node pool per flavor.
func TestSubstrateCrashAfterCreateAccepted(t *testing.T) {
	for _, c := range []struct {
		step, method, object string
		call                 killtest.Call
	}{
		{"createCluster", "container.projects.locations.clusters.create", refCluster, killtest.EnsureCluster},
		{"createNodePool", "container.projects.locations.clusters.nodePools.create", refH100Pool, killtest.EnsureNodePool},
	} {
		t.Run(c.step, func(t *testing.T) {
			v := newEnv(t, envOpts{zones: []string{"us-central1-a"}})
			a := newAgent(t, v)
			a.apply(gkeDoc{h100: 2, l4: 1}.bytes(t), false)
			a.kill = &killtest.KillAfter{Call: c.call, Name: c.object, Kill: func() {
				// The create reached GKE and was accepted: the last exchange
				// is its 200, and nothing of it is in the journal yet.
				x := v.emu.Exchanges()
				last := x[len(x)-1]
				if last.MethodID != c.method || last.Status != 200 || !bytes.Contains(last.RequestBody, []byte(`"name":"`+c.object+`"`)) {
					t.Errorf("at the kill the last exchange is %s %d", last.MethodID, last.Status)
				}
				if err := a.store.Close(); err != nil {
					t.Error(err)
				}
			}}
			a.restart() // a reconciler whose provider kills
			a.converge(60)
			if !a.kill.Fired() || a.restarts != 2 {
				t.Fatalf("the reconciler was never killed after %s (killed %v, %d restarts)", c.step, a.kill.Fired(), a.restarts)
			}
			if st := a.status(); st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) {
				t.Fatalf("after the restart: %s: %s", st.State, st.Message)
			}
			sent := 0
			for _, x := range v.emu.Exchanges() {
				if x.MethodID == c.method && x.Status == 200 && bytes.Contains(x.RequestBody, []byte(`"name":"`+c.object+`"`)) {
					sent++
				}
				if x.MethodID == c.method && x.Status == 409 {
					t.Errorf("a create was sent again and refused as taken: %s", x.Body)
				}
			}
			if sent != 1 {
				t.Fatalf("%s accepted %d times", c.object, sent)
			}
			snap := v.emu.Snapshot()
			if len(snap.Clusters) != 1 || len(snap.Clusters[0].Pools) != 3 {
				t.Fatalf("at the emulator: %+v", snap.Clusters)
			}
			ops := a.journal()
			if i := slices.IndexFunc(ops, func(op state.JournalOp) bool { return !op.State.Terminal() }); i >= 0 {
				t.Fatalf("converged with %s still %s", ops[i].Key, ops[i].State)
			}
		})
	}
}

// TestSubstrateFlavorNameLimitOnGKE: the document takes flavor names of up
// to 40 characters, and a node pool is named fa-<6>-<flavor>, so on GKE
// (node pool names of at most 40) a flavor of 30 characters makes its node
// pool and one of 31 passes the plan and is refused by the adapter before
// anything reaches GKE: the substrate is in error with the limit in its
// message (docs/substrates.md says so).
func TestSubstrateFlavorNameLimitOnGKE(t *testing.T) {
	for _, n := range []int{30, 31} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			name := "l4" + strings.Repeat("x", n-2)
			v := newEnv(t, envOpts{zones: []string{"us-central1-a"}})
			a := newAgent(t, v)
			a.apply(gkeDoc{h100: 1, l4: 1, l4Name: name}.bytes(t), false) // passes the plan's live checks
			var st substrate.Status
			for i := range 60 {
				if err := a.rec.ReconcileOnce(t.Context()); err != nil {
					t.Fatalf("pass %d: %v", i, err)
				}
				st = a.status()
				if st.State == "error" || a.converged() {
					break
				}
				v.clk.Advance(10 * time.Second)
			}
			sent, accepted := 0, 0
			for _, x := range v.emu.Exchanges() {
				if x.MethodID == "container.projects.locations.clusters.nodePools.create" && bytes.Contains(x.RequestBody, []byte(`"name":"`+testOwner(refPoolID).NodePoolName(name)+`"`)) {
					sent++
					if x.Status == 200 {
						accepted++
					}
				}
			}
			if n == 30 {
				if !a.converged() || accepted != 1 {
					t.Fatalf("a flavor of 30 characters: %s: %s (%d creates accepted)", st.State, st.Message, accepted)
				}
				return
			}
			if st.State != "error" || !strings.Contains(st.Message, "at most 40 characters") || !strings.Contains(st.Message, name) || sent != 0 {
				t.Fatalf("a flavor of 31 characters: %s: %s (%d creates sent)", st.State, st.Message, sent)
			}
		})
	}
}
