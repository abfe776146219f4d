package aws_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	awsadapter "github.com/fleet-agent/fleet-agent/internal/providers/aws"
	"github.com/fleet-agent/fleet-agent/internal/providers/aws/eksemu"
)

// These tests replay, through the adapter, the request a leader sends late:
// it was paused after its fence (providers.WithFence) passed and before the
// request left, and wakes once another agent took over and moved on
// (docs/ha.md, "The fence per term"). pause stands right after the fence in
// the old leader's transport and holds the request there; the new leader is
// the harness's own adapter.

var errTermEnded = errors.New("the term ended")

// pause holds the first request that matches until the test lets it go,
// and keeps the status EKS answered it with.
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

// oldLeader is another adapter on the emulator, as another agent has one,
// whose requests go through p.
func (h *harness) oldLeader(p *pause) *awsadapter.Adapter {
	return h.open(awsadapter.WithHTTPClient(&http.Client{Transport: p}))
}

// late runs call as the old leader. Once its request is held, the term
// ends (the fence refuses every request the call makes after it) and
// moveOn does what the new leader does; then the held request reaches EKS.
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

func instant(t *testing.T, block string) *harness {
	return newHarness(t, harnessOpts{emu: eksemu.Options{Steps: &eksemu.Steps{}}, block: block})
}

// TestLateCreate: a late create meets what the new leader made. Made by
// the same journal step (the same client request token and body), EKS
// answers with that object; made under another token, the name is taken
// (ResourceInUseException). Either way one object stays.
func TestLateCreate(t *testing.T) {
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"the same step", "", http.StatusOK},
		{"another step", ":reopened", http.StatusConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := instant(t, "")
			mine := h.spec("c1")
			theirs := mine
			theirs.ClientToken += c.token
			p := newPause(t, http.MethodPost, "/clusters")
			old := h.oldLeader(p)
			status := late(t, p, func(ctx context.Context) error {
				_, err := old.EnsureCluster(ctx, h.acct, mine)
				return err
			}, func() {
				if _, err := h.adapter.EnsureCluster(t.Context(), h.acct, theirs); err != nil {
					t.Fatalf("the new leader's create: %v", err)
				}
			})
			if status != c.status {
				t.Errorf("the late CreateCluster was answered %d, want %d", status, c.status)
			}
			if n, names := h.emu.Count("CreateCluster"), h.emu.ClusterNames(); n != 2 || len(names) != 1 {
				t.Errorf("%d CreateCluster requests reached EKS, want 2; clusters %v", n, names)
			}

			cl := h.running("c1")
			pool := h.pool("fa-abcdef-cpu", "m5.large", 1)
			theirPool := pool
			theirPool.ClientToken += c.token
			p = newPause(t, http.MethodPost, "/node-groups")
			old = h.oldLeader(p)
			status = late(t, p, func(ctx context.Context) error {
				_, err := old.EnsureNodePool(ctx, h.acct, cl.Ref, pool)
				return err
			}, func() {
				if _, err := h.adapter.EnsureNodePool(t.Context(), h.acct, cl.Ref, theirPool); err != nil {
					t.Fatalf("the new leader's create: %v", err)
				}
			})
			if status != c.status {
				t.Errorf("the late CreateNodegroup was answered %d, want %d", status, c.status)
			}
			if n, names := h.emu.Count("CreateNodegroup"), h.emu.NodegroupNames("c1"); n != 2 || len(names) != 1 {
				t.Errorf("%d CreateNodegroup requests reached EKS, want 2; node groups %v", n, names)
			}
		})
	}
}

// TestLateUpgrade: a late UpdateClusterVersion of the step the new leader
// made too carries the same token and gets that update back, starting none;
// one of a step the new leader went past (another token) is no longer the
// next minor and EKS refuses it.
func TestLateUpgrade(t *testing.T) {
	for _, c := range []struct {
		name, token, to string
		status          int
	}{
		{"the same step", "", "1.34", http.StatusOK},
		{"a step gone past", ":reopened", "1.35", http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := instant(t, "")
			at := func(v, token string) providers.ClusterSpec {
				s := h.spec("c1")
				s.Version, s.ClientToken = v, s.ClientToken+token
				return s
			}
			if _, err := h.adapter.EnsureCluster(t.Context(), h.acct, at("1.33", "")); err != nil {
				t.Fatal(err)
			}
			h.running("c1")
			p := newPause(t, http.MethodPost, "/updates")
			old := h.oldLeader(p)
			status := late(t, p, func(ctx context.Context) error {
				_, err := old.EnsureCluster(ctx, h.acct, at("1.34", ""))
				return err
			}, func() {
				// EKS goes up one minor per update: the journal calls again
				// until the version is reached.
				for range 2 {
					if _, err := h.adapter.EnsureCluster(t.Context(), h.acct, at(c.to, c.token)); err != nil {
						t.Fatalf("the new leader's upgrade: %v", err)
					}
					h.emu.Advance()
				}
			})
			if status != c.status {
				t.Errorf("the late UpdateClusterVersion was answered %d, want %d", status, c.status)
			}
			if got, _ := h.emu.Cluster("c1"); got.Version != c.to || got.Status != "ACTIVE" {
				t.Errorf("after the late upgrade: %s %s, want %s ACTIVE", got.Version, got.Status, c.to)
			}
			if n := h.emu.Count("UpdateClusterVersion"); n != 3 && c.to == "1.35" || n != 2 && c.to == "1.34" {
				t.Errorf("%d UpdateClusterVersion requests reached EKS", n)
			}
		})
	}
}

// TestLateNodegroupConfig: a late UpdateNodegroupConfig of the step the
// new leader made too (the same node group state, the same change) carries
// its token and is answered with that update; one made from a state the
// new leader changed since carries another token and lands (the window):
// the late size, or labels, stay until a call with the document's sets them
// again.
func TestLateNodegroupConfig(t *testing.T) {
	h := instant(t, "")
	cl := h.running("c1")
	pool := h.pool("fa-abcdef-cpu", "m5.large", 1)
	if _, err := h.adapter.EnsureNodePool(t.Context(), h.acct, cl.Ref, pool); err != nil {
		t.Fatal(err)
	}
	ng := func() eksemu.NodegroupState {
		t.Helper()
		g, ok := h.emu.Nodegroup("c1", pool.Name)
		if !ok {
			t.Fatal("the node group is gone")
		}
		return g
	}
	resize := func(a *awsadapter.Adapter, ctx context.Context, n int) error {
		_, err := a.ResizeNodePool(ctx, h.acct, cl.Ref, pool.Name, providers.Size{NodeCount: n})
		return err
	}
	// EKS stamps a node group's modifiedAt when a change ends, and the
	// adapter's token names it: time passes after each change, as at EKS.
	tick := func() { h.clk.Advance(time.Second) }
	// Sizes are nodes per zone; the account has two zones.
	const config = "/update-config"

	t.Run("the same step", func(t *testing.T) {
		before := h.emu.Count("UpdateNodegroupConfig")
		p := newPause(t, http.MethodPost, config)
		old := h.oldLeader(p)
		status := late(t, p, func(ctx context.Context) error { return resize(old, ctx, 2) }, func() {
			if err := resize(h.adapter, t.Context(), 2); err != nil {
				t.Fatal(err)
			}
			tick()
			// The document moves on once more: the replay must not undo it.
			if err := resize(h.adapter, t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			tick()
		})
		if status != http.StatusOK || ng().Size != 2 {
			t.Errorf("the late replay: %d, %d nodes, want the new leader's last 2", status, ng().Size)
		}
		if n := h.emu.Count("UpdateNodegroupConfig") - before; n != 3 {
			t.Errorf("%d UpdateNodegroupConfig requests, want the new leader's two and the late one", n)
		}
	})
	t.Run("a stale resize lands", func(t *testing.T) {
		p := newPause(t, http.MethodPost, config)
		old := h.oldLeader(p)
		status := late(t, p, func(ctx context.Context) error { return resize(old, ctx, 3) }, func() {
			if err := resize(h.adapter, t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			tick()
		})
		if status != http.StatusOK || ng().Size != 6 {
			t.Errorf("the late resize: %d, %d nodes, want the late request's 6", status, ng().Size)
		}
		if err := resize(h.adapter, t.Context(), 1); err != nil || ng().Size != 2 {
			t.Errorf("the document's size again: %v, %d nodes", err, ng().Size)
		}
	})
	t.Run("stale labels land", func(t *testing.T) {
		with := func(x string) providers.NodePoolSpec {
			s := pool
			s.Labels = map[string]string{providers.LabelSubstratePool: "pool_abcdef", "x": x}
			return s
		}
		p := newPause(t, http.MethodPost, config)
		old := h.oldLeader(p)
		status := late(t, p, func(ctx context.Context) error {
			_, err := old.EnsureNodePool(ctx, h.acct, cl.Ref, with("old"))
			return err
		}, func() {
			if _, err := h.adapter.EnsureNodePool(t.Context(), h.acct, cl.Ref, with("new")); err != nil {
				t.Fatal(err)
			}
			tick()
		})
		if status != http.StatusOK || ng().Labels["x"] != "old" {
			t.Errorf("the late labels: %d, %v", status, ng().Labels)
		}
		if _, err := h.adapter.EnsureNodePool(t.Context(), h.acct, cl.Ref, with("new")); err != nil || ng().Labels["x"] != "new" {
			t.Errorf("the document's labels again: %v, %v", err, ng().Labels)
		}
	})
}

// TestLateAccessGrant: with grantAccessOnAdopt, Credentials writes (an
// access entry, then the admin policy on it), so a late one is not a mere
// read. After the new leader released the cluster (RevokeAccess), a late
// AssociateAccessPolicy finds no entry and is refused; a late
// CreateAccessEntry makes one that nothing removes (the window), with no
// policy, since the association after it is refused by the fence.
func TestLateAccessGrant(t *testing.T) {
	for _, c := range []struct {
		name, suffix string
		status       int
		left         bool
	}{
		{"the entry", "/access-entries", http.StatusOK, true},
		{"its policy", "/access-policies", http.StatusNotFound, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{block: "grantAccessOnAdopt: true\n"})
			if _, err := h.emu.Seed(eksemu.SeedCluster{Name: "theirs", AccessEntries: []eksemu.SeedAccessEntry{{PrincipalArn: teamRoleArn, Policies: []string{eksemu.ClusterAdminPolicy}}}}); err != nil {
				t.Fatal(err)
			}
			cl, err := h.adapter.ReadAdoptable(t.Context(), h.acct, "us-east-1/theirs")
			if err != nil {
				t.Fatal(err)
			}
			p := newPause(t, http.MethodPost, c.suffix)
			old := h.oldLeader(p)
			status := late(t, p, func(ctx context.Context) error {
				_, err := old.Credentials(ctx, h.acct, cl.Ref)
				return err
			}, func() {
				if err := h.adapter.RevokeAccess(t.Context(), h.acct, cl.Ref); err != nil {
					t.Fatalf("the new leader's release: %v", err)
				}
			})
			if status != c.status {
				t.Errorf("the late request was answered %d, want %d", status, c.status)
			}
			if got := h.emu.HasAccessEntry("theirs", userArn); got != c.left {
				t.Errorf("an access entry of ours after the release: %v, want %v", got, c.left)
			}
			if c.left && h.emu.Count("AssociateAccessPolicy") != 0 {
				t.Error("the entry left behind got the admin policy")
			}
		})
	}
}
