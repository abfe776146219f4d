package fake_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

const lagLabel = "fleet-agent.dev/pool"

func lagSpec(name string) providers.ClusterSpec {
	return providers.ClusterSpec{Name: name, Location: "fake-east", Labels: map[string]string{lagLabel: name}}
}

var lagPool = providers.NodePoolSpec{Shape: providers.Shape{MachineType: "fake-cpu-4"}, Size: providers.Size{NodeCount: 1}}

// TestListLag: with listLag 3s, a listing answers the account as it was 3s
// ago on the fake's clock, while reads by name are current. Each step runs
// at a time since the start, does something, then checks what the lists
// show and that reads by name show now.
func TestListLag(t *testing.T) {
	steps := []struct {
		at   time.Duration
		name string
		do   func(t *testing.T, f *fake.Fake)
		// listed: clusters ListClusters shows; pools: ListNodePools of
		// cluster b (nil: NotFound); current: GetCluster by name finds
		// these; gone: and not these.
		listed, pools    []string
		current, missing []string
	}{
		{at: 0, name: "create a and b, a pool p on b", do: func(t *testing.T, f *fake.Fake) {
			ensure(t, f, "a")
			ensure(t, f, "b")
			pool(t, f, "b", "p")
		}, listed: nil, pools: []string{}, current: []string{"a", "b"}},
		{at: 2999 * time.Millisecond, name: "just before the lag", pools: []string{}, current: []string{"a", "b"}},
		{at: 3 * time.Second, name: "the lag has passed", listed: []string{"a", "b"}, pools: []string{"p"}, current: []string{"a", "b"}},
		{at: 4 * time.Second, name: "delete a, pool q on b", do: func(t *testing.T, f *fake.Fake) {
			if _, err := f.DeleteCluster(t.Context(), acct, providers.ClusterRef{Location: "fake-east", Name: "a"}); err != nil {
				t.Fatal(err)
			}
			pool(t, f, "b", "q")
		}, listed: []string{"a", "b"}, pools: []string{"p"}, current: []string{"b"}, missing: []string{"a"}},
		{at: 6999 * time.Millisecond, name: "a still listed", listed: []string{"a", "b"}, pools: []string{"p"}, current: []string{"b"}, missing: []string{"a"}},
		{at: 7 * time.Second, name: "a no longer listed, q is", listed: []string{"b"}, pools: []string{"p", "q"}, current: []string{"b"}, missing: []string{"a"}},
		{at: 8 * time.Second, name: "delete b", do: func(t *testing.T, f *fake.Fake) {
			if _, err := f.DeleteCluster(t.Context(), acct, providers.ClusterRef{Location: "fake-east", Name: "b"}); err != nil {
				t.Fatal(err)
			}
		}, listed: []string{"b"}, pools: []string{"p", "q"}, missing: []string{"a", "b"}},
		{at: 11 * time.Second, name: "b gone from the lists", listed: nil, pools: nil, missing: []string{"a", "b"}},
	}
	clk := clock.NewFake(epoch)
	cfg := config(t)
	cfg.Steps = fake.Steps{} // every operation done within its call: only the lag is left
	cfg.ListLag = 3 * time.Second
	f := open(t, cfg, clk)
	ctx := t.Context()
	bRef := providers.ClusterRef{Location: "fake-east", Name: "b"}
	for _, s := range steps {
		clk.Advance(epoch.Add(s.at).Sub(clk.Now()))
		if s.do != nil {
			s.do(t, f)
		}
		l, err := f.ListClusters(ctx, acct, lagLabel)
		if err != nil {
			t.Fatalf("%s: ListClusters: %v", s.name, err)
		}
		var names []string
		for _, c := range l {
			names = append(names, c.Ref.Name)
		}
		if !slices.Equal(names, s.listed) {
			t.Errorf("%s (at %s): ListClusters shows %v, want %v", s.name, s.at, names, s.listed)
		}
		ps, err := f.ListNodePools(ctx, acct, bRef)
		switch {
		case s.pools == nil && providers.ClassOf(err) != providers.NotFound:
			t.Errorf("%s (at %s): ListNodePools of b: %v, %v; want NotFound", s.name, s.at, ps, err)
		case s.pools != nil && err != nil:
			t.Errorf("%s (at %s): ListNodePools of b: %v", s.name, s.at, err)
		case s.pools != nil:
			var got []string
			for _, p := range ps {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, s.pools) && !(len(got) == 0 && len(s.pools) == 0) {
				t.Errorf("%s (at %s): ListNodePools of b shows %v, want %v", s.name, s.at, got, s.pools)
			}
		}
		for _, n := range s.current {
			if _, err := f.GetCluster(ctx, acct, providers.ClusterRef{Location: "fake-east", Name: n}); err != nil {
				t.Errorf("%s (at %s): GetCluster %s: %v, want it current", s.name, s.at, n, err)
			}
		}
		for _, n := range s.missing {
			if _, err := f.GetCluster(ctx, acct, providers.ClusterRef{Location: "fake-east", Name: n}); providers.ClassOf(err) != providers.NotFound {
				t.Errorf("%s (at %s): GetCluster %s: %v, want NotFound now", s.name, s.at, n, err)
			}
		}
	}
	// Once the window is past, the history holds nothing of the clusters
	// gone and one entry of each one left (the seeded cluster).
	st := f.Snapshot()
	for id, h := range st.History {
		if st.Clusters[id] == nil || len(h) != 1 {
			t.Errorf("history after a and b went and the window passed keeps %d entries of %s (there now: %v)", len(h), id, st.Clusters[id] != nil)
		}
	}
	if len(st.History) != len(st.Clusters) {
		t.Errorf("history of %d clusters, want the %d there", len(st.History), len(st.Clusters))
	}
}

// TestListLagZero: without listLag a listing is current.
func TestListLagZero(t *testing.T) {
	cfg := config(t)
	cfg.Steps = fake.Steps{}
	f := open(t, cfg, clock.NewFake(epoch))
	ensure(t, f, "a")
	pool(t, f, "a", "p")
	l, err := f.ListClusters(t.Context(), acct, lagLabel)
	if err != nil || len(l) != 1 {
		t.Errorf("ListClusters: %v, %v; want a", l, err)
	}
	ps, err := f.ListNodePools(t.Context(), acct, providers.ClusterRef{Location: "fake-east", Name: "a"})
	if err != nil || len(ps) != 1 {
		t.Errorf("ListNodePools: %v, %v; want p", ps, err)
	}
	if h := f.Snapshot().History; h != nil {
		t.Errorf("a history is kept without listLag: %v", h)
	}
}

// TestListLagHistoryIsBounded: many changes of one cluster within the
// window keep at most a bounded history of it.
func TestListLagHistoryIsBounded(t *testing.T) {
	clk := clock.NewFake(epoch)
	cfg := config(t)
	cfg.Steps = fake.Steps{}
	cfg.ListLag = time.Minute
	f := open(t, cfg, clk)
	ensure(t, f, "a")
	pool(t, f, "a", "p")
	ref := providers.ClusterRef{Location: "fake-east", Name: "a"}
	for i := range 100 {
		clk.Advance(time.Second)
		if _, err := f.ResizeNodePool(t.Context(), acct, ref, "p", providers.Size{NodeCount: 1 + i%7}); err != nil {
			t.Fatal(err)
		}
	}
	var id string
	for k, c := range f.Snapshot().Clusters {
		if c.Name == "a" {
			id = k
		}
	}
	if n := len(f.Snapshot().History[id]); n < 2 || n > 16 {
		t.Errorf("history of a after 100 changes holds %d entries, want between 2 and 16", n)
	}
	clk.Advance(2 * time.Minute)
	if _, err := f.ListClusters(t.Context(), acct, lagLabel); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Snapshot().History[id]); n != 1 {
		t.Errorf("history of a once the window passed holds %d entries, want 1", n)
	}
}

func ensure(t *testing.T, f *fake.Fake, name string) {
	t.Helper()
	if _, err := f.EnsureCluster(t.Context(), acct, lagSpec(name)); err != nil {
		t.Fatalf("EnsureCluster %s: %v", name, err)
	}
}

func pool(t *testing.T, f *fake.Fake, cluster, name string) {
	t.Helper()
	spec := lagPool
	spec.Name = name
	if _, err := f.EnsureNodePool(t.Context(), acct, providers.ClusterRef{Location: "fake-east", Name: cluster}, spec); err != nil {
		t.Fatalf("EnsureNodePool %s/%s: %v", cluster, name, err)
	}
}

// TestListLagFromWhenItHappened: an operation the clock finishes (stepEvery)
// changes the lists from when its steps ran out, not from when a read
// first saw it done.
func TestListLagFromWhenItHappened(t *testing.T) {
	cases := []struct {
		// read is how long after the delete the first read happens; the
		// delete takes 10 steps, one a second of the clock and one per
		// read; the lists lag 3s.
		read   time.Duration
		listed bool
	}{
		{read: 8 * time.Second, listed: true},  // not done yet (8s and the read's own step)
		{read: 12 * time.Second, listed: true}, // done at 10s, seen at 12s: listed until 13s
		{read: 13 * time.Second, listed: false},
		{read: 60 * time.Second, listed: false}, // done long before it was seen
	}
	for _, tc := range cases {
		t.Run(tc.read.String(), func(t *testing.T) {
			clk := clock.NewFake(epoch)
			cfg := config(t)
			cfg.Steps = fake.Steps{Delete: 10}
			cfg.StepEvery = time.Second
			cfg.ListLag = 3 * time.Second
			f := open(t, cfg, clk)
			ensure(t, f, "a")
			ref := providers.ClusterRef{Location: "fake-east", Name: "a"}
			clk.Advance(time.Minute)
			if _, err := f.DeleteCluster(t.Context(), acct, ref); err != nil {
				t.Fatal(err)
			}
			clk.Advance(tc.read)
			_, err := f.GetCluster(t.Context(), acct, ref)
			if done := providers.ClassOf(err) == providers.NotFound; done != (tc.read >= 9*time.Second) {
				t.Fatalf("GetCluster %s after the delete: %v", tc.read, err)
			}
			l, err := f.ListClusters(t.Context(), acct, lagLabel)
			if err != nil {
				t.Fatal(err)
			}
			if listed := len(l) == 1; listed != tc.listed {
				t.Errorf("read %s after the delete: listed %v, want %v", tc.read, listed, tc.listed)
			}
		})
	}
}
