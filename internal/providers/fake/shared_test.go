package fake_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
)

// The environment of a child process of TestSharedAccountProcesses.
const (
	childEnv      = "FAKE_CHILD"
	childState    = "FAKE_CHILD_STATE"
	childPrefix   = "FAKE_CHILD_PREFIX"
	childClusters = "FAKE_CHILD_CLUSTERS"
)

// sharedAccountChild is the body of a child process: open the shared
// account and make FAKE_CHILD_CLUSTERS clusters named <prefix>-<i>.
func sharedAccountChild() int {
	n, err := strconv.Atoi(os.Getenv(childClusters))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: bad", childClusters, err)
		return 2
	}
	cfg := fake.DefaultConfig()
	cfg.StatePath = os.Getenv(childState)
	f, err := fake.New(cfg, nil, fake.WithClock(clock.NewFake(epoch)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: fake.New:", err)
		return 1
	}
	a := account("shared", "team-a", "")
	for i := range n {
		name := fmt.Sprintf("%s-%d", os.Getenv(childPrefix), i)
		if _, err := f.EnsureCluster(context.Background(), a, providers.ClusterSpec{Name: name, Location: "fake-east"}); err != nil {
			fmt.Fprintln(os.Stderr, "child: EnsureCluster", name+":", err)
			return 1
		}
	}
	return 0
}

// clusterNames lists the names in a state, sorted, and fails when two
// clusters share an id field or a record is filed under another id.
func clusterNames(t *testing.T, st fake.State) []string {
	t.Helper()
	var names []string
	ids := map[string]bool{}
	for key, c := range st.Clusters {
		if c.ID != key || ids[c.ID] {
			t.Errorf("cluster %s filed as %s (or its id repeats)", c.ID, key)
		}
		ids[c.ID] = true
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

func wantNames(prefixes []string, n int) []string {
	var out []string
	for _, p := range prefixes {
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%d", p, i))
		}
	}
	slices.Sort(out)
	return out
}

// TestSharedAccountInProcess: two Fake values on one state file are two
// agents in one account: each sees what the other made, by name and by
// listing, and concurrent creates from both lose nothing.
func TestSharedAccountInProcess(t *testing.T) {
	ctx := t.Context()
	cfg := config(t)
	clk := clock.NewFake(epoch)
	a, b := open(t, cfg, clk), open(t, cfg, clk)
	label := map[string]string{"fleet-agent.dev/pool": "p"}

	ca, err := a.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: "from-a", Location: "fake-east", Labels: label})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: "from-b", Location: "fake-east", Labels: label})
	if err != nil {
		t.Fatal(err)
	}
	if ca.Ref.ID == cb.Ref.ID {
		t.Fatalf("both agents' clusters got id %s", ca.Ref.ID)
	}
	for _, tc := range []struct {
		name string
		f    *fake.Fake
		ref  providers.ClusterRef
	}{
		{"a reads b's", a, providers.ClusterRef{Location: "fake-east", Name: "from-b"}},
		{"b reads a's", b, providers.ClusterRef{Location: "fake-east", Name: "from-a"}},
		{"a reads b's by id", a, cb.Ref},
		{"b reads a's by id", b, ca.Ref},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.f.GetCluster(ctx, acct, tc.ref); err != nil {
				t.Errorf("GetCluster %s: %v", tc.ref, err)
			}
		})
	}
	for name, f := range map[string]*fake.Fake{"a": a, "b": b} {
		l, err := f.ListClusters(ctx, acct, "fleet-agent.dev/pool")
		if err != nil || len(l) != 2 {
			t.Errorf("%s lists %d clusters (%v), want both", name, len(l), err)
		}
	}
	// A delete by one is seen by the other.
	if _, err := b.DeleteCluster(ctx, acct, ca.Ref); err != nil {
		t.Fatal(err)
	}
	if got, err := a.GetCluster(ctx, acct, ca.Ref); err == nil && got.Status != providers.ClusterDeleting {
		t.Errorf("a does not see b's delete of its cluster: %s", got.Status)
	}

	// Concurrent creates through both values.
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for prefix, f := range map[string]*fake.Fake{"ca": a, "cb": b} {
		wg.Go(func() {
			for i := range n {
				if _, err := f.EnsureCluster(ctx, acct, providers.ClusterSpec{Name: fmt.Sprintf("%s-%d", prefix, i), Location: "fake-east"}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var made []string
	for _, name := range clusterNames(t, a.Snapshot()) {
		if name != "theirs" && name != "from-a" && name != "from-b" {
			made = append(made, name)
		}
	}
	if want := wantNames([]string{"ca", "cb"}, n); !slices.Equal(made, want) {
		t.Errorf("after concurrent creates the account holds %d clusters %v, want the %d made", len(made), made, len(want))
	}
}

// TestSharedAccountProcesses: two processes (this test binary run again)
// each make 40 clusters on one state file at once; all 80 are there, with
// distinct ids.
func TestSharedAccountProcesses(t *testing.T) {
	const n = 40
	path := filepath.Join(t.TempDir(), "account.json")
	prefixes := []string{"p", "q"}
	cmds := make([]*exec.Cmd, len(prefixes))
	outs := make([]*lockedBuffer, len(prefixes))
	for i, prefix := range prefixes {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", childState+"="+path, childPrefix+"="+prefix, childClusters+"="+strconv.Itoa(n))
		outs[i] = &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %s: %v\n%s", prefixes[i], err, outs[i].String())
		}
	}
	cfg := fake.DefaultConfig()
	cfg.StatePath = path
	f := open(t, cfg, clock.NewFake(epoch))
	st := f.Snapshot()
	if got, want := clusterNames(t, st), wantNames(prefixes, n); !slices.Equal(got, want) {
		t.Errorf("the account holds %d clusters, want %d: %v", len(got), len(want), got)
	}
	if st.Seq != 2*n {
		t.Errorf("sequence %d, want %d: a write was lost and its number taken again", st.Seq, 2*n)
	}
}

// lockedBuffer collects a child's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// BenchmarkSharedAccount: the cost of one read (GetCluster) with the state
// in memory (the floor), in a file one agent uses (the lock, no reload),
// and in a file two agents use in turn (the lock and a reload each call),
// with 50 clusters in the account. It reports each against the floor
// measured in the same run as x-memory.
func BenchmarkSharedAccount(b *testing.B) {
	ctx := context.Background()
	setup := func(b *testing.B, path string, n int) []*fake.Fake {
		cfg := fake.DefaultConfig()
		cfg.StatePath = path
		cfg.Steps = fake.Steps{}
		var fs []*fake.Fake
		for range n {
			f, err := fake.New(cfg, nil, fake.WithClock(clock.NewFake(epoch)))
			if err != nil {
				b.Fatal(err)
			}
			fs = append(fs, f)
		}
		a := account("bench", "team-a", "")
		for i := range 50 {
			if _, err := fs[0].EnsureCluster(ctx, a, providers.ClusterSpec{Name: fmt.Sprintf("c-%d", i), Location: "fake-east"}); err != nil {
				b.Fatal(err)
			}
		}
		return fs
	}
	read := func(b *testing.B, fs []*fake.Fake) time.Duration {
		a := account("bench", "team-a", "")
		ref := providers.ClusterRef{Location: "fake-east", Name: "c-7"}
		start := time.Now()
		for i := range b.N {
			if _, err := fs[i%len(fs)].GetCluster(ctx, a, ref); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	floor := read(b, setup(b, "", 1))
	for _, tc := range []struct {
		name   string
		agents int
	}{{"oneAgent", 1}, {"twoAgents", 2}} {
		took := read(b, setup(b, filepath.Join(b.TempDir(), tc.name+".json"), tc.agents))
		b.ReportMetric(float64(took)/float64(floor), tc.name+"-x-memory")
	}
	b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N), "memory-ns/read")
}
