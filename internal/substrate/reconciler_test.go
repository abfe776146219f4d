package substrate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// TestLifecycle: merged, the cluster and node pools come up (creating,
// waiting for the node daemon); a resize converges in place; a removed
// flavor's node pool goes; a teardown removes everything.
func TestLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	for _, s := range crashtest.Scenarios() {
		if s.Name != "createThenResize" {
			continue
		}
		e.applyStep(s.Steps[0])
		if st := e.status("gpu"); st.State != "pending" || st.Message != substrate.PendingMessage {
			t.Fatalf("before a pass: %+v", st)
		}
		e.converge(10*time.Second, 30)
		e.check(s.Steps[0])
		st := e.status("gpu")
		if st.State != "creating" || !strings.Contains(st.Message, substrate.NoDaemonMessage) || st.Cluster.ID == "" ||
			st.Cluster.GlobalID == "" || st.Cluster.Endpoint == "" || st.Mode != "create" || len(st.NodePools) != 2 {
			t.Fatalf("after create: %+v", st)
		}
		clusterID := st.Cluster.ID
		e.applyStep(s.Steps[1])
		if st := e.status("gpu"); st.State != "pending" {
			t.Fatalf("a changed document reads %s", st.State)
		}
		e.converge(10*time.Second, 30)
		e.check(s.Steps[1])
		if st := e.status("gpu"); st.Cluster.ID != clusterID {
			t.Fatalf("the cluster was replaced: %s -> %s", clusterID, st.Cluster.ID)
		}
		if e.fake.Calls("EnsureCluster") != 1 {
			t.Fatalf("EnsureCluster called %d times", e.fake.Calls("EnsureCluster"))
		}
	}
	// Teardown: the pool is left out with prune.
	last := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Left: true, Flavors: []crashtest.Flavor{{Name: "h100"}}}}, Prune: true}
	e.applyStep(last)
	e.converge(10*time.Second, 30)
	e.check(last)
	if st := e.status("gpu"); st.State != "deleted" || st.Message != "torn down: the pool was archived" || len(st.NodePools) != 0 {
		t.Fatalf("after teardown: %+v", st)
	}
	// Nothing of it is left in the journal; the claim is released.
	if err := e.store.View(func(tx *state.Tx) error {
		ops, err := tx.JournalOps("")
		if len(ops) != 0 {
			t.Errorf("journal after teardown: %d operations", len(ops))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{`"message":"substrate: journal transition"`, `"to":"deleted"`, `"event":"succeed"`} {
		if !strings.Contains(e.logs.String(), line) {
			t.Errorf("no log line with %s", line)
		}
	}
}

// TestConvergedCallsNothing: a converged substrate makes no provider call
// until the document changes or the agent restarts; a restart looks once.
func TestConvergedCallsNothing(t *testing.T) {
	e := newEnv(t, nil)
	step := crashtest.Scenarios()[0].Steps[0]
	e.applyStep(step)
	e.converge(10*time.Second, 30)
	calls := func() int {
		n := 0
		for _, m := range []string{"EnsureCluster", "GetCluster", "ListNodePools", "GetNodePool", "EnsureNodePool", "ResizeNodePool", "DeleteNodePool", "DeleteCluster"} {
			n += e.fake.Calls(m)
		}
		return n
	}
	before := calls()
	for range 5 {
		e.clock.Advance(time.Minute)
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if calls() != before {
		t.Fatalf("%d provider calls with nothing to do", calls()-before)
	}
	e.restart()
	if err := e.rec.ReconcileOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e.fake.Calls("GetCluster") != 2 || e.fake.Calls("ListNodePools") != 2 || e.fake.Calls("EnsureCluster") != 0 {
		t.Fatalf("after a restart: GetCluster %d, ListNodePools %d, EnsureCluster %d", e.fake.Calls("GetCluster"), e.fake.Calls("ListNodePools"), e.fake.Calls("EnsureCluster"))
	}
	e.check(step)
}

// TestAutoscalingKeepsTheCurrentSize: with autoscaling only the bounds are
// the document's; the count the autoscaler chose stays.
func TestAutoscalingKeepsTheCurrentSize(t *testing.T) {
	e := newEnv(t, nil)
	pool := crashtest.Pool{Name: "inf", Flavors: []crashtest.Flavor{{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 1, Autoscaling: &[2]int{1, 5}}}}
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	// The autoscaler moves the pool to 4 nodes.
	st := e.status("inf")
	ref := providers.ClusterRef{ID: st.Cluster.ID}
	acct := providers.Account{Name: crashtest.Account, Provider: "fake", Config: []byte(`{"token":"secret://fake-token","project":"fleet"}`)}
	name := testOwner(pool.ID()).NodePoolName("cpu")
	if _, err := e.fake.ResizeNodePool(t.Context(), acct, ref, name, providers.Size{NodeCount: 4, Autoscaling: &providers.Autoscaling{MinNodes: 1, MaxNodes: 5}}); err != nil {
		t.Fatal(err)
	}
	_ = e.fake.Advance()
	pool.Flavors[0].Autoscaling = &[2]int{2, 6}
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	np := e.fake.Snapshot().Clusters[st.Cluster.ID].NodePools[name]
	if np.NodeCount != 4 || np.Autoscaling == nil || *np.Autoscaling != (providers.Autoscaling{MinNodes: 2, MaxNodes: 6}) {
		t.Fatalf("node pool after new bounds: %d nodes, %+v", np.NodeCount, np.Autoscaling)
	}
	// Bounds below the current count bring it within them.
	pool.Flavors[0].Autoscaling = &[2]int{1, 2}
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	if np := e.fake.Snapshot().Clusters[st.Cluster.ID].NodePools[name]; np.NodeCount != 2 {
		t.Fatalf("node pool after lower bounds: %d nodes", np.NodeCount)
	}
}

// TestShapeChangeIsAnErrorWhileOthersGoOn: a flavor whose machine type
// changes is an error with the provider's reason; another flavor's resize
// in the same document goes on.
func TestShapeChangeIsAnErrorWhileOthersGoOn(t *testing.T) {
	e := newEnv(t, nil)
	pool := crashtest.Pool{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}, {Name: "l4", MachineType: "fake-l4x1", Nodes: 1}}}
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	pool.Flavors[0].MachineType = "fake-cpu-8"
	pool.Flavors[1].Nodes = 3
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	st := e.status("gpu")
	if st.State != "error" || !strings.Contains(st.Message, "flavor h100") || !strings.Contains(st.Message, "never change in place") ||
		!strings.Contains(st.Message, "give the flavor a new name") {
		t.Fatalf("status %+v", st)
	}
	truth := e.fake.Snapshot().Clusters[st.Cluster.ID]
	if np := truth.NodePools[testOwner(pool.ID()).NodePoolName("l4")]; np.NodeCount != 3 {
		t.Fatalf("the other flavor did not resize: %d", np.NodeCount)
	}
	if np := truth.NodePools[testOwner(pool.ID()).NodePoolName("h100")]; np.MachineType != "fake-h100x8" {
		t.Fatalf("the refused flavor changed: %s", np.MachineType)
	}
	// Converged in error: no call until the document changes.
	n := e.fake.Calls("EnsureNodePool")
	for range 3 {
		e.clock.Advance(time.Hour)
		_ = e.rec.ReconcileOnce(t.Context())
	}
	if e.fake.Calls("EnsureNodePool") != n {
		t.Fatal("a refusal for good was tried again without a new document")
	}
	// A new flavor name makes a new node pool; the old one goes.
	pool.Flavors[0].Name = "cpu8"
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{pool}})
	e.converge(10*time.Second, 30)
	e.check(crashtest.Step{Pools: []crashtest.Pool{pool}})
}

// TestSecondPoolOnTheSameClusterIsRefused: two pools adopting one cluster
// through two accounts: the second one's substrate is an error and makes
// nothing in the cluster.
func TestSecondPoolOnTheSameClusterIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	doc := `{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}],
	"providerAccounts":[{"name":"a","provider":"fake","config":{"token":"secret://fake-token","project":"p1"}},
	                    {"name":"b","provider":"fake","config":{"token":"secret://fake-token","project":"p2"}}],
	"pools":[
	 {"name":"first","site":"k8s","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"a","cluster":{"adopt":"fake-east/theirs"},"flavors":[{"name":"h100","machineType":"fake-h100x8","nodes":1}]}}},
	 {"name":"second","site":"k8s","class":"metal-host","policy":{"substrate":{"kind":"kubernetes","account":"b","cluster":{"adopt":"fake-east/theirs"},"flavors":[{"name":"l4","machineType":"fake-l4x1","nodes":1}]}}}]}`
	e.apply(doc, false)
	for range 20 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	// The passes run at once: either pool may claim first.
	won, lost := e.status("first"), e.status("second")
	if won.State != "creating" {
		won, lost = lost, won
	}
	if won.State != "creating" || lost.State != "error" || !strings.Contains(lost.Message, `already backs pool "`+won.Pool+`"`) {
		t.Fatalf("won %+v\nlost %+v", won, lost)
	}
	loser := "-l4"
	if lost.Pool == "first" {
		loser = "-h100"
	}
	pools := e.fake.Snapshot().Clusters[won.Cluster.ID].NodePools
	for name := range pools {
		if strings.HasSuffix(name, loser) {
			t.Fatalf("the refused pool made %s", name)
		}
	}
	if len(pools) != 2 {
		t.Fatalf("the cluster holds %d node pools, want the owner's and the winner's", len(pools))
	}
}

// TestTeardownRefusedIsRetriedOnSchedule: a refused cluster delete is an
// error with the provider's message, tried again after 5, 10, 20 minutes on
// the injected clock, and finishes once the cause is gone.
func TestTeardownRefusedIsRetriedOnSchedule(t *testing.T) {
	e := newEnv(t, nil)
	setup := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}}}}
	e.applyStep(setup)
	e.converge(10*time.Second, 30)
	if err := e.fake.InjectFault(fakeFault("DeleteCluster", 3, providers.Terminal, "the account lost the permission eks:DeleteCluster")); err != nil {
		t.Fatal(err)
	}
	last := crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Left: true}}, Prune: true}
	e.applyStep(last)
	for range 10 {
		_ = e.rec.ReconcileOnce(t.Context())
		e.clock.Advance(time.Second)
	}
	st := e.status("gpu")
	if st.State != "error" || !strings.Contains(st.Message, "lost the permission") || !strings.Contains(st.Message, "refusal 1") {
		t.Fatalf("after the first refusal: %+v", st)
	}
	waits := []time.Duration{}
	last1 := e.clock.Now()
	for i := 0; i < 4 && e.status("gpu").State != "deleted"; i++ {
		before := e.fake.Calls("DeleteCluster")
		for e.fake.Calls("DeleteCluster") == before {
			e.clock.Advance(time.Minute)
			_ = e.rec.ReconcileOnce(t.Context())
		}
		waits = append(waits, e.clock.Now().Sub(last1).Round(time.Minute))
		last1 = e.clock.Now()
	}
	e.converge(10*time.Second, 30)
	e.check(last)
	if len(waits) < 3 || waits[0] != 5*time.Minute || waits[1] != 10*time.Minute || waits[2] != 20*time.Minute {
		t.Fatalf("waits between attempts: %v", waits)
	}
	if st := e.status("gpu"); st.State != "deleted" {
		t.Fatalf("%+v", st)
	}
}

func TestRefusalWaitSchedule(t *testing.T) {
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, 80 * time.Minute, 160 * time.Minute, 320 * time.Minute, 6 * time.Hour, 6 * time.Hour}
	for i, w := range want {
		if got := substrate.RefusalWait(i + 1); got != w {
			t.Errorf("RefusalWait(%d) = %v, want %v", i+1, got, w)
		}
	}
	if substrate.RetryWait(1) != 5*time.Second || substrate.RetryWait(100) != 5*time.Minute {
		t.Errorf("RetryWait: %v %v", substrate.RetryWait(1), substrate.RetryWait(100))
	}
}

func TestNames(t *testing.T) {
	id := "pool_abcdefghijklmnopqrstuvwxyz"
	legacy := providers.Owner{Installation: testInstallation, PoolID: id, Legacy: true}
	owned := testOwner(id)
	s := owned.Suffix()
	cases := []struct {
		pool string
		o    providers.Owner
		want string
	}{
		{"gpu", legacy, "fa-gpu-uvwxyz"},
		{"a.b_c", legacy, "fa-a-b-c-uvwxyz"},
		{strings.Repeat("x", 40), legacy, "fa-" + strings.Repeat("x", 30) + "-uvwxyz"},
		{"gpu", owned, "fa-gpu-" + s},
		{strings.Repeat("x", 40), owned, "fa-" + strings.Repeat("x", 30) + "-" + s},
	}
	for _, c := range cases {
		if got := substrate.ClusterName(c.pool, c.o); got != c.want || len(got) > 40 {
			t.Errorf("ClusterName(%q, %+v) = %q, want %q", c.pool, c.o, got, c.want)
		}
	}
	if other := (providers.Owner{Installation: "another", PoolID: id}); s == "uvwxyz" || s == other.Suffix() {
		t.Errorf("suffix %q does not depend on the installation", s)
	}
	a, b := substrate.ClientToken("k1"), substrate.ClientToken("k2")
	if a == b || a != substrate.ClientToken("k1") || len(a) < 33 || len(a) > 126 || strings.ToLower(a) != a {
		t.Errorf("tokens %q %q", a, b)
	}
}

// A pass cut off by the agent's own stop learned nothing about the
// provider: a converged substrate stays converged, its message untouched
// (found by the child-process campaign: a SIGTERM in the middle of a pass
// left "cancelled before the call" as the state of a converged substrate).
func TestStopInTheMiddleOfAPassRecordsNothing(t *testing.T) {
	e := newEnv(t, nil)
	step := crashtest.Scenarios()[0].Steps[0]
	e.applyStep(step)
	e.converge(time.Second, 50)
	before := e.records()
	e.restart()
	// A new start reads every substrate back once (a full pass); its first
	// read hangs (on the fake clock, which nobody
	// moves) until the stop cancels it; the reads after it meet a cancelled
	// context.
	for _, m := range []string{"GetCluster", "ReadAdoptable", "ListNodePools", "GetNodePool"} {
		if err := e.fake.AddLatency(m, 1, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.rec.ReconcileOnce(ctx) }()
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	after := e.records()
	for i := range before {
		b, a := before[i].Seen, after[i].Seen
		if !a.Converged || a.Message != b.Message || a.State != b.State {
			t.Errorf("pool %s: a stopped pass changed the record: %s %q converged %v, was %s %q", after[i].Want.Pool, a.State, a.Message, a.Converged, b.State, b.Message)
		}
	}
}

// TestAccountWithoutAnOpenAdapterSaysWhatToAdd: a substrate whose account's
// provider has no adapter open (the agent's config has no providers.<id>
// block) is in error with a message that names the block to add, not one
// that blames the build.
func TestAccountWithoutAnOpenAdapterSaysWhatToAdd(t *testing.T) {
	e := newEnv(t, func(o *substrate.Options) { o.Providers = map[string]substrate.Provider{} })
	e.applyStep(gpuStep)
	if err := e.rec.ReconcileOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := e.status("gpu")
	if st.State != "error" {
		t.Fatalf("state %s: %s", st.State, st.Message)
	}
	for _, want := range []string{`"k8s"`, "fake account", "no providers.fake block", "add a providers.fake block", "restart"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("the message does not say %q: %s", want, st.Message)
		}
	}
	if strings.Contains(st.Message, "this build") {
		t.Errorf("the message blames the build: %s", st.Message)
	}
}
