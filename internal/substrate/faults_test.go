package substrate_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// faultScenario is where each provider method is called: the steps before
// the fault (converged first) and the step the fault hits.
func faultScenario(method string) (setup []crashtest.Step, hit crashtest.Step) {
	byName := map[string]crashtest.Scenario{}
	for _, s := range crashtest.Scenarios() {
		byName[s.Name] = s
	}
	pick := func(name string) ([]crashtest.Step, crashtest.Step) {
		s := byName[name]
		return append(s.Setup, s.Steps[:len(s.Steps)-1]...), s.Steps[len(s.Steps)-1]
	}
	switch method {
	case "ResizeNodePool":
		return pick("resize")
	case "DeleteNodePool":
		return pick("removeFlavor")
	case "DeleteCluster":
		return pick("teardown")
	case "ReadAdoptable":
		s := byName["adopt"]
		return nil, s.Steps[0]
	}
	s := byName["create"]
	return nil, s.Steps[0]
}

// mutating are the methods whose Invalid refusal (with no side effect) is
// for good: the request can never succeed as written.
var mutating = map[string]bool{"EnsureCluster": true, "EnsureNodePool": true, "ResizeNodePool": true}

// TestEveryFaultAtEveryStep injects each fault class of the fake, with each
// side effect, and a dropped answer, into each provider method the
// reconciler calls: the substrate converges to the document, or (a request
// refused for good) stays in error with a message a person can act on. The
// fault must have fired.
func TestEveryFaultAtEveryStep(t *testing.T) {
	methods := []string{"EnsureCluster", "GetCluster", "ListNodePools", "EnsureNodePool", "GetNodePool", "ResizeNodePool", "DeleteNodePool", "DeleteCluster", "ReadAdoptable"}
	classes := []providers.Class{providers.Invalid, providers.NotFound, providers.Conflict, providers.Throttled, providers.Unavailable, providers.Terminal, providers.Unknown}
	sides := []providers.SideEffect{providers.None, providers.Maybe, providers.Done}
	type tc struct {
		name  string
		fault fake.Fault
	}
	var cases []tc
	for _, m := range methods {
		for _, c := range classes {
			for _, s := range sides {
				cases = append(cases, tc{fmt.Sprintf("%s/%s/%s", m, c, s), fake.Fault{Method: m, Count: 1, Class: c, SideEffect: s, RetryAfter: 90 * time.Second}})
			}
		}
		cases = append(cases, tc{m + "/dropped", fake.Fault{Method: m, Count: 1, Drop: true}})
	}
	inParallel(t, len(cases), func(i int) {
		c := cases[i]
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil)
			setup, hit := faultScenario(c.fault.Method)
			for _, s := range setup {
				e.applyStep(s)
				e.converge(10*time.Second, 40)
			}
			if err := e.fake.InjectFault(c.fault); err != nil {
				t.Fatal(err)
			}
			e.applyStep(hit)
			forGood := mutating[c.fault.Method] && c.fault.Class == providers.Invalid && c.fault.SideEffect == providers.None
			for i := 0; i < 80 && !e.converged(); i++ {
				if err := e.rec.ReconcileOnce(t.Context()); err != nil {
					t.Fatal(err)
				}
				e.clock.Advance(time.Minute)
			}
			if !e.converged() {
				t.Fatalf("not converged:\n%s", e.describe())
			}
			if left := e.fake.Snapshot().Faults; len(left) != 0 {
				t.Fatalf("the fault never fired: %+v", left)
			}
			if !forGood {
				e.check(hit)
				return
			}
			for _, r := range e.records() {
				if r.Seen.State == "error" {
					if !strings.Contains(r.Seen.Message, "the provider refused: "+c.fault.Method+": injected invalid") ||
						!strings.Contains(r.Seen.Message, "change the substrate in the document") {
						t.Fatalf("message: %s", r.Seen.Message)
					}
					return
				}
			}
			t.Fatalf("a refusal for good left no substrate in error:\n%s", e.describe())
		})
	})
}

// TestUnknownCreateNeverWedges: a create whose outcome stays unknown (the
// answer dropped, then the provider unreachable for a while) is read back
// until the provider answers, with the reason in the message, and then
// converges without a second cluster.
func TestUnknownCreateNeverWedges(t *testing.T) {
	var armed sync.Once
	var e *env
	e = newEnv(t, func(o *substrate.Options) {
		substrate.SetCrashAt(o, func(p substrate.Point) bool {
			// The provider goes away once the create's answer is lost, so
			// the read-backs fail (the read made before the create, to see
			// whether its name is taken, is not what this test is about).
			if p.Kind == substrate.PointAfterCall && p.Step == "createCluster" {
				armed.Do(func() {
					if err := e.fake.FailNext("GetCluster", 6, providers.Unavailable, providers.None); err != nil {
						t.Error(err)
					}
				})
			}
			return false
		})
	})
	step := crashtest.Scenarios()[0].Steps[0]
	if err := e.fake.DropNextResponse("EnsureCluster", 1); err != nil {
		t.Fatal(err)
	}
	e.applyStep(step)
	sawVerifying := false
	for i := 0; i < 12; i++ {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, r := range e.records() {
			if r.Seen != nil && strings.Contains(r.Seen.Message, "the outcome is not known") && strings.Contains(r.Seen.Message, "reading it back by name") {
				sawVerifying = true
			}
		}
		e.clock.Advance(time.Minute)
	}
	if !sawVerifying {
		t.Fatalf("the unknown outcome was never said:\n%s", e.describe())
	}
	e.converge(time.Minute, 40)
	e.check(step)
	truth := e.fake.Snapshot()
	if n := len(truth.Clusters); n != 3 { // two pools' clusters and the adoptable one
		t.Fatalf("%d clusters", n)
	}
	// The lost answer was settled by reading back, not by calling again;
	// every call carried the token derived from its operation's key.
	if n := e.fake.Calls("EnsureCluster"); n != 2 {
		t.Fatalf("EnsureCluster called %d times", n)
	}
	for _, c := range truth.Clusters {
		if c.Seeded {
			continue
		}
		id := c.Labels[providers.LabelSubstratePool]
		want := substrate.ClientToken(id + "/createCluster/" + c.Name + "/g1")
		if len(c.ClientTokens) != 1 || c.ClientTokens[0] != want {
			t.Fatalf("cluster %s tokens %v, want [%s]", c.Name, c.ClientTokens, want)
		}
		for _, np := range c.NodePools {
			if len(np.ClientTokens) != 1 || np.ClientTokens[0] != substrate.ClientToken(id+"/createNodePool/"+np.Name+"/g1") {
				t.Fatalf("node pool %s tokens %v", np.Name, np.ClientTokens)
			}
		}
	}
}

// TestThrottledSubstrateDelaysNoOther: one pool's provider calls are
// throttled for an hour; the other pool converges meanwhile and the
// throttled one is not called again before the hour is up.
func TestThrottledSubstrateDelaysNoOther(t *testing.T) {
	e := newEnv(t, func(o *substrate.Options) { o.Concurrency = 1 })
	step := crashtest.Step{Pools: []crashtest.Pool{
		{Name: "a", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}},
		{Name: "b", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}},
	}}
	if err := e.fake.RateLimit("EnsureCluster", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	e.applyStep(step)
	start := e.clock.Now()
	var throttled, other string
	for i := 0; i < 30; i++ {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
		a, b := e.status("a"), e.status("b")
		if throttled == "" {
			switch {
			case strings.Contains(a.Message, "throttled"):
				throttled, other = "a", "b"
			case strings.Contains(b.Message, "throttled"):
				throttled, other = "b", "a"
			}
		}
		if other != "" && strings.Contains(e.status(other).Message, substrate.NoDaemonMessage) {
			break
		}
	}
	if throttled == "" || !strings.Contains(e.status(other).Message, substrate.NoDaemonMessage) {
		t.Fatalf("throttled %q, statuses:\n%s", throttled, e.describe())
	}
	if e.clock.Now().Sub(start) >= time.Hour {
		t.Fatal("the other pool took the throttled one's hour")
	}
	if n := e.fake.Calls("EnsureCluster"); n != 2 {
		t.Fatalf("EnsureCluster called %d times before the Retry-After passed", n)
	}
	if st := e.status(throttled); st.Cluster.ID != "" || !strings.Contains(st.Message, "trying again at") {
		t.Fatalf("throttled: %+v", st)
	}
	e.clock.Advance(time.Hour)
	e.converge(10*time.Second, 30)
	e.check(step)
}

// slowCalls holds one pool's cluster creates until released.
type slowCalls struct {
	substrate.Provider
	release chan struct{}
	name    string
}

func (s slowCalls) EnsureCluster(ctx context.Context, acct providers.Account, spec providers.ClusterSpec) (providers.Cluster, error) {
	if strings.Contains(spec.Name, s.name) {
		select {
		case <-s.release:
		case <-ctx.Done():
			return providers.Cluster{}, &providers.Error{Class: providers.Unavailable, SideEffect: providers.None, Err: ctx.Err()}
		}
	}
	return s.Provider.EnsureCluster(ctx, acct, spec)
}

// TestRunSlowProviderDelaysNoOther: under Run, a provider call that hangs
// for one pool does not hold another pool's passes.
func TestRunSlowProviderDelaysNoOther(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, func(o *substrate.Options) {
		o.Providers = map[string]substrate.Provider{"fake": slowCalls{Provider: o.Providers["fake"], release: release, name: "-slow-"}}
		o.Poll, o.Every = time.Second, time.Second
	})
	step := crashtest.Step{Pools: []crashtest.Pool{
		{Name: "slow", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}},
		{Name: "fast", Flavors: []crashtest.Flavor{{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}}},
	}}
	e.applyStep(step)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.rec.Run(ctx) }()
	e.rec.Wake()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(e.status("fast").Message, substrate.NoDaemonMessage) {
		if time.Now().After(deadline) {
			t.Fatalf("the fast pool did not converge while the slow one hangs:\n%s", e.describe())
		}
		e.clock.Advance(time.Second)
		time.Sleep(5 * time.Millisecond)
	}
	if st := e.status("slow"); st.Cluster.ID != "" {
		t.Fatalf("slow: %+v", st)
	}
	close(release)
	for !strings.Contains(e.status("slow").Message, substrate.NoDaemonMessage) {
		if time.Now().After(deadline) {
			t.Fatalf("the slow pool did not converge once released:\n%s", e.describe())
		}
		e.clock.Advance(time.Second)
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.check(step)
}
