package digitalocean_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean"
	"github.com/fleet-agent/fleet-agent/internal/providers/digitalocean/doemu"
)

// These tests replay, through the adapter, the request a leader sends late:
// it was paused after its fence (providers.WithFence) passed and before the
// request left, and wakes once another agent took over and moved on
// (docs/ha.md, "The fence per term"). pause stands right after the fence in
// the old leader's transport and holds the request there; the new leader is
// the world's own adapter.

var errTermEnded = errors.New("the term ended")

// pause holds the first request that matches until the test lets it go,
// and keeps the status DigitalOcean answered it with.
type pause struct {
	match   func(*http.Request) bool
	hold    sync.Once
	held    chan struct{}
	letGo   sync.Once
	release chan struct{}
	status  int
}

func newPause(t *testing.T, method, pathSuffix string) *pause {
	p := &pause{held: make(chan struct{}), release: make(chan struct{}),
		match: func(r *http.Request) bool { return r.Method == method && strings.HasSuffix(r.URL.Path, pathSuffix) }}
	// A test that stops early must not leave the request held while the
	// server closes.
	t.Cleanup(p.let)
	return p
}

func (p *pause) let() { p.letGo.Do(func() { close(p.release) }) }

func (p *pause) RoundTrip(r *http.Request) (*http.Response, error) {
	hold := false
	if p.match(r) {
		p.hold.Do(func() { hold = true })
	}
	if !hold {
		return http.DefaultTransport.RoundTrip(r)
	}
	close(p.held)
	<-p.release
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		p.status = resp.StatusCode
	}
	return resp, err
}

// oldLeader is a second adapter on the emulator, as another agent has one
// (nothing cached), whose requests go through p.
func (w *world) oldLeader(t *testing.T, p *pause) *digitalocean.Adapter {
	t.Helper()
	ad, err := digitalocean.Open(block(t, "apiURL: "+w.srv.URL+"\n"), store, digitalocean.WithClock(w.clk), digitalocean.WithTransport(p))
	if err != nil {
		t.Fatal(err)
	}
	return ad
}

// late runs call as the old leader. Once its request is held, the term
// ends (the fence refuses every request the call makes after it) and
// moveOn does what the new leader does; then the held request reaches
// DigitalOcean. It returns the status of the late request.
func late(t *testing.T, p *pause, call func(context.Context) error, moveOn func()) int {
	t.Helper()
	var ended atomic.Bool
	ctx := providers.WithFence(t.Context(), func() error {
		if ended.Load() {
			return errTermEnded
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case <-p.held:
	case err := <-done:
		t.Fatalf("the old leader's call ended without sending the request to hold: %v", err)
	}
	ended.Store(true)
	moveOn()
	p.let()
	<-done
	return p.status
}

const latePool = "pool_helpers000000000000abcdef"

// TestLateCreateDuplicates: DigitalOcean documents no rule that a name is
// unique, and a create carries no token, so a late create next to the new
// leader's makes a second cluster of the name (the emulator told to take
// duplicates). The discovery sweep's listing finds it by its label, with
// its own id; the new leader's cluster is still read by its id. A second
// node pool of the name makes the adapter refuse the calls on that name
// until one is deleted.
func TestLateCreateDuplicates(t *testing.T) {
	w := newWorld(t, doemu.Options{AllowDuplicateNames: true}, "")
	spec := providers.ClusterSpec{Name: "fa-late", Location: "tor1", Version: "1.34", Labels: map[string]string{providers.LabelSubstratePool: latePool}}
	p := newPause(t, http.MethodPost, "/v2/kubernetes/clusters")
	old := w.oldLeader(t, p)
	var c providers.Cluster
	status := late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureCluster(ctx, acct, spec)
		return err
	}, func() { c = w.ready(t, spec.Name) })
	if status != http.StatusCreated {
		t.Errorf("the late create was answered %d, want 201", status)
	}
	all, err := w.ad.ListClusters(t.Context(), acct, providers.LabelSubstratePool)
	if err != nil || len(all) != 2 || all[0].Ref.Name != spec.Name || all[1].Ref.Name != spec.Name || all[0].Ref.ID == all[1].Ref.ID {
		t.Fatalf("the sweep's listing after the late create: %+v %v", all, err)
	}
	if got, err := w.ad.GetCluster(t.Context(), acct, c.Ref); err != nil || got.Ref.ID != c.Ref.ID {
		t.Errorf("the new leader's cluster by its id: %+v %v", got.Ref, err)
	}

	pool := cpuPool("fa-abcdef-cpu")
	p = newPause(t, http.MethodPost, "/node_pools")
	old = w.oldLeader(t, p)
	status = late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureNodePool(ctx, acct, c.Ref, pool)
		return err
	}, func() { w.readyPool(t, c.Ref, pool) })
	if status != http.StatusCreated {
		t.Errorf("the late node pool create was answered %d, want 201", status)
	}
	if pools, err := w.ad.ListNodePools(t.Context(), acct, c.Ref); err != nil || len(pools) != 3 { // the default pool and two of ours
		t.Errorf("node pools after the late create: %+v %v", pools, err)
	}
	if _, err := w.ad.GetNodePool(t.Context(), acct, c.Ref, pool.Name); providers.ClassOf(err) != providers.Conflict || !strings.Contains(err.Error(), "delete the extra ones") {
		t.Errorf("a call on the doubled name: %v", err)
	}
}

// TestLateUpgradeRefused: an upgrade to a release the new leader already
// went past is refused (422): DOKS does not go down.
func TestLateUpgradeRefused(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	spec := providers.ClusterSpec{Name: "fa-late-up", Location: "tor1", Version: "1.33", Labels: map[string]string{providers.LabelSubstratePool: latePool}}
	c, err := w.ad.EnsureCluster(t.Context(), acct, spec)
	if err != nil {
		t.Fatal(err)
	}
	running := func() providers.Cluster {
		t.Helper()
		for range 20 {
			got, err := w.ad.GetCluster(t.Context(), acct, c.Ref)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status == providers.ClusterRunning {
				return got
			}
		}
		t.Fatal("the cluster does not run")
		return c
	}
	running()
	to := func(v string) providers.ClusterSpec {
		s := spec
		s.Version = v
		return s
	}
	p := newPause(t, http.MethodPost, "/upgrade")
	old := w.oldLeader(t, p)
	status := late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureCluster(ctx, acct, to("1.34"))
		return err
	}, func() {
		// DOKS goes one minor per upgrade: two hops.
		for _, hop := range []string{"1.34.2-do.1", "1.35.1-do.0"} {
			if _, err := w.ad.EnsureCluster(t.Context(), acct, to("1.35")); err != nil {
				t.Fatal(err)
			}
			if got := running(); got.Outputs.Version != hop {
				t.Fatalf("the new leader's upgrade: %q, want %s", got.Outputs.Version, hop)
			}
		}
	})
	if status != http.StatusUnprocessableEntity {
		t.Errorf("the late upgrade was answered %d, want 422", status)
	}
	if got, err := w.ad.GetCluster(t.Context(), acct, c.Ref); err != nil || got.Status != providers.ClusterRunning || got.Outputs.Version != "1.35.1-do.0" {
		t.Errorf("after the late upgrade: %s %q %v", got.Status, got.Outputs.Version, err)
	}
}

// TestLatePoolUpdateLands: a node pool's update (its count and labels, in
// one PUT) carries no precondition, so a late one undoes the new leader's
// (the window); the next call with the document's values sets them again.
func TestLatePoolUpdateLands(t *testing.T) {
	w := newWorld(t, doemu.Options{}, "")
	c := w.ready(t, "fa-late-pool")
	pool := cpuPool("fa-abcdef-cpu")
	w.readyPool(t, c.Ref, pool)
	read := func() providers.NodePool {
		t.Helper()
		np, err := w.ad.GetNodePool(t.Context(), acct, c.Ref, pool.Name)
		if err != nil {
			t.Fatal(err)
		}
		return np
	}
	with := func(n int, x string) providers.NodePoolSpec {
		s := pool
		s.Size = providers.Size{NodeCount: n}
		s.Labels = map[string]string{providers.LabelSubstratePool: latePool, "x": x}
		return s
	}
	p := newPause(t, http.MethodPut, "/node_pools/"+read().ID)
	old := w.oldLeader(t, p)
	status := late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureNodePool(ctx, acct, c.Ref, with(3, "old"))
		return err
	}, func() {
		if _, err := w.ad.EnsureNodePool(t.Context(), acct, c.Ref, with(2, "new")); err != nil {
			t.Fatal(err)
		}
	})
	if status != http.StatusAccepted && status != http.StatusOK {
		t.Errorf("the late update was answered %d", status)
	}
	if np := read(); np.Size.NodeCount != 3 || np.Labels["x"] != "old" {
		t.Errorf("after the late update: %d nodes, labels %v; want the late request's", np.Size.NodeCount, np.Labels)
	}
	if _, err := w.ad.EnsureNodePool(t.Context(), acct, c.Ref, with(2, "new")); err != nil {
		t.Fatal(err)
	}
	if np := read(); np.Size.NodeCount != 2 || np.Labels["x"] != "new" {
		t.Errorf("after the document's values again: %d nodes, labels %v", np.Size.NodeCount, np.Labels)
	}
}
