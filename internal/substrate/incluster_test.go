package substrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/metrics"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// daemon stands in for issue 12's in-cluster half: it mints a credential
// each run, checks the cluster would take it, and reports Nodes.
type daemon struct {
	mu        sync.Mutex
	env       *env
	applies   int
	teardowns int
	failDown  int
	tokens    []string
	// poolsAtTeardown are our node pools that still existed when the
	// teardown was called.
	poolsAtTeardown int
	revoked         int
	// refuse, when set, is every Apply's error.
	refuse error
}

func (d *daemon) Apply(ctx context.Context, t substrate.Target) (substrate.Nodes, error) {
	cred, err := t.Credentials(ctx)
	if err != nil {
		return substrate.Nodes{}, err
	}
	if !d.env.fake.Accepts(cred) {
		return substrate.Nodes{}, errors.New("the cluster refused the credential")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applies++
	d.tokens = append(d.tokens, cred.Token)
	if d.refuse != nil {
		return substrate.Nodes{}, d.refuse
	}
	return substrate.Nodes{Listed: 2, Joined: 1, WaitingSince: d.env.clock.Now().Add(-time.Minute)}, nil
}

func (d *daemon) Teardown(ctx context.Context, t substrate.Target) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.teardowns++
	if d.failDown > 0 {
		d.failDown--
		return errors.New("the DaemonSet fleet-node/fleet-node could not be deleted: forbidden")
	}
	for _, c := range d.env.fake.Snapshot().Clusters {
		for _, np := range c.NodePools {
			if np.Labels[providers.LabelSubstratePool] == t.PoolID {
				d.poolsAtTeardown++
			}
		}
	}
	if t.Mode == "adopt" {
		d.revoked++
		return t.RevokeAccess(ctx)
	}
	return nil
}

// TestInClusterSeam: with an in-cluster half the substrate is ready once it
// applied, keeps being applied every Every without provider reads, and its
// teardown comes first, retried two minutes later when it fails.
func TestInClusterSeam(t *testing.T) {
	d := &daemon{failDown: 1}
	e := newEnv(t, func(o *substrate.Options) { o.InCluster = d })
	d.env = e
	step := crashtest.Step{Pools: []crashtest.Pool{{Name: "own", Adopt: true, Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}}}}
	e.applyStep(step)
	e.converge(10*time.Second, 30)
	st := e.status("own")
	if st.State != "ready" || st.Nodes != (substrate.StatusNodes{Listed: 2, Joined: 1}) || st.WaitingToJoin.Count != 1 || st.WaitingToJoin.Since == nil {
		t.Fatalf("%+v", st)
	}
	reads, applies := e.fake.Calls("ReadAdoptable")+e.fake.Calls("ListNodePools"), d.applies
	for range 3 {
		e.clock.Advance(substrate.DefaultEvery)
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if d.applies != applies+3 || e.fake.Calls("ReadAdoptable")+e.fake.Calls("ListNodePools") != reads {
		t.Fatalf("applies %d -> %d, reads %d -> %d", applies, d.applies, reads, e.fake.Calls("ReadAdoptable")+e.fake.Calls("ListNodePools"))
	}
	last := crashtest.Step{Pools: []crashtest.Pool{{Name: "own", Adopt: true, Left: true}}, Prune: true}
	e.applyStep(last)
	_ = e.rec.ReconcileOnce(t.Context())
	if st := e.status("own"); st.State != "deleting" || !strings.Contains(st.Message, "forbidden") || e.fake.Calls("DeleteNodePool") != 0 {
		t.Fatalf("after a failed teardown of the node daemon: %+v (DeleteNodePool %d)", st, e.fake.Calls("DeleteNodePool"))
	}
	e.clock.Advance(time.Minute)
	_ = e.rec.ReconcileOnce(t.Context())
	if d.teardowns != 1 {
		t.Fatalf("tried again before two minutes: %d", d.teardowns)
	}
	e.clock.Advance(time.Minute)
	e.converge(10*time.Second, 30)
	e.check(last)
	if d.teardowns != 2 || d.poolsAtTeardown != 1 || d.revoked != 1 || e.fake.HasAccess(st.Cluster.ID) {
		t.Fatalf("teardowns %d, node pools still there then %d, revoked %d", d.teardowns, d.poolsAtTeardown, d.revoked)
	}
}

// TestNothingHoldsASecret runs a lifecycle with faults and an in-cluster
// half that mints credentials, then looks for the account's secret value
// and every minted token in the state file, the logs, the statuses and the
// metrics: none may hold either.
func TestNothingHoldsASecret(t *testing.T) {
	d := &daemon{}
	m := metrics.New(nil)
	e := newEnv(t, func(o *substrate.Options) { o.InCluster = d; o.Metrics = m })
	d.env = e
	for _, f := range []fake.Fault{
		{Method: "EnsureCluster", Drop: true},
		{Method: "EnsureNodePool", Class: providers.Terminal, SideEffect: providers.None},
		{Method: "Credentials", Class: providers.Unavailable, SideEffect: providers.None},
	} {
		if err := e.fake.InjectFault(f); err != nil {
			t.Fatal(err)
		}
	}
	s := crashtest.Scenarios()
	e.applyStep(s[0].Steps[0])
	for range 20 {
		_ = e.rec.ReconcileOnce(t.Context())
		e.clock.Advance(time.Minute)
	}
	e.converge(10*time.Second, 30)
	statuses, err := substrate.Statuses(e.store)
	if err != nil {
		t.Fatal(err)
	}
	e.applyStep(crashtest.Step{Prune: true})
	e.converge(10*time.Second, 30)
	if len(d.tokens) == 0 {
		t.Fatal("no credential was minted: the test proves nothing")
	}
	jsonStatuses, _ := json.Marshal(statuses)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	scraped, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(scraped), `fleet_agent_substrate_journal_operations_total{result="succeeded",step="createCluster"}`) ||
		!strings.Contains(string(scraped), `fleet_agent_substrates{state="deleted"} 2`) {
		t.Fatalf("metrics lack the substrate series:\n%s", scraped)
	}
	stateFile := e.storeBytes()
	places := map[string]string{"state file": string(stateFile), "logs": e.logs.String(), "statuses": string(jsonStatuses), "metrics": string(scraped),
		"text": strings.Join(substrate.TextLines(statuses), "\n")}
	secrets := append([]string{crashtest.TokenValue}, d.tokens...)
	for where, text := range places {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("the %s holds a secret (%.12s...)", where, s)
			}
		}
	}
	if !strings.Contains(string(stateFile), "secret://fake-token") {
		t.Error("the state file does not even hold the reference: the search looks in the wrong place")
	}
}
