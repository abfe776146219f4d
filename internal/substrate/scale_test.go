package substrate_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
)

// throttled is a provider account's rate limit, as the clouds have one: a
// bucket of perSecond calls per account on the injected clock; a call past
// it is refused Throttled with a Retry-After, having done nothing. It
// counts every call it is asked, refused or not.
type throttled struct {
	substrate.Provider
	clk       clock.Clock
	perSecond int

	mu     sync.Mutex
	second map[string]int64
	used   map[string]int
	calls  int
	denied int
	// byMethod counts the calls per method.
	byMethod map[string]int
}

func (t *throttled) allow(op string, acct providers.Account) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	if t.byMethod == nil {
		t.byMethod = map[string]int{}
	}
	t.byMethod[op]++
	now := t.clk.Now().Unix()
	if t.second[acct.Name] != now {
		t.second[acct.Name], t.used[acct.Name] = now, 0
	}
	if t.used[acct.Name] >= t.perSecond {
		t.denied++
		return &providers.Error{Op: op, Class: providers.Throttled, SideEffect: providers.None, RetryAfter: time.Second, Message: "rate exceeded"}
	}
	t.used[acct.Name]++
	return nil
}

func (t *throttled) count() (calls, denied int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls, t.denied
}

// methods returns the calls per method so far.
func (t *throttled) methods() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.byMethod)
}

// since says the calls per method made since before (a methods answer).
func since(before, after map[string]int) string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(after)) {
		if n := after[m] - before[m]; n > 0 {
			out = append(out, fmt.Sprintf("%s=%d", m, n))
		}
	}
	return strings.Join(out, " ")
}

func (t *throttled) EnsureCluster(ctx context.Context, a providers.Account, s providers.ClusterSpec) (providers.Cluster, error) {
	if err := t.allow("EnsureCluster", a); err != nil {
		return providers.Cluster{}, err
	}
	return t.Provider.EnsureCluster(ctx, a, s)
}

func (t *throttled) GetCluster(ctx context.Context, a providers.Account, r providers.ClusterRef) (providers.Cluster, error) {
	if err := t.allow("GetCluster", a); err != nil {
		return providers.Cluster{}, err
	}
	return t.Provider.GetCluster(ctx, a, r)
}

func (t *throttled) ListClusters(ctx context.Context, a providers.Account, key string) ([]providers.Cluster, error) {
	if err := t.allow("ListClusters", a); err != nil {
		return nil, err
	}
	return t.Provider.ListClusters(ctx, a, key)
}

func (t *throttled) EnsureNodePool(ctx context.Context, a providers.Account, c providers.ClusterRef, s providers.NodePoolSpec) (providers.NodePool, error) {
	if err := t.allow("EnsureNodePool", a); err != nil {
		return providers.NodePool{}, err
	}
	return t.Provider.EnsureNodePool(ctx, a, c, s)
}

func (t *throttled) GetNodePool(ctx context.Context, a providers.Account, c providers.ClusterRef, name string) (providers.NodePool, error) {
	if err := t.allow("GetNodePool", a); err != nil {
		return providers.NodePool{}, err
	}
	return t.Provider.GetNodePool(ctx, a, c, name)
}

func (t *throttled) ListNodePools(ctx context.Context, a providers.Account, c providers.ClusterRef) ([]providers.NodePool, error) {
	if err := t.allow("ListNodePools", a); err != nil {
		return nil, err
	}
	return t.Provider.ListNodePools(ctx, a, c)
}

// scaleDocument is n pools across three accounts of one fake provider (one
// project each), two flavors per pool.
func scaleDocument(n int) string {
	var b strings.Builder
	b.WriteString(`{"version":1,"sites":[{"name":"k8s","kind":"shared","region":"fake-east"}],"providerAccounts":[`)
	for i, a := range []string{"acct-a", "acct-b", "acct-c"} {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":%q,"provider":"fake","config":{"token":"secret://fake-token","project":%q}}`, a, a)
	}
	b.WriteString(`],"pools":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":"p-%04d","site":"k8s","class":"metal-host","gpuModel":"H100","policy":{"substrate":{"kind":"kubernetes","account":"acct-%c","cluster":{"create":{"location":"fake-east"}},"flavors":[{"name":"h100","machineType":"fake-h100x8","nodes":1},{"name":"cpu","machineType":"fake-cpu-4","nodes":1,"autoscaling":{"minNodes":1,"maxNodes":3}}]}}}`,
			i, 'a'+i%3)
	}
	b.WriteString("]}")
	return b.String()
}

// BenchmarkScale1000: 1,000 substrates across three accounts of the fake,
// each account throttled to 100 calls a second, merged at once: the time
// on the injected clock until every one converged, the provider calls per
// substrate to get there (throttled ones included), and at rest the calls
// per converged substrate per hour (passes every minute, a sweep every 10),
// in the first hour after converging and in the second, with the calls per
// method logged.
// The floor, measured in the same run, is the 2 calls per node pool and 4
// per cluster a create needs at the least (create, read back; list, read),
// so calls/floor says how much the journal's reads cost on top.
func BenchmarkScale1000(b *testing.B) {
	const pools = 1000
	for b.Loop() {
		var thr *throttled
		e := newEnv(b, func(o *substrate.Options) {
			thr = &throttled{Provider: o.Providers["fake"], clk: o.Clock, perSecond: 100, second: map[string]int64{}, used: map[string]int{}}
			o.Providers["fake"] = thr
			o.Concurrency = 64
		})
		e.crash()
		e.fakeCfg.StatePath = "" // the provider's truth in memory: 3,000 objects on disk measure the disk
		e.fakeCfg.Steps = fake.Steps{Cluster: 2, NodePool: 1}
		e.start()
		e.apply(scaleDocument(pools), false)
		start := e.clock.Now()
		passes := 0
		for !e.converged() {
			if passes == 2000 {
				b.Fatalf("not converged after %d passes:\n%s", passes, e.describe()[:2000])
			}
			if err := e.rec.ReconcileOnce(b.Context()); err != nil {
				b.Fatal(err)
			}
			passes++
			e.clock.Advance(time.Second)
		}
		took := e.clock.Now().Sub(start)
		calls, denied := thr.count()
		for _, r := range e.records() {
			if r.Seen.State != state.SubstrateCreating { // no node daemon configured: creating is converged
				b.Fatalf("%s is %s: %s", r.Want.Pool, r.Seen.State, r.Seen.Message)
			}
		}
		// At rest for two hours of the clock. The first sweep after the
		// start lists each substrate's node pools once (nothing is known
		// of them yet); from then on only what changed is listed.
		rest := make([]int, 2)
		for h := range rest {
			calls0, _ := thr.count()
			by0 := thr.methods()
			for m := 1; m <= 60; m++ {
				e.clock.Advance(time.Minute)
				if m%10 == 0 {
					if _, err := e.rec.Sweep(b.Context()); err != nil {
						b.Fatal(err)
					}
				}
				if err := e.rec.ReconcileOnce(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			calls1, _ := thr.count()
			rest[h] = calls1 - calls0
			b.Logf("at rest, hour %d: %d calls (%s)", h+1, rest[h], since(by0, thr.methods()))
		}
		floor := float64(pools * (4 + 2*2))
		b.ReportMetric(took.Seconds(), "clock-s-to-converge")
		b.ReportMetric(float64(passes), "passes")
		b.ReportMetric(float64(calls)/pools, "calls/substrate")
		b.ReportMetric(float64(denied)/pools, "throttled/substrate")
		b.ReportMetric(float64(calls)/floor, "calls/floor")
		b.ReportMetric(float64(rest[0])/pools, "rest-calls/substrate/h")
		b.ReportMetric(float64(rest[0]), "rest-calls/h")
		b.ReportMetric(float64(rest[1])/pools, "rest-calls/substrate/h2")
		b.ReportMetric(float64(rest[1]), "rest-calls/h2")
	}
}
