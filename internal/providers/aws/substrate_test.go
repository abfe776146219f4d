package aws_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/apply"
	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/livecheck"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	awsadapter "github.com/fleet-agent/fleet-agent/internal/providers/aws"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/killtest"
)

// The reference's EKS example, as the repository holds it.
const referencePath = "../../../testdata/documents/valid/kubernetes-pool-eks.json"

// referenceSubnets are the subnets the reference's account names, in the
// two zones it lists, and one more in a zone it does not.
func referenceSubnets() []eksemu.Subnet {
	return []eksemu.Subnet{
		{ID: "subnet-0000000000000000a", Zone: "us-east-1a", VpcID: "vpc-00000000000000001", CIDR: "10.0.0.0/24"},
		{ID: "subnet-0000000000000000b", Zone: "us-east-1b", VpcID: "vpc-00000000000000001", CIDR: "10.0.1.0/24"},
		{ID: "subnet-0000000000000000c", Zone: "us-east-1c", VpcID: "vpc-00000000000000001", CIDR: "10.0.2.0/24"},
	}
}

// eksTimes are how long EKS takes, on the injected clock (a step every
// eksStep, so that the few steps each read adds are lost in them): a
// cluster about 10 minutes (EKS's documentation), a node group 4, a config update
// 1, a delete 5. Guess: only the cluster's figure is documented; the others
// are of the order the console shows.
var eksTimes = eksemu.Steps{Cluster: 6000, Nodegroup: 2400, Update: 600, Delete: 3000}

const eksStep = 100 * time.Millisecond

// referenceDocument is the reference's EKS document with what this
// provider needs added: the account's keys as secret references (the
// example leaves credentials out), and a second flavor, Spot with one
// NVIDIA L4 and a 100 GiB disk, next to the reference's H100 flavor. edit,
// when set, changes the result further.
func referenceDocument(t *testing.T, edit func(doc map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	acct := doc["providerAccounts"].([]any)[0].(map[string]any)
	cfg := acct["config"].(map[string]any)
	cfg["accessKeyId"], cfg["secretAccessKey"] = "secret://ops/aws-key-id", "secret://ops/aws-secret"
	sub := poolSubstrate(doc)
	sub["flavors"] = append(sub["flavors"].([]any), map[string]any{
		"name": "l4", "machineType": "g6.xlarge", "nodes": 1, "spot": true, "diskGiB": 100,
		"gpus": map[string]any{"type": "nvidia-l4", "count": 1},
	})
	if edit != nil {
		edit(doc)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func poolSubstrate(doc map[string]any) map[string]any {
	pool := doc["pools"].([]any)[0].(map[string]any)
	return pool["policy"].(map[string]any)["substrate"].(map[string]any)
}

// flavorNodes sets a flavor's nodes.
func flavorNodes(name string, nodes int) func(map[string]any) {
	return func(doc map[string]any) {
		for _, f := range poolSubstrate(doc)["flavors"].([]any) {
			if f := f.(map[string]any); f["name"] == name {
				f["nodes"] = nodes
			}
		}
	}
}

// withoutPools leaves every pool out of the document.
func withoutPools(doc map[string]any) { doc["pools"] = []any{} }

// substrateEnv is an agent's worth of real parts around the emulator: a
// bbolt state file, an adapter, the plan's live checks and a reconciler
// over them, on the harness's injected clock, that can be crashed and
// started again over the same file and the same emulator.
type substrateEnv struct {
	*harness
	path string
	// kill, when set, wraps every adapter the env starts: it kills the
	// agent from outside right after one provider call.
	kill *killtest.KillAfter
	// logs are the reconciler's log lines, read once its passes returned.
	logs bytes.Buffer

	store   *state.Store
	adapter *awsadapter.Adapter
	rec     *substrate.Reconciler
}

func newSubstrateEnv(t *testing.T, kill *killtest.KillAfter) *substrateEnv {
	t.Helper()
	steps := eksTimes
	h := newHarness(t, harnessOpts{emu: eksemu.Options{Subnets: referenceSubnets(), Steps: &steps, StepEvery: eksStep}})
	e := &substrateEnv{harness: h, path: filepath.Join(t.TempDir(), "fleet.db"), kill: kill}
	e.start()
	t.Cleanup(func() { _ = e.stop() })
	return e
}

// start opens the state file and makes a new adapter (nothing cached, as
// after a restart) and a reconciler over them.
func (e *substrateEnv) start() {
	e.t.Helper()
	var err error
	if e.store, err = state.Open(e.path, state.Options{Now: e.clk.Now, NoSync: true, Installation: testInstallation}); err != nil {
		e.t.Fatal(err)
	}
	e.adapter = e.open()
	var prov substrate.Provider = e.adapter
	if e.kill != nil {
		prov = e.kill.Provider(prov)
	}
	e.rec = substrate.New(substrate.Options{Store: e.store, Providers: map[string]substrate.Provider{providers.AWS: prov},
		Clock: e.clk, Log: zerolog.New(zerolog.SyncWriter(&e.logs))})
}

// stop ends the agent as a kill would: the state file is closed with no
// cleanup of the reconciler's (no pass runs between the test's calls; a
// store the kill closed already stays closed).
func (e *substrateEnv) stop() error {
	if e.rec == nil {
		return nil
	}
	err := e.store.Close()
	e.rec, e.store, e.adapter = nil, nil, nil
	return err
}

// restart stops the agent where it stands and starts it again over the
// same state file and emulator.
func (e *substrateEnv) restart() {
	e.t.Helper()
	if err := e.stop(); err != nil {
		e.t.Fatal(err)
	}
	e.start()
}

// apply plans the document with the live checks over the adapter, as the
// binary does, and applies it; a blocked plan fails the test.
func (e *substrateEnv) apply(doc []byte, prune bool) {
	e.t.Helper()
	d, errs := fleet.Validate("fleet.json", doc)
	if errs != nil {
		e.t.Fatal(errs.Text())
	}
	snap, err := e.store.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	live := livecheck.New(livecheck.Options{Adapters: map[string]livecheck.Adapter{providers.AWS: e.adapter}})
	if _, err := apply.Apply(e.t.Context(), e.store, d, apply.Options{Prune: prune, Now: e.clk.Now, Live: live.For(snap)}); err != nil {
		e.t.Fatalf("apply: %v", err)
	}
}

func (e *substrateEnv) record() state.SubstrateRecord {
	e.t.Helper()
	var recs []state.SubstrateRecord
	if err := e.store.View(func(tx *state.Tx) (err error) { recs, err = tx.Substrates(); return }); err != nil {
		e.t.Fatal(err)
	}
	if len(recs) != 1 {
		e.t.Fatalf("%d substrate records, want 1", len(recs))
	}
	return recs[0]
}

func (e *substrateEnv) converged() bool {
	r := e.record()
	return r.Seen != nil && r.Seen.Converged && r.Seen.ObservedGeneration == r.Want.Generation
}

func (e *substrateEnv) status() substrate.Status {
	e.t.Helper()
	list, err := substrate.Statuses(e.store)
	if err != nil || len(list) != 1 {
		e.t.Fatalf("statuses: %v %+v", err, list)
	}
	return list[0]
}

// converge runs passes, moving the clock on by the reconciler's poll
// between them, until the substrate converged at its generation.
func (e *substrateEnv) converge(max int) phase {
	e.t.Helper()
	began, wall, before := e.clk.Now(), time.Now(), e.emu.Counts()
	for i := range max {
		if err := e.rec.ReconcileOnce(e.t.Context()); err != nil {
			e.t.Fatalf("pass %d: %v", i, err)
		}
		if e.converged() {
			return phase{passes: i + 1, took: e.clk.Now().Sub(began), wall: time.Since(wall), calls: since(before, e.emu.Counts())}
		}
		e.clk.Advance(substrate.DefaultPoll)
	}
	st := e.status()
	e.t.Fatalf("not converged after %d passes: %s: %s", max, st.State, st.Message)
	return phase{}
}

// since is the requests of each operation from before to now.
func since(before, now map[string]int) map[string]int {
	out := map[string]int{}
	for op, n := range now {
		if d := n - before[op]; d > 0 {
			out[op] = d
		}
	}
	return out
}

// phase is what one step of the story cost at the emulator.
type phase struct {
	name   string
	passes int
	took   time.Duration // on the injected clock
	wall   time.Duration
	calls  map[string]int
}

func (p phase) String() string {
	ops := slices.Sorted(maps.Keys(p.calls))
	var parts []string
	total := 0
	for _, op := range ops {
		parts = append(parts, fmt.Sprintf("%s=%d", op, p.calls[op]))
		total += p.calls[op]
	}
	return fmt.Sprintf("%-10s %3d passes, %8s on the clock, %6s wall, %3d requests: %s",
		p.name, p.passes, p.took, p.wall.Round(time.Millisecond), total, strings.Join(parts, " "))
}

// only fails unless the phase made exactly the calls of want among those
// named in want, and none outside allowed (want's keys are allowed).
func (p phase) only(t *testing.T, want map[string]int, allowed ...string) {
	t.Helper()
	for op, n := range want {
		if p.calls[op] != n {
			t.Errorf("%s: %s made %d times, want %d (%s)", p.name, op, p.calls[op], n, p)
		}
	}
	for op := range p.calls {
		if _, ok := want[op]; !ok && !slices.Contains(allowed, op) {
			t.Errorf("%s: unexpected %s (%s)", p.name, op, p)
		}
	}
}

// The reads a pass may make while it waits for EKS.
var reads = []string{"DescribeCluster", "ListNodegroups", "DescribeNodegroup", "DescribeSubnets", "DescribeInstanceTypes"}

// TestSubstrateOnTheEmulator applies the reference's EKS document (with a
// Spot L4 flavor added) through internal/apply, on a real bbolt file, and
// lets the substrate reconciler bring it up on the emulator: one regional
// cluster, one managed node group per flavor with the documented names and
// labels, the NVIDIA AMI and SPOT capacity on the wire. It stays creating,
// waiting for the node daemon (no in-cluster half here). Converged, passes
// make no request; a restart makes one full look; a resize of one flavor
// is one UpdateNodegroupConfig; the teardown leaves nothing of ours at the
// emulator. The account's keys never reach the state file or the logs.
func TestSubstrateOnTheEmulator(t *testing.T) {
	e := newSubstrateEnv(t, nil)
	ctx := t.Context()
	var phases []phase
	defer func() {
		for _, p := range phases {
			t.Log(p)
		}
	}()

	e.emu.ResetRequests()
	e.apply(referenceDocument(t, nil), false)
	phases = append(phases, phase{name: "plan", calls: e.emu.Counts()})
	if st := e.status(); st.State != "pending" {
		t.Fatalf("recorded: %+v", st)
	}

	up := e.converge(200)
	up.name = "bring-up"
	phases = append(phases, up)
	poolID := inventory.ID("root", inventory.Pool, "gpu-fleet")
	name := substrate.ClusterName("gpu-fleet", testOwner(poolID))
	h100, l4 := testOwner(poolID).NodePoolName("h100"), testOwner(poolID).NodePoolName("l4")
	up.only(t, map[string]int{"CreateCluster": 1, "CreateNodegroup": 2}, reads...)
	// The plan's live checks read the subnets' zones and the instance
	// types through the same adapter; the reconciler found them cached.
	plan := phases[0]
	if plan.calls["DescribeSubnets"]+up.calls["DescribeSubnets"] != 1 || plan.calls["DescribeInstanceTypes"]+up.calls["DescribeInstanceTypes"] != 2 {
		t.Errorf("facts that never change were asked again: %s; %s", plan, up)
	}
	// EKS takes its time: the cluster, then its node groups (made at once).
	if up.took < 13*time.Minute || up.took > 15*time.Minute {
		t.Errorf("converged after %s on the clock; EKS takes 10 + 4 minutes", up.took)
	}

	st := e.status()
	c, ok := e.emu.Cluster(name)
	if !ok || st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) || st.Mode != "create" ||
		st.Cluster.GlobalID != c.Arn || st.Cluster.Location != "us-east-1" || !strings.HasPrefix(st.Cluster.Endpoint, "https://") || len(st.NodePools) != 2 {
		t.Fatalf("after bring-up: %+v (cluster at the emulator %+v)", st, c)
	}
	if names := e.emu.ClusterNames(); !slices.Equal(names, []string{name}) {
		t.Fatalf("clusters at the emulator: %v, want %s", names, name)
	}
	if c.Status != "ACTIVE" || c.AuthenticationMode != "API" || c.Tags[providers.LabelSubstratePool] != poolID ||
		!slices.Equal(c.SubnetIDs, []string{"subnet-0000000000000000a", "subnet-0000000000000000b"}) {
		t.Errorf("the cluster at the emulator: %+v", c)
	}
	if got := e.emu.NodegroupNames(name); !slices.Equal(got, []string{h100, l4}) {
		t.Fatalf("node groups at the emulator: %v, want %s and %s", got, h100, l4)
	}
	// nodes count per zone: two subnets in two zones double them.
	checkGroup(t, e.emu, name, h100, eksemu.NodegroupState{InstanceTypes: []string{"p5.48xlarge"}, AmiType: "AL2023_x86_64_NVIDIA",
		CapacityType: "ON_DEMAND", DiskSize: 20, MinSize: 4, MaxSize: 4, Size: 4, Labels: testOwner(poolID).PoolLabels(false)})
	checkGroup(t, e.emu, name, l4, eksemu.NodegroupState{InstanceTypes: []string{"g6.xlarge"}, AmiType: "AL2023_x86_64_NVIDIA",
		CapacityType: "SPOT", DiskSize: 100, MinSize: 2, MaxSize: 2, Size: 2, Labels: testOwner(poolID).PoolLabels(true)})
	// What the reconciler sent, as sent: the Spot GPU group's request.
	var body struct {
		AmiType, CapacityType, NodeRole string
		InstanceTypes, Subnets          []string
		DiskSize                        int
		Labels                          map[string]string
		ClientRequestToken              string
	}
	for _, r := range e.emu.Requests() {
		if r.Op == "CreateNodegroup" && strings.HasSuffix(r.Path, "/node-groups") && strings.Contains(string(r.Body), `"`+l4+`"`) {
			_ = json.Unmarshal(r.Body, &body)
		}
	}
	if body.AmiType != "AL2023_x86_64_NVIDIA" || body.CapacityType != "SPOT" || body.DiskSize != 100 || body.NodeRole != "arn:aws:iam::111111111111:role/eks-node" ||
		!slices.Equal(body.InstanceTypes, []string{"g6.xlarge"}) || body.Labels[providers.LabelCapacity] != "spot" || len(body.ClientRequestToken) < 33 {
		t.Errorf("CreateNodegroup of %s sent %+v", l4, body)
	}

	e.noSecrets("after bring-up")

	// Converged: passes leave the substrate alone, whatever the clock.
	e.emu.ResetRequests()
	for range 10 {
		e.clk.Advance(time.Minute)
		if err := e.rec.ReconcileOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	idle := phase{name: "idle", passes: 10, took: 10 * time.Minute, calls: e.emu.Counts()}
	phases = append(phases, idle)
	idle.only(t, map[string]int{})

	// The discovery sweep lists the account's clusters (reading each, EKS
	// lists names only) and our cluster's node groups: nothing to say.
	e.emu.ResetRequests()
	rep, err := e.rec.Sweep(ctx)
	sweep := phase{name: "sweep", calls: e.emu.Counts()}
	phases = append(phases, sweep)
	if err != nil || rep != (substrate.SweepReport{Listed: 1}) {
		t.Errorf("sweep: %v %+v", err, rep)
	}
	sweep.only(t, map[string]int{"ListClusters": 1, "DescribeCluster": 1, "ListNodegroups": 1, "DescribeNodegroup": 2})

	// A restart looks once, in full: the cluster, its node groups, and
	// the two facts the new adapter has not cached yet (the subnets' zones,
	// each instance type's GPUs); then it is idle again.
	e.restart()
	restart := e.converge(1)
	restart.name = "restart"
	phases = append(phases, restart)
	restart.only(t, map[string]int{"DescribeCluster": 1, "ListNodegroups": 1, "DescribeNodegroup": 2, "DescribeSubnets": 1, "DescribeInstanceTypes": 2})
	e.emu.ResetRequests()
	e.clk.Advance(time.Minute)
	if err := e.rec.ReconcileOnce(ctx); err != nil || len(e.emu.Counts()) != 0 {
		t.Errorf("the pass after the restart's look: %v, %v", err, e.emu.Counts())
	}

	// A resize of the Spot flavor: one UpdateNodegroupConfig, in place.
	e.emu.ResetRequests()
	e.apply(referenceDocument(t, flavorNodes("l4", 3)), false)
	phases = append(phases, phase{name: "plan", calls: e.emu.Counts()})
	resize := e.converge(100)
	resize.name = "resize"
	phases = append(phases, resize)
	resize.only(t, map[string]int{"UpdateNodegroupConfig": 1}, reads...)
	checkGroup(t, e.emu, name, l4, eksemu.NodegroupState{InstanceTypes: []string{"g6.xlarge"}, AmiType: "AL2023_x86_64_NVIDIA",
		CapacityType: "SPOT", DiskSize: 100, MinSize: 6, MaxSize: 6, Size: 6, Labels: testOwner(poolID).PoolLabels(true)})
	checkGroup(t, e.emu, name, h100, eksemu.NodegroupState{InstanceTypes: []string{"p5.48xlarge"}, AmiType: "AL2023_x86_64_NVIDIA",
		CapacityType: "ON_DEMAND", DiskSize: 20, MinSize: 4, MaxSize: 4, Size: 4, Labels: testOwner(poolID).PoolLabels(false)})
	if got, _ := e.emu.Cluster(name); got.Arn != c.Arn {
		t.Fatalf("the cluster was replaced: %s -> %s", c.Arn, got.Arn)
	}
	if st := e.status(); st.State != "creating" || st.NodePools[1].Nodes != 3 {
		t.Errorf("after the resize: %+v", st)
	}

	// Teardown: the pool left out, with prune. The node groups go first,
	// then the cluster; nothing of ours is left.
	e.emu.ResetRequests()
	e.apply(referenceDocument(t, withoutPools), true)
	phases = append(phases, phase{name: "plan", calls: e.emu.Counts()})
	down := e.converge(200)
	down.name = "teardown"
	phases = append(phases, down)
	down.only(t, map[string]int{"DeleteNodegroup": 2, "DeleteCluster": 1}, reads...)
	if names := e.emu.ClusterNames(); len(names) != 0 {
		t.Errorf("left at the emulator: %v", names)
	}
	if st := e.status(); st.State != "deleted" || st.Message != "torn down: the pool was archived" || len(st.NodePools) != 0 {
		t.Errorf("after teardown: %+v", st)
	}
	if err := e.store.View(func(tx *state.Tx) error {
		ops, err := tx.JournalOps("")
		if len(ops) != 0 {
			t.Errorf("the journal holds %d operations after the teardown", len(ops))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e.noSecrets("after teardown")
}

// noSecrets fails if the account's keys are in the state file or the
// reconciler's logs: the document holds references, the adapter resolves
// them per call and keeps nothing.
func (e *substrateEnv) noSecrets(when string) {
	e.t.Helper()
	file, err := os.ReadFile(e.path)
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Contains(file, []byte("secret://ops/aws-secret")) || e.logs.Len() == 0 {
		e.t.Fatalf("%s: the state file holds no account, or nothing was logged: the canary looks at the wrong place", when)
	}
	for _, v := range []string{keyID, keySecret} {
		if bytes.Contains(file, []byte(v)) || strings.Contains(e.logs.String(), v) {
			e.t.Errorf("%s: %q is in the state file or the logs", when, v)
		}
	}
}

// checkGroup compares a node group at the emulator with want's shape,
// size and labels (the labels also as tags, with the size tag).
func checkGroup(t *testing.T, emu *eksemu.Emulator, cluster, name string, want eksemu.NodegroupState) {
	t.Helper()
	got, ok := emu.Nodegroup(cluster, name)
	if !ok {
		t.Errorf("node group %s is not at the emulator", name)
		return
	}
	tags := maps.Clone(want.Labels)
	tags["fleet-agent.dev/size"] = "fixed"
	if got.Status != "ACTIVE" || !slices.Equal(got.InstanceTypes, want.InstanceTypes) || got.AmiType != want.AmiType ||
		got.CapacityType != want.CapacityType || got.DiskSize != want.DiskSize ||
		got.MinSize != want.MinSize || got.MaxSize != want.MaxSize || got.Size != want.Size ||
		!maps.Equal(got.Labels, want.Labels) || !maps.Equal(got.Tags, tags) ||
		!slices.Equal(got.Subnets, []string{"subnet-0000000000000000a", "subnet-0000000000000000b"}) {
		t.Errorf("node group %s at the emulator:\n got %+v\nwant %+v (tags %v)", name, got, want, tags)
	}
}

// TestSubstrateCrashAfterACreate: the reconciler is killed right after EKS
// accepted a create and before the journal recorded it; restarted over
// the same state file and the same emulator (a new adapter, nothing
// cached), it reads the object back by name and converges with no twin:
// one create request, one cluster, one node group per flavor.
func TestSubstrateCrashAfterACreate(t *testing.T) {
	for _, step := range []string{"createCluster", "createNodePool"} {
		t.Run(step, func(t *testing.T) {
			if !slices.Contains(substrate.Steps, step) {
				t.Fatalf("%s is not a step of the substrate (%v)", step, substrate.Steps)
			}
			calls := map[string]killtest.Call{"createCluster": killtest.EnsureCluster, "createNodePool": killtest.EnsureNodePool}
			kill := &killtest.KillAfter{Call: calls[step]}
			e := newSubstrateEnv(t, kill)
			kill.Kill = func() {
				if err := e.store.Close(); err != nil {
					t.Error(err)
				}
			}
			e.apply(referenceDocument(t, nil), false)
			crashed := false
			for i := 0; i < 200 && !crashed; i++ {
				err := e.rec.ReconcileOnce(t.Context())
				switch {
				case kill.Fired():
					if err == nil {
						t.Fatal("a pass whose store was closed under it reported no error")
					}
					crashed = true
					// Open the file again to read what the kill left.
					if err := e.stop(); err != nil {
						t.Fatal(err)
					}
					e.start()
				case err != nil:
					t.Fatal(err)
				case e.converged():
					t.Fatal("converged without reaching the crash point")
				default:
					e.clk.Advance(substrate.DefaultPoll)
				}
			}
			if !crashed {
				t.Fatal("the crash point was never reached")
			}
			// The call was made and answered; the journal says it is in
			// flight.
			var inFlight []string
			_ = e.store.View(func(tx *state.Tx) error {
				ops, err := tx.JournalOps("")
				for _, op := range ops {
					if op.State == state.InFlight {
						inFlight = append(inFlight, op.Step)
					}
				}
				return err
			})
			if !slices.Equal(inFlight, []string{step}) {
				t.Fatalf("in flight at the crash: %v, want %s", inFlight, step)
			}
			creates := map[string]string{"createCluster": "CreateCluster", "createNodePool": "CreateNodegroup"}
			if n := e.emu.Count(creates[step]); n != 1 {
				t.Fatalf("%d %s requests before the crash", n, creates[step])
			}
			e.restart()
			after := e.converge(200)
			after.name = "after"
			t.Log(after)

			poolID := inventory.ID("root", inventory.Pool, "gpu-fleet")
			name := substrate.ClusterName("gpu-fleet", testOwner(poolID))
			want := []string{testOwner(poolID).NodePoolName("h100"), testOwner(poolID).NodePoolName("l4")}
			sort.Strings(want)
			if got := e.emu.ClusterNames(); !slices.Equal(got, []string{name}) {
				t.Errorf("clusters at the emulator: %v", got)
			}
			if got := e.emu.NodegroupNames(name); !slices.Equal(got, want) {
				t.Errorf("node groups at the emulator: %v, want %v", got, want)
			}
			if n := e.emu.Count("CreateCluster"); n != 1 {
				t.Errorf("%d CreateCluster requests in all", n)
			}
			if n := e.emu.Count("CreateNodegroup"); n != 2 {
				t.Errorf("%d CreateNodegroup requests in all", n)
			}
			if st := e.status(); st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) {
				t.Errorf("after the restart: %+v", st)
			}
		})
	}
}

// renameFlavor gives a flavor a new name (a new node pool, the old one
// removed).
func renameFlavor(from, to string) func(map[string]any) {
	return func(doc map[string]any) {
		for _, f := range poolSubstrate(doc)["flavors"].([]any) {
			if f := f.(map[string]any); f["name"] == from {
				f["name"] = to
			}
		}
	}
}

// TestSubstrateMeetsEKSFailures: what EKS does wrong reaches the
// substrate as the adapter classed it. A node group that cannot get its
// Spot instances (CREATE_FAILED with AsgInstanceLaunchFailures) is its
// flavor's error while the other flavor comes up, stays so without a
// request until the document changes, and a renamed flavor replaces it. A
// cluster whose create FAILED (a role EKS cannot assume) is the
// substrate's error with EKS's health issue, gets no node group, and is
// deleted at teardown.
func TestSubstrateMeetsEKSFailures(t *testing.T) {
	poolID := inventory.ID("root", inventory.Pool, "gpu-fleet")
	name := substrate.ClusterName("gpu-fleet", testOwner(poolID))
	h100, l4 := testOwner(poolID).NodePoolName("h100"), testOwner(poolID).NodePoolName("l4")

	t.Run("stockout", func(t *testing.T) {
		e := newSubstrateEnv(t, nil)
		e.emu.Stockout("g6.xlarge", true)
		e.apply(referenceDocument(t, nil), false)
		e.converge(200)
		st := e.status()
		if st.State != "error" || !strings.Contains(st.Message, "flavor l4") || !strings.Contains(st.Message, "AsgInstanceLaunchFailures") ||
			!strings.Contains(st.Message, "InsufficientInstanceCapacity") || strings.Contains(st.Message, "flavor h100") {
			t.Fatalf("a flavor in a stockout: %+v", st)
		}
		t.Logf("status: %s: %s", st.State, st.Message)
		if g, _ := e.emu.Nodegroup(name, h100); g.Status != "ACTIVE" {
			t.Errorf("the other flavor: %+v", g)
		}
		if g, _ := e.emu.Nodegroup(name, l4); g.Status != "CREATE_FAILED" || !slices.Equal(g.Issues, []string{"AsgInstanceLaunchFailures"}) {
			t.Errorf("the flavor in the stockout at the emulator: %+v", g)
		}
		before := e.emu.Count("")
		for range 5 {
			e.clk.Advance(time.Minute)
			if err := e.rec.ReconcileOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.emu.Count("") - before; n != 0 {
			t.Errorf("%d requests while converged in error", n)
		}
		e.emu.Stockout("g6.xlarge", false)
		e.apply(referenceDocument(t, renameFlavor("l4", "l4b")), false)
		again := e.converge(200)
		again.name = "renamed"
		t.Log(again)
		l4b := testOwner(poolID).NodePoolName("l4b")
		if got := e.emu.NodegroupNames(name); !slices.Equal(got, []string{h100, l4b}) {
			t.Errorf("node groups after the rename: %v", got)
		}
		if st := e.status(); st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) {
			t.Errorf("after the rename: %+v", st)
		}
	})

	t.Run("cluster create failed", func(t *testing.T) {
		e := newSubstrateEnv(t, nil)
		e.emu.FailClusterCreates(1, eksemu.ClusterIssue{Code: "IamRoleNotFound",
			Message: "The cluster role arn:aws:iam::111111111111:role/eks-cluster could not be assumed"})
		e.apply(referenceDocument(t, nil), false)
		e.converge(200)
		st := e.status()
		if c, _ := e.emu.Cluster(name); c.Status != "FAILED" || st.State != "error" || !strings.Contains(st.Message, "IamRoleNotFound: The cluster role") {
			t.Fatalf("a cluster whose create failed: %+v (at the emulator %s)", st, c.Status)
		}
		t.Logf("status: %s: %s", st.State, st.Message)
		if n := e.emu.Count("CreateNodegroup"); n != 0 || len(e.emu.NodegroupNames(name)) != 0 {
			t.Errorf("%d node groups asked of a FAILED cluster", n)
		}
		e.apply(referenceDocument(t, withoutPools), true)
		down := e.converge(200)
		down.name = "teardown"
		t.Log(down)
		down.only(t, map[string]int{"DeleteCluster": 1, "DeleteNodegroup": 0}, reads...)
		if names := e.emu.ClusterNames(); len(names) != 0 {
			t.Errorf("left at the emulator: %v", names)
		}
		if st := e.status(); st.State != "deleted" {
			t.Errorf("after teardown: %+v", st)
		}
	})
}
