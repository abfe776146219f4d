package substrate_test

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

var (
	campaignTrials = flag.Int("campaign.trials", 210, "trials of the crash campaign")
	campaignSeed   = flag.Uint64("campaign.seed", 0, "run the one trial of this seed (printed by a failure)")
	campaignDry    = flag.Bool("campaign.dry", false, "exhaustive campaign: calibrate and print the transitions reached, crash nowhere")
	campaignOnly   = flag.String("campaign.scenario", "", "exhaustive campaign: run only the scenario of this name (its coverage then is its own)")
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
// journal steps, and remembers where; it also keeps every point it passed
// (by pointKey), for the coverage of the campaign.
type crasher struct {
	k, n  atomic.Int64
	where atomic.Value // string: the pointKey of the crash
	mu    sync.Mutex
	seen  map[string]bool
}

func (c *crasher) at(p substrate.Point) bool {
	n := c.n.Add(1)
	key := pointKey(p)
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[key] = true
	c.mu.Unlock()
	if k := c.k.Load(); k > 0 && n == k {
		c.where.Store(key)
		return true
	}
	return false
}

// pointKey names a point by the step and the journal transition it is at:
// `createCluster journaled->inFlight`, or `createCluster beforeCall`.
func pointKey(p substrate.Point) string {
	switch {
	case p.Kind != substrate.PointTransition:
		return p.Step + " " + string(p.Kind)
	case p.From == "" && p.To == "":
		return p.Step
	case p.From == "":
		return p.Step + " ->" + string(p.To)
	}
	return p.Step + " " + string(p.From) + "->" + string(p.To)
}

// settle converges a step as the campaign means it: a rushed step gets one
// pass (what it started is still in flight when the next step is applied).
func (e *env) settle(st crashtest.Step) {
	e.t.Helper()
	if n := rushed(st); n > 0 {
		// Several passes move on the clock as the crashed runs do.
		step := time.Second
		if n > 1 {
			step = 10 * time.Second
		}
		for range n {
			if err := e.rec.ReconcileOnce(e.t.Context()); err != nil {
				e.t.Fatalf("the rushed step's pass: %v", err)
			}
			e.clock.Advance(step)
		}
		return
	}
	e.converge(10*time.Second, 40)
}

// calibration is what a clean run of each scenario passes: the points of
// each of its crashed steps (a crash is drawn within its own step's
// points), and every point key reached.
type calibration struct {
	points map[string][]int64
	keys   map[string]bool
}

func calibrate(t *testing.T, scenarios []crashtest.Scenario) calibration {
	return calibrateWith(t, scenarios, nil)
}

// calibrateWith calibrates with faults armed before each crashed step.
func calibrateWith(t *testing.T, scenarios []crashtest.Scenario, faults []fake.Fault) calibration {
	cal := calibration{points: map[string][]int64{}, keys: map[string]bool{}}
	for _, s := range scenarios {
		c := &crasher{}
		e, w, _ := campaignEnv(t, s, c, true)
		for _, st := range s.Setup {
			e.applyStep(st)
			e.converge(10*time.Second, 40)
		}
		c.mu.Lock()
		c.seen = nil
		c.mu.Unlock()
		for _, st := range s.Steps {
			c.arm(0)
			e.tamper(st)
			e.injectAll(faults)
			e.injectAll(st.Faults)
			e.applyStep(st)
			e.settle(st)
			// A step may pass no point (a rushed step whose one pass meets
			// a failed read), not a whole scenario.
			cal.points[s.Name] = append(cal.points[s.Name], c.n.Load())
		}
		total := int64(0)
		for _, n := range cal.points[s.Name] {
			total += n
		}
		if total < 1 {
			t.Fatalf("scenario %s (faults %v) passes no point: the hooks are not called", s.Name, faults)
		}
		if w != nil {
			if bad := w.verdict(); bad != "" {
				t.Fatalf("scenario %s (faults %v), a clean run: %s", s.Name, faults, bad)
			}
		}
		c.mu.Lock()
		for k := range c.seen {
			cal.keys[k] = true
		}
		c.mu.Unlock()
	}
	return cal
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
	scenarios := append(crashtest.Scenarios(), crashtest.DrainScenarios()...)
	cal := calibrate(t, scenarios)
	points := cal.points
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

func trial(t *testing.T, seed uint64, scenarios []crashtest.Scenario, points map[string][]int64, counts *campaignCounts) {
	rng := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15))
	s := scenarios[rng.IntN(len(scenarios))]
	c := &crasher{}
	e, w, sh := campaignEnv(t, s, c, false)
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf("seed %d (scenario %s): %s; replay with -run 'TestCrashCampaign' -campaign.seed %d", seed, s.Name, fmt.Sprintf(format, args...), seed)
		counts.mu.Lock()
		counts.failures = append(counts.failures, msg)
		counts.mu.Unlock()
		t.Error(msg)
	}
	// Another installation shares the account (staging beside prod): a
	// cluster of its own for each pool of the same id. The trial must leave
	// each as it was, whatever it crashes through.
	theirs := e.seedOtherInstallation(s)
	for _, st := range s.Setup {
		e.applyStep(st)
		e.converge(10*time.Second, 40)
	}
	crashes, missed := 0, 0
	var where []string
	for si, st := range s.Steps {
		e.tamper(st)
		e.injectAll(st.Faults)
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
		// Crash points are drawn within this step's own points (a clean
		// run's count), each crash within what the previous left.
		used := int64(0)
		for range 1 + rng.IntN(3) {
			left := points[s.Name][si] - used
			if left < 1 {
				break
			}
			k := 1 + rng.Int64N(left)
			used += k
			c.arm(k)
			crashed := false
			for i := 0; i < 40 && !crashed; i++ {
				if n := rushed(st); n > 0 && i >= n {
					break
				}
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
		if rushed(st) > 0 {
			continue // the next step is applied while this one is in flight
		}
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
	f := checkTrial(e, w, last)
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
	if bad := sh.onlyChosenRemoved(e); bad != "" {
		fail("after crashes at %v: %s", where, bad)
	}
	if bad := e.untouched(theirs); bad != "" {
		fail("after crashes at %v another installation's cluster was touched: %s", where, bad)
	}
	if open := e.openOps(); len(open) > 0 {
		fail("after crashes at %v the journal holds unfinished operations: %v", where, open)
	}
	if rep.Adopted+rep.Orphans+rep.Reported+rep.Ghosts+rep.NodePoolOrphans+rep.Errors != 0 {
		fail("after crashes at %v the sweep found %+v", where, rep)
	}
	if w != nil {
		if bad := w.verdict(); bad != "" {
			fail("after crashes at %v the cluster says: %s", where, bad)
		}
	}
}

// injectAll arms faults at the fake.
func (e *env) injectAll(faults []fake.Fault) {
	e.t.Helper()
	for _, f := range faults {
		if err := e.fake.InjectFault(f); err != nil {
			e.t.Fatal(err)
		}
	}
}

// faultVariants are the provider faults the exhaustive campaign runs every
// scenario under (besides none), each armed before every crashed step: a
// lost answer, an unknown outcome, a throttle and a failed read-back at
// each kind of call, so that the journal's other transitions (verifying,
// retried, deferred) are crashed in too.
var faultVariants = func() [][]fake.Fault {
	v := [][]fake.Fault{nil}
	for _, m := range []string{"EnsureCluster", "EnsureNodePool", "ResizeNodePool", "DeleteNodePool", "DeleteCluster"} {
		v = append(v,
			[]fake.Fault{{Method: m, Drop: true}},
			[]fake.Fault{{Method: m, Class: providers.Throttled, SideEffect: providers.None, RetryAfter: 20 * time.Second}},
			[]fake.Fault{{Method: m, Class: providers.Unavailable, SideEffect: providers.Maybe}, {Method: readOf(m), Count: 2, Class: providers.Unavailable, SideEffect: providers.None}},
		)
	}
	return v
}()

// readOf is the read-back of a call.
func readOf(method string) string {
	if strings.Contains(method, "NodePool") {
		return "GetNodePool"
	}
	return "GetCluster"
}

// TestCrashAtEveryPoint is the exhaustive campaign: for every scenario,
// every fault variant, every crashed step and every point a clean run of
// that step passes, one
// trial crashes there once (no cleanup), restarts over the same files and
// converges the rest of the scenario; each must end with no duplicate,
// nothing leaked, the records agreeing with the provider, no unfinished
// operation and a sweep with nothing to say. Every point key a clean run
// reaches (a step and a journal transition, or the moment before or after
// a call) must have been crashed at; the coverage table is logged.
func TestCrashAtEveryPoint(t *testing.T) {
	type job struct {
		s      crashtest.Scenario
		faults []fake.Fault
		step   int
		k      int64
	}
	var jobs []job
	reached := map[string]bool{}
	// Every scenario runs under every fault variant; the fault scenarios,
	// whose steps carry faults of their own, only without.
	type run struct {
		faults    []fake.Fault
		scenarios []crashtest.Scenario
	}
	var runs []run
	for _, faults := range faultVariants {
		scenarios := crashtest.Scenarios()
		// The drain scenarios meet the node pools' faults (their calls are
		// the node pools'); a cluster's fault would leave a rushed step's
		// one pass without a drain to crash in.
		if !slices.ContainsFunc(faults, func(f fake.Fault) bool { return !strings.Contains(f.Method, "NodePool") }) {
			scenarios = append(scenarios, crashtest.DrainScenarios()...)
		}
		runs = append(runs, run{faults, scenarios})
	}
	runs = append(runs, run{nil, crashtest.FaultScenarios()})
	if *campaignOnly != "" {
		for i := range runs {
			runs[i].scenarios = slices.DeleteFunc(runs[i].scenarios, func(s crashtest.Scenario) bool { return s.Name != *campaignOnly })
		}
	}
	for _, r := range runs {
		faults, scenarios := r.faults, r.scenarios
		cal := calibrateWith(t, scenarios, faults)
		for k := range cal.keys {
			reached[k] = true
		}
		if *campaignDry {
			continue
		}
		for _, s := range scenarios {
			for si := range s.Steps {
				for k := int64(1); k <= cal.points[s.Name][si]; k++ {
					jobs = append(jobs, job{s, faults, si, k})
				}
			}
		}
	}
	var mu sync.Mutex
	crashedAt := map[string]int{}
	missed, dup, leaks, wrong := 0, 0, 0, 0
	// The drain scenarios' figures: trials per scenario, drain passes,
	// the most Nodes of a pool ever unavailable at once, and trials whose
	// cluster found something wrong.
	byScenario := map[string]int{}
	drainTrials, drainPasses, peakUnavailable, drainWrong := 0, 0, 0, 0
	inParallel(t, len(jobs), func(i int) {
		j := jobs[i]
		name := fmt.Sprintf("%s/faults%v/step%d/point%d", j.s.Name, j.faults, j.step, j.k)
		c := &crasher{}
		e, w, sh := campaignEnv(t, j.s, c, true)
		for _, st := range j.s.Setup {
			e.applyStep(st)
			e.converge(10*time.Second, 40)
		}
		where := "nowhere (not reached)"
		for si, st := range j.s.Steps {
			e.tamper(st)
			e.injectAll(j.faults)
			e.injectAll(st.Faults)
			e.applyStep(st)
			if si != j.step {
				e.settle(st)
				continue
			}
			c.arm(j.k)
			crashed := false
			for n := 0; n < 40 && !crashed; n++ {
				if r := rushed(st); r > 0 && n >= r {
					break
				}
				err := e.rec.ReconcileOnce(t.Context())
				switch {
				case substrate.IsCrashed(err):
					crashed = true
				case err != nil:
					t.Errorf("%s: pass: %v", name, err)
					return
				case e.converged():
					n = 40
				}
				e.clock.Advance(10 * time.Second)
			}
			if crashed {
				where = c.where.Load().(string)
			}
			c.arm(0)
			mu.Lock()
			if crashed {
				crashedAt[where]++
			} else {
				missed++
			}
			mu.Unlock()
			if crashed {
				e.restart()
			}
			if rushed(st) == 0 {
				for n := 0; n < 60 && !e.converged(); n++ {
					if err := e.rec.ReconcileOnce(t.Context()); err != nil {
						t.Errorf("%s: pass after the crash: %v", name, err)
						return
					}
					e.clock.Advance(10 * time.Second)
				}
				if !e.converged() {
					t.Errorf("%s: not converged after the crash at %v:\n%s", name, where, e.describe())
					return
				}
			}
		}
		f := checkTrial(e, w, j.s.Steps[len(j.s.Steps)-1])
		mu.Lock()
		dup, leaks, wrong = dup+f.Duplicates, leaks+f.Leaks, wrong+f.Disagreements
		mu.Unlock()
		if !f.OK() {
			t.Errorf("%s: after the crash at %v: %v\n%s", name, where, f.Problems, e.describe())
		}
		if open := e.openOps(); len(open) > 0 {
			t.Errorf("%s: after the crash at %v the journal holds unfinished operations: %v", name, where, open)
		}
		if bad := sh.onlyChosenRemoved(e); bad != "" {
			t.Errorf("%s: after the crash at %v: %s", name, where, bad)
		}
		rep, err := e.rec.Sweep(t.Context())
		if err != nil || rep.Adopted+rep.Orphans+rep.Reported+rep.Ghosts+rep.NodePoolOrphans+rep.Errors+rep.Foreign != 0 {
			t.Errorf("%s: after the crash at %v the sweep found %+v (%v)", name, where, rep, err)
		}
		if w != nil {
			peak, drains := w.peakOf()
			bad := w.verdict()
			mu.Lock()
			byScenario[j.s.Name]++
			drainTrials, drainPasses, peakUnavailable = drainTrials+1, drainPasses+drains, max(peakUnavailable, peak)
			if bad != "" {
				drainWrong++
			}
			mu.Unlock()
			if bad != "" {
				t.Errorf("%s: after the crash at %v the cluster says: %s", name, where, bad)
			}
		}
	})
	var keys []string
	for k := range reached {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var table strings.Builder
	never := 0
	for _, k := range keys {
		fmt.Fprintf(&table, "\n  %-48s %4d", k, crashedAt[k])
		if crashedAt[k] == 0 && !*campaignDry {
			never++
			t.Errorf("the point %q is reached by a clean run but never crashed at", k)
		}
	}
	// Every transition the state machine allows a step (narrowed per step:
	// substrate.StepTransitions) must have been crashed in; the table is
	// step x transition, crashes per cell ("-": not a transition of that
	// step, by construction).
	var unreached []string
	var cov strings.Builder
	var all []substrate.Transition
	for _, from := range []state.JournalState{state.Journaled, state.InFlight, state.Verifying, state.Accepted} {
		for _, ev := range substrate.Events {
			if to, err := substrate.Next(from, ev); err == nil && !slices.Contains(all, substrate.Transition{From: from, To: to}) {
				all = append(all, substrate.Transition{From: from, To: to})
			}
		}
	}
	fmt.Fprintf(&cov, "\n  %-22s", "from->to")
	for _, step := range substrate.Steps {
		fmt.Fprintf(&cov, " %14s", step)
	}
	allowed := 0
	for _, tr := range all {
		fmt.Fprintf(&cov, "\n  %-22s", tr)
		for _, step := range substrate.Steps {
			if !slices.Contains(substrate.StepTransitions(step), tr) {
				fmt.Fprintf(&cov, " %14s", "-")
				continue
			}
			allowed++
			k := step + " " + tr.String()
			n := crashedAt[k]
			if *campaignDry && reached[k] {
				n = -1 // reached, not crashed: a dry run
			}
			fmt.Fprintf(&cov, " %14d", n)
			if n == 0 {
				unreached = append(unreached, k)
			}
		}
	}
	t.Logf("exhaustive campaign: %d trials over %d fault variants and %d fault scenarios (%d points never reached in a crashed run), %d point keys, %d never crashed at; duplicates=%d leaks=%d disagreements=%d\n  crashes by point:%s\n  crashes per step and transition (%d transitions the steps may make, %d never crashed in):%s",
		len(jobs), len(faultVariants), len(crashtest.FaultScenarios()), missed, len(keys), never, dup, leaks, wrong, table.String(), allowed, len(unreached), cov.String())
	var perScenario []string
	for _, s := range crashtest.DrainScenarios() {
		perScenario = append(perScenario, fmt.Sprintf("%s=%d", s.Name, byScenario[s.Name]))
	}
	t.Logf("drain scenarios: %d trials (%s), %d drain passes, at most %d Nodes of a pool unavailable at once (budget: 1 of 2), %d trials with a drain invariant broken",
		drainTrials, strings.Join(perScenario, " "), drainPasses, peakUnavailable, drainWrong)
	for _, k := range drainPoints {
		if *campaignOnly != "" || *campaignDry {
			break // one scenario reaches only its own points
		}
		if crashedAt[k] == 0 {
			t.Errorf("the drain point %q was never crashed at", k)
		}
	}
	for _, k := range unreached {
		if *campaignOnly != "" {
			break // one scenario reaches only its own transitions
		}
		t.Errorf("the transition %q is one its step may make, but no trial crashed in it", k)
	}
	if missed > len(jobs)/10 {
		t.Errorf("%d of %d crash points were never reached: the calibration does not match the runs", missed, len(jobs))
	}
}

// otherInstallation is the second installation of the campaign's account.
const otherInstallation = "0ther000000000000000000000000beef"

// seedOtherInstallation makes, behind the agent's back, a running cluster
// of another installation for every created pool of the scenario (same
// pool id, the other installation's name and labels), and returns them.
func (e *env) seedOtherInstallation(s crashtest.Scenario) []providers.Cluster {
	e.t.Helper()
	seen := map[string]bool{}
	var out []providers.Cluster
	for _, st := range append(append([]crashtest.Step{}, s.Setup...), s.Steps...) {
		for _, p := range st.Pools {
			if p.Adopt || seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			o := providers.Owner{Installation: otherInstallation, PoolID: p.ID()}
			c, err := e.fake.EnsureCluster(e.t.Context(), fleetAccount, providers.ClusterSpec{Name: substrate.ClusterName(p.Name, o), Location: "fake-east", Labels: o.Labels()})
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, c)
		}
	}
	for range 5 {
		_ = e.fake.Advance()
	}
	return out
}

// untouched says what changed of the other installation's clusters ("" for
// nothing).
func (e *env) untouched(theirs []providers.Cluster) string {
	truth := e.fake.Snapshot()
	for _, c := range theirs {
		got, ok := truth.Clusters[c.Ref.ID]
		switch {
		case !ok:
			return c.Ref.Name + " is gone"
		case got.Status != providers.ClusterRunning:
			return c.Ref.Name + " is " + string(got.Status)
		case got.Labels[providers.LabelInstallation] != otherInstallation || len(got.NodePools) != 0:
			return fmt.Sprintf("%s has labels %v and %d node pools", c.Ref.Name, got.Labels, len(got.NodePools))
		}
	}
	return ""
}

// tamper edits, behind the agent's back, what a step names: the node pools
// of its Tamper flavor lose their capacity label.
func (e *env) tamper(st crashtest.Step) {
	e.t.Helper()
	if st.Tamper == "" {
		return
	}
	for _, c := range e.fake.Snapshot().Clusters {
		for _, np := range c.NodePools {
			if !strings.HasSuffix(np.Name, "-"+st.Tamper) || np.Labels[providers.LabelCapacity] == "" {
				continue
			}
			labels := maps.Clone(np.Labels)
			delete(labels, providers.LabelCapacity)
			ref := providers.ClusterRef{ID: c.ID, Name: c.Name, Location: c.Location}
			if _, err := e.fake.EnsureNodePool(e.t.Context(), fleetAccount, ref, providers.NodePoolSpec{Name: np.Name, Shape: np.Shape, Size: np.Size, Labels: labels}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	for range 3 {
		_ = e.fake.Advance()
	}
}

// rushed is how many passes a step gets before the next one is applied
// (0: it converges first).
func rushed(st crashtest.Step) int {
	if st.Passes > 0 {
		return st.Passes
	}
	if st.Rush {
		return 1
	}
	return 0
}
