package substrate_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

var (
	campaignTrials = flag.Int("campaign.trials", 210, "trials of the crash campaign")
	campaignSeed   = flag.Uint64("campaign.seed", 0, "run the one trial of this seed (printed by a failure)")
)

// The faults a trial may meet, at one of the methods its steps call.
var (
	campaignFaults = []fake.Fault{
		{Drop: true}, {Class: providers.Unavailable, SideEffect: providers.Maybe}, {Class: providers.Unavailable, SideEffect: providers.Done},
		{Class: providers.Throttled, SideEffect: providers.None, RetryAfter: time.Minute}, {Class: providers.Conflict, SideEffect: providers.None},
		{Class: providers.Unknown, SideEffect: providers.Maybe}, {Class: providers.Terminal, SideEffect: providers.None},
	}
	campaignMethods = []string{"EnsureCluster", "GetCluster", "EnsureNodePool", "GetNodePool", "ListNodePools", "ResizeNodePool", "DeleteNodePool", "DeleteCluster", "ReadAdoptable"}
)

// campaignBase is the first trial's seed: the campaign is the same on every
// run; -campaign.seed replays one trial.
const campaignBase = 20260601

// crasher is a hook that crashes the reconciler at the k-th point between
// journal steps, and remembers where.
type crasher struct {
	k, n  atomic.Int64
	where atomic.Value // string
}

func (c *crasher) at(p substrate.Point) bool {
	n := c.n.Add(1)
	if k := c.k.Load(); k > 0 && n == k {
		c.where.Store(string(p.Kind) + ":" + p.Step)
		return true
	}
	return false
}

// arm makes the k-th point from now crash (0: none).
func (c *crasher) arm(k int64) {
	c.n.Store(0)
	c.where.Store("")
	c.k.Store(k)
}

type campaignCounts struct {
	mu                       sync.Mutex
	trials, crashes, missed  int
	byScenario, byPoint      map[string]int
	duplicates, leaks, wrong int
	failures                 []string
}

func (c *campaignCounts) String() string {
	keys := func(m map[string]int) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		var b strings.Builder
		for _, k := range ks {
			fmt.Fprintf(&b, " %s=%d", k, m[k])
		}
		return b.String()
	}
	return fmt.Sprintf("trials=%d crashes=%d (crash points never reached: %d) duplicates=%d leaks=%d disagreements=%d failures=%d\n  by scenario:%s\n  crashes by point:%s",
		c.trials, c.crashes, c.missed, c.duplicates, c.leaks, c.wrong, len(c.failures), keys(c.byScenario), keys(c.byPoint))
}

// TestCrashCampaign runs seeded trials: each picks a scenario, converges
// its setup, applies its steps and crashes the reconciler one to three times
// at random points between journal steps (Crash: no cleanup), restarting it
// over the same state file and the fake's own state file, then converges
// and checks the fake's ground truth against the document and the records:
// no duplicate, nothing leaked, state and provider agree; a discovery sweep
// afterwards finds nothing to say.
func TestCrashCampaign(t *testing.T) {
	scenarios := crashtest.Scenarios()
	// How many points a clean run of each scenario's crashed steps passes,
	// so that crash points fall within a run.
	points := map[string]int64{}
	for _, s := range scenarios {
		c := &crasher{}
		e := newEnv(t, func(o *substrate.Options) { o.Hooks = &substrate.Hooks{At: c.at} })
		for _, st := range s.Setup {
			e.applyStep(st)
			e.converge(10*time.Second, 40)
		}
		c.arm(0)
		for _, st := range s.Steps {
			e.applyStep(st)
			e.converge(10*time.Second, 40)
		}
		points[s.Name] = c.n.Load()
		if points[s.Name] < 5 {
			t.Fatalf("scenario %s passes %d points: the hooks are not called", s.Name, points[s.Name])
		}
	}
	counts := &campaignCounts{byScenario: map[string]int{}, byPoint: map[string]int{}}
	seeds := make([]uint64, 0, *campaignTrials)
	if *campaignSeed != 0 {
		seeds = append(seeds, *campaignSeed)
	} else {
		for i := range *campaignTrials {
			seeds = append(seeds, campaignBase+uint64(i))
		}
	}
	start := time.Now()
	inParallel(t, len(seeds), func(i int) {
		t.Run(fmt.Sprint(seeds[i]), func(t *testing.T) { trial(t, seeds[i], scenarios, points, counts) })
	})
	t.Logf("crash campaign in %s: %s", time.Since(start).Round(time.Millisecond), counts)
	if len(seeds) >= 200 && counts.crashes < len(seeds) {
		t.Errorf("only %d crashes in %d trials", counts.crashes, len(seeds))
	}
	for _, f := range counts.failures {
		t.Errorf("failed: %s", f)
	}
}

func trial(t *testing.T, seed uint64, scenarios []crashtest.Scenario, points map[string]int64, counts *campaignCounts) {
	rng := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15))
	s := scenarios[rng.IntN(len(scenarios))]
	c := &crasher{}
	e := newEnv(t, func(o *substrate.Options) { o.Hooks = &substrate.Hooks{At: c.at} })
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf("seed %d (scenario %s): %s; replay with -run 'TestCrashCampaign' -campaign.seed %d", seed, s.Name, fmt.Sprintf(format, args...), seed)
		counts.mu.Lock()
		counts.failures = append(counts.failures, msg)
		counts.mu.Unlock()
		t.Error(msg)
	}
	for _, st := range s.Setup {
		e.applyStep(st)
		e.converge(10*time.Second, 40)
	}
	crashes, missed := 0, 0
	var where []string
	for _, st := range s.Steps {
		// Half the trials also meet a provider fault the journal must ride
		// out (none of those a person must fix for good).
		if rng.IntN(2) == 0 {
			ft := campaignFaults[rng.IntN(len(campaignFaults))]
			ft.Method = campaignMethods[rng.IntN(len(campaignMethods))]
			if err := e.fake.InjectFault(ft); err != nil {
				t.Fatal(err)
			}
			where = append(where, "fault:"+ft.Method)
		}
		e.applyStep(st)
		used := int64(0)
		for range 1 + rng.IntN(3) {
			k := 1 + rng.Int64N(max(points[s.Name]-used, 1))
			used += k
			c.arm(k)
			crashed := false
			for i := 0; i < 40 && !crashed; i++ {
				err := e.rec.ReconcileOnce(t.Context())
				switch {
				case substrate.IsCrashed(err):
					crashed = true
				case err != nil:
					fail("pass: %v", err)
					return
				case e.converged():
					i = 40
				}
				e.clock.Advance(time.Duration(rng.IntN(20)) * time.Second)
			}
			if !crashed {
				missed++
				continue
			}
			crashes++
			where = append(where, c.where.Load().(string))
			c.arm(0)
			e.restart()
		}
		c.arm(0)
		for i := 0; i < 60 && !e.converged(); i++ {
			if err := e.rec.ReconcileOnce(t.Context()); err != nil {
				fail("pass after the crashes: %v", err)
				return
			}
			e.clock.Advance(10 * time.Second)
		}
		if !e.converged() {
			fail("not converged after crashes at %v:\n%s", where, e.describe())
			return
		}
	}
	last := s.Steps[len(s.Steps)-1]
	f := crashtest.Check(e.fake.Snapshot(), last, e.records(), testInstallation)
	rep, err := e.rec.Sweep(t.Context())
	if err != nil {
		fail("sweep: %v", err)
	}
	counts.mu.Lock()
	counts.trials++
	counts.crashes += crashes
	counts.missed += missed
	counts.byScenario[s.Name]++
	for _, w := range where {
		if !strings.HasPrefix(w, "fault:") {
			counts.byPoint[w]++
		}
	}
	counts.duplicates += f.Duplicates
	counts.leaks += f.Leaks
	counts.wrong += f.Disagreements
	counts.mu.Unlock()
	if !f.OK() {
		fail("after crashes at %v: %v\n%s", where, f.Problems, e.describe())
	}
	if open := e.openOps(); len(open) > 0 {
		fail("after crashes at %v the journal holds unfinished operations: %v", where, open)
	}
	if rep.Adopted+rep.Orphans+rep.Reported+rep.Ghosts+rep.NodePoolOrphans+rep.Errors != 0 {
		fail("after crashes at %v the sweep found %+v", where, rep)
	}
}
