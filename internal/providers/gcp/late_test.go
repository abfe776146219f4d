package gcp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp"
	"github.com/fleet-agent/fleet-agent/internal/providers/gcp/gkeemu"
)

// These tests replay, through the adapter, the request a leader sends late:
// it was paused after its fence (providers.WithFence) passed and before the
// request left, and wakes once another agent took over and moved on
// (docs/ha.md, "The fence per term"). pause stands right after the fence in
// the old leader's transport and holds the request there; the new leader is
// the env's own adapter.

var errTermEnded = errors.New("the term ended")

// pause holds the first request that matches until the test lets it go,
// and keeps the status GKE answered it with.
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
	// emulator closes.
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

// oldLeader is a second adapter on the emulator, as another agent has one,
// whose requests go through p.
func (v *env) oldLeader(t *testing.T, p *pause) *gcp.Adapter {
	t.Helper()
	cfg := gcp.DefaultConfig()
	cfg.ContainerEndpoint, cfg.ComputeEndpoint = v.emu.ContainerEndpoint(), v.emu.ComputeEndpoint()
	cfg.OperationWait = gcp.OperationWait{Every: 0, Polls: 20}
	ad, err := gcp.New(cfg, v.secrets, gcp.WithClock(v.clk), gcp.WithHTTPClient(&http.Client{Transport: p}))
	if err != nil {
		t.Fatal(err)
	}
	return ad
}

// late runs call as the old leader. Once its request is held, the term
// ends (the fence refuses every request the call makes after it) and
// moveOn does what the new leader does; then the held request reaches GKE.
// It returns the status of the late request.
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

func syncEnv(t *testing.T) *env {
	return newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }})
}

// TestLateCreateRefused: a create the new leader already made is refused
// by name (409 ALREADY_EXISTS), and one cluster, one node pool stay.
func TestLateCreateRefused(t *testing.T) {
	v := syncEnv(t)
	spec := clusterSpec("fa-late")
	p := newPause(t, http.MethodPost, "/clusters")
	old := v.oldLeader(t, p)
	var c providers.Cluster
	status := late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureCluster(ctx, v.acct, spec)
		return err
	}, func() { c = v.ready(t, spec) })
	if status != http.StatusConflict {
		t.Errorf("the late cluster create was answered %d, want 409", status)
	}
	if n := v.emu.Count("container.projects.locations.clusters.create"); n != 2 {
		t.Errorf("%d cluster creates reached GKE, want the new leader's and the late one", n)
	}
	if all, err := v.ad.ListClusters(t.Context(), v.acct, providers.LabelSubstratePool); err != nil || len(all) != 1 {
		t.Errorf("clusters after the late create: %+v %v", all, err)
	}

	pool := cpuPool("fa-aaaaaa-cpu")
	p = newPause(t, http.MethodPost, "/nodePools")
	old = v.oldLeader(t, p)
	status = late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureNodePool(ctx, v.acct, c.Ref, pool)
		return err
	}, func() { v.readyPool(t, c.Ref, pool) })
	if status != http.StatusConflict {
		t.Errorf("the late node pool create was answered %d, want 409", status)
	}
	if n := v.emu.Count("container.projects.locations.clusters.nodePools.create"); n != 2 {
		t.Errorf("%d node pool creates reached GKE, want 2", n)
	}
	if pools, err := v.ad.ListNodePools(t.Context(), v.acct, c.Ref); err != nil || len(pools) != 2 { // ours and the system pool
		t.Errorf("node pools after the late create: %+v %v", pools, err)
	}
}

// TestLateLabelsRefused: labels set from a read the new leader's change
// made stale are refused, the node pool's by its etag (409 ABORTED), the
// cluster's by its label fingerprint; the new leader's labels stay.
func TestLateLabelsRefused(t *testing.T) {
	v := syncEnv(t)
	spec := clusterSpec("fa-late-labels")
	c := v.ready(t, spec)
	pool := cpuPool("fa-aaaaaa-cpu")
	v.readyPool(t, c.Ref, pool)
	with := func(x string) providers.NodePoolSpec {
		s := pool
		s.Labels = map[string]string{providers.LabelSubstratePool: poolID, "x": x}
		return s
	}

	p := newPause(t, http.MethodPut, "/nodePools/"+pool.Name)
	old := v.oldLeader(t, p)
	status := late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureNodePool(ctx, v.acct, c.Ref, with("old"))
		return err
	}, func() {
		if _, err := v.ad.EnsureNodePool(t.Context(), v.acct, c.Ref, with("new")); err != nil {
			t.Fatalf("the new leader's labels: %v", err)
		}
	})
	if status != http.StatusConflict {
		t.Errorf("the late node pool update was answered %d, want 409 (etag)", status)
	}
	if np, err := v.ad.GetNodePool(t.Context(), v.acct, c.Ref, pool.Name); err != nil || np.Labels["x"] != "new" {
		t.Errorf("node pool labels after the late update: %v %v", np.Labels, err)
	}

	labelled := func(x string) providers.ClusterSpec {
		s := spec
		s.Labels = map[string]string{providers.LabelSubstratePool: poolID, "x": x}
		return s
	}
	p = newPause(t, http.MethodPost, ":setResourceLabels")
	old = v.oldLeader(t, p)
	status = late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureCluster(ctx, v.acct, labelled("old"))
		return err
	}, func() {
		if _, err := v.ad.EnsureCluster(t.Context(), v.acct, labelled("new")); err != nil {
			t.Fatalf("the new leader's labels: %v", err)
		}
	})
	if status != http.StatusBadRequest {
		t.Errorf("the late setResourceLabels was answered %d, want 400 FAILED_PRECONDITION (fingerprint)", status)
	}
	if got, err := v.ad.GetCluster(t.Context(), v.acct, c.Ref); err != nil || got.Labels["x"] != "new" {
		t.Errorf("cluster labels after the late update: %v %v", got.Labels, err)
	}
}

// TestLateUpgradeRefused: an upgrade to a version the new leader already
// went past is a downgrade by the time it lands, and GKE refuses it.
func TestLateUpgradeRefused(t *testing.T) {
	v := syncEnv(t)
	spec := clusterSpec("fa-late-up")
	spec.Version = "1.33"
	c := v.ready(t, spec)
	to := func(version string) providers.ClusterSpec {
		s := spec
		s.Version = version
		return s
	}
	p := newPause(t, http.MethodPut, "/clusters/"+spec.Name)
	old := v.oldLeader(t, p)
	status := late(t, p, func(ctx context.Context) error {
		_, err := old.EnsureCluster(ctx, v.acct, to("1.34"))
		return err
	}, func() {
		// GKE goes one minor per upgrade: two hops.
		v.ready(t, to("1.35"))
		v.ready(t, to("1.35"))
	})
	if status != http.StatusBadRequest {
		t.Errorf("the late upgrade was answered %d, want 400 (no downgrade)", status)
	}
	got, err := v.ad.GetCluster(t.Context(), v.acct, c.Ref)
	if err != nil || !strings.HasPrefix(got.Outputs.Version, "1.35.") {
		t.Errorf("the cluster after the late upgrade: %q %v", got.Outputs.Version, err)
	}
}

// TestLateResizeLands: a resize carries no precondition, so a late one
// undoes the new leader's (the window); the next call with the document's
// size sets it again.
func TestLateResizeLands(t *testing.T) {
	v := syncEnv(t)
	c := v.ready(t, clusterSpec("fa-late-size"))
	pool := cpuPool("fa-aaaaaa-cpu")
	v.readyPool(t, c.Ref, pool)
	size := func() int {
		t.Helper()
		v.emu.Advance()
		np, err := v.ad.GetNodePool(t.Context(), v.acct, c.Ref, pool.Name)
		if err != nil {
			t.Fatal(err)
		}
		return np.NodeCount
	}
	p := newPause(t, http.MethodPost, ":setSize")
	old := v.oldLeader(t, p)
	status := late(t, p, func(ctx context.Context) error {
		_, err := old.ResizeNodePool(ctx, v.acct, c.Ref, pool.Name, providers.Size{NodeCount: 3})
		return err
	}, func() {
		if _, err := v.ad.ResizeNodePool(t.Context(), v.acct, c.Ref, pool.Name, providers.Size{NodeCount: 2}); err != nil {
			t.Fatal(err)
		}
		if n := size(); n != 2 {
			t.Fatalf("the new leader's resize: %d nodes", n)
		}
	})
	if status != http.StatusOK {
		t.Errorf("the late setSize was answered %d, want 200", status)
	}
	if n := size(); n != 3 {
		t.Errorf("after the late setSize: %d nodes, want the late request's 3", n)
	}
	if _, err := v.ad.ResizeNodePool(t.Context(), v.acct, c.Ref, pool.Name, providers.Size{NodeCount: 2}); err != nil {
		t.Fatal(err)
	}
	if n := size(); n != 2 {
		t.Errorf("after the document's size again: %d nodes", n)
	}
}

// TestRevokeWritesNothingAtGKE: RevokeAccess sends GKE one read, whether
// there is anything to revoke or not, so a late one changes nothing there;
// what it removes inside the cluster goes through the cluster's own API.
func TestRevokeWritesNothingAtGKE(t *testing.T) {
	r := &revoker{}
	v := newEnv(t, envOpts{emu: func(o *gkeemu.Options) { o.Steps = gkeemu.Synchronous }, options: []gcp.Option{gcp.WithInClusterRevoker(r)}})
	c := v.ready(t, clusterSpec("fa-late-revoke"))
	for i := range 2 {
		before := v.emu.Mark()
		if err := v.ad.RevokeAccess(t.Context(), v.acct, c.Ref); err != nil {
			t.Fatalf("revoke %d: %v", i+1, err)
		}
		if all, gets := v.emu.CountSince(before, ""), v.emu.CountSince(before, "container.projects.locations.clusters.get"); all != 1 || gets != 1 {
			t.Errorf("revoke %d sent %d requests to GKE, %d of them clusters.get; want the one read", i+1, all, gets)
		}
	}
	if len(r.creds) != 2 {
		t.Errorf("the in-cluster part ran %d times, want 2", len(r.creds))
	}
}
