package substrate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// upgradeOnTheClock is a fake whose operations take their steps on the
// injected clock alone (a read does not hurry them): an upgrade of a
// control plane or of a node pool of three nodes takes three steps, one
// node (or the control plane's third) every five minutes.
const (
	hopSteps = 3
	hopStep  = 5 * time.Minute
)

func newClockEnv(t *testing.T, tune func(*substrate.Options)) *env {
	t.Helper()
	e := newEnv(t, tune)
	e.crash()
	e.fakeCfg.Steps = fake.Steps{Cluster: 1, NodePool: 1, Update: hopSteps, Delete: 1}
	e.fakeCfg.StepEvery, e.fakeCfg.ClockOnly = hopStep, true
	e.start()
	return e
}

// twoPools is one pool on a created cluster of version v with two node
// pools of three nodes each.
func twoPools(v string) crashtest.Step {
	return crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Version: v, Flavors: []crashtest.Flavor{
		{Name: "a", MachineType: "fake-cpu-4", Nodes: 3}, {Name: "b", MachineType: "fake-cpu-8", Nodes: 3}}}}}
}

// writes are the provider calls that change something.
var writes = []string{"EnsureCluster", "EnsureNodePool", "ResizeNodePool", "DeleteNodePool", "DeleteCluster"}

var reads = []string{"GetCluster", "ListNodePools", "GetNodePool"}

func callCounts(f *fake.Fake, methods []string) map[string]int {
	m := map[string]int{}
	for _, name := range methods {
		m[name] = f.Calls(name)
	}
	return m
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// skewProblem checks the fake's truth for what an upgrade must never do:
// a kubelet newer than its API server or more than three minors behind
// it, or two upgrades at once in one cluster.
func skewProblem(truth fake.State) string {
	for _, c := range truth.Clusters {
		if c.Seeded {
			continue
		}
		_, cy, _ := providers.Minor(c.Version)
		busy := 0
		if c.Op != nil {
			busy++
		}
		for _, np := range c.NodePools {
			_, py, ok := providers.Minor(np.Version)
			if ok && (py > cy || cy-py > providers.MaxKubeletLag) {
				return fmt.Sprintf("node pool %s runs %s under a control plane on %s", np.Name, np.Version, c.Version)
			}
			if np.Op != nil {
				busy++
			}
		}
		if busy > 1 {
			return fmt.Sprintf("cluster %s has %d operations at once", c.Name, busy)
		}
	}
	return ""
}

func condition(s substrate.Status, typ string) substrate.StatusCondition {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return substrate.StatusCondition{}
}

// TestUpgradeOneMinorOnTheClock: merge to upgraded for one minor, one
// control plane and two node pools of three nodes, on the fake's clock.
// The upgrade is three provider operations one after the other (the
// control plane, then each pool), each taking three steps of five minutes:
// 45 minutes at the least. The substrate must send each hop's call exactly
// once, keep the skew rules at every pass, show each hop with the
// provider's progress while it runs, and finish within one poll of each
// operation's end.
func TestUpgradeOneMinorOnTheClock(t *testing.T) {
	e := newClockEnv(t, nil)
	e.applyStep(twoPools("1.33"))
	e.converge(time.Minute, 60)
	before := e.fake.Snapshot()
	for _, c := range before.Clusters {
		if !c.Seeded && c.Version != "1.33" {
			t.Fatalf("the cluster was made on %s, want 1.33", c.Version)
		}
	}
	w0, r0, t0 := callCounts(e.fake, writes), callCounts(e.fake, reads), e.clock.Now()
	e.applyStep(twoPools("1.34"))
	poll := substrate.DefaultPoll
	least := 3 * hopSteps * hopStep
	passes := 0
	seen := map[string]bool{}
	for ; passes < int(2*least/poll); passes++ {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		if bad := skewProblem(e.fake.Snapshot()); bad != "" {
			t.Fatalf("pass %d: %s", passes, bad)
		}
		if c := condition(e.status("gpu"), substrate.CondUpgrade); c.Reason == substrate.ReasonUpgradeInProgress {
			if c.Status != substrate.ConditionUnknown {
				t.Fatalf("a hop in progress is %s, want Unknown", c.Status)
			}
			if u := e.status("gpu").Upgrade; !strings.Contains(c.Message, ": done;") && (u == nil || !strings.Contains(c.Message, u.Hop)) {
				t.Fatalf("status names the hop %+v while the condition says %q", u, c.Message)
			}
			switch {
			case strings.Contains(c.Message, "1.33 -> 1.34 (control plane)"):
				seen["control plane"] = true
			case strings.Contains(c.Message, "1.33 -> 1.34 (node pool ") && strings.Contains(c.Message, "of 3"):
				seen[c.Message[strings.Index(c.Message, "(node pool"):strings.Index(c.Message, ")")]] = true
			}
		}
		if e.converged() {
			break
		}
		e.clock.Advance(poll)
	}
	elapsed := e.clock.Now().Sub(t0)
	if !e.converged() {
		t.Fatalf("not upgraded after %s:\n%s", elapsed, e.describe())
	}
	e.check(twoPools("1.34"))
	w, r := callCounts(e.fake, writes), callCounts(e.fake, reads)
	for k := range w {
		w[k] -= w0[k]
	}
	for k := range r {
		r[k] -= r0[k]
	}
	if w["EnsureCluster"] != 1 || w["EnsureNodePool"] != 2 || sum(w) != 3 {
		t.Errorf("writes %v: want one EnsureCluster and one EnsureNodePool per node pool, nothing else", w)
	}
	if len(seen) != 3 {
		t.Errorf("the hops shown in progress: %v; want the control plane and both node pools with their progress", seen)
	}
	// Each operation's end is seen within one poll and the next starts
	// in the pass after: two polls per operation at the most.
	if elapsed < least || elapsed > least+3*2*poll {
		t.Errorf("merge to upgraded took %s on the clock; the hops need %s, and the bound is %s", elapsed, least, least+3*2*poll)
	}
	if st := e.status("gpu"); condition(st, substrate.CondUpgrade).Reason != substrate.ReasonVersionCurrent || st.Upgrade != nil || st.Cluster.Version != "1.34" {
		t.Errorf("upgraded: condition %+v, hop %+v, version %s", condition(st, substrate.CondUpgrade), st.Upgrade, st.Cluster.Version)
	}
	t.Logf("merge to upgraded (1.33 -> 1.34, control plane and two node pools of 3 nodes): %s on the fake's clock against %s the hops need (x%.2f); %d passes; provider calls: %d writes %v (least 3), %d reads %v",
		elapsed, least, float64(elapsed)/float64(least), passes+1, sum(w), w, sum(r), r)
}

// TestUpgradeTwoMinorsIsTwoHops: a document two minors ahead is reached
// one minor at a time, each hop's node pools before the next control
// plane hop.
func TestUpgradeTwoMinorsIsTwoHops(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(twoPools("1.33"))
	e.converge(10*time.Second, 40)
	w0 := callCounts(e.fake, writes)
	e.applyStep(twoPools("1.35"))
	for n := 0; n < 120 && !e.converged(); n++ {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		if bad := skewProblem(e.fake.Snapshot()); bad != "" {
			t.Fatalf("pass %d: %s", n, bad)
		}
		e.clock.Advance(10 * time.Second)
	}
	e.check(twoPools("1.35"))
	w := callCounts(e.fake, writes)
	if got := w["EnsureCluster"] - w0["EnsureCluster"]; got != 2 {
		t.Errorf("%d control plane calls for two hops", got)
	}
	if got := w["EnsureNodePool"] - w0["EnsureNodePool"]; got != 4 {
		t.Errorf("%d node pool calls for two hops of two pools", got)
	}
}

// TestUpgradeWaitsForAWindow: outside the substrate's maintenance window
// no hop starts (OutsideWindow, with when the next opens); inside it the
// hop starts, and one started is finished after the window closes.
func TestUpgradeWaitsForAWindow(t *testing.T) {
	e := newClockEnv(t, nil)
	// epoch is Monday 2026-06-01 12:00 UTC: the window opens at 13:00
	// for 30 minutes, less than the hop's 45.
	window := `"maintenance":{"windows":[{"days":["mon"],"start":"13:00","duration":"30m","timeZone":"UTC"}]},`
	doc := func(v string) string {
		return strings.Replace(crashtest.Document(twoPools(v)), `"substrate":{`, `"substrate":{`+window, 1)
	}
	if !strings.Contains(doc("1.33"), "13:00") {
		t.Fatal("the document has no window: the test is not testing")
	}
	e.apply(doc("1.33"), false)
	e.converge(time.Minute, 60) // a create is not disruptive
	e.apply(doc("1.34"), false)
	w0 := callCounts(e.fake, writes)
	for e.clock.Now().Before(time.Date(2026, 6, 1, 12, 59, 0, 0, time.UTC)) {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Minute)
	}
	if w := callCounts(e.fake, writes); sum(w) != sum(w0) {
		t.Fatalf("a hop started outside the window: writes %v -> %v", w0, w)
	}
	c := condition(e.status("gpu"), substrate.CondUpgrade)
	if c.Reason != substrate.ReasonOutsideWindow || !strings.Contains(c.Message, "2026-06-01T13:00:00Z") {
		t.Fatalf("outside the window the upgrade says %+v", c)
	}
	for n := 0; n < 400 && !e.converged(); n++ {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(substrate.DefaultPoll)
	}
	if !e.converged() {
		t.Fatalf("the hop started in the window did not finish after it closed:\n%s", e.describe())
	}
	if e.clock.Now().Before(time.Date(2026, 6, 1, 13, 30, 0, 0, time.UTC)) {
		t.Fatalf("upgraded by %s: the hop needs 45 minutes from 13:00", e.clock.Now())
	}
	e.check(twoPools("1.34"))
}

// TestKillDuringAHopResumesIt: the agent killed right after each hop's
// call reached the provider (its answer never recorded) reads the hop
// back on restart and follows it, never sending it again.
func TestKillDuringAHopResumesIt(t *testing.T) {
	for _, step := range []string{"upgradeControlPlane", "upgradeNodePool"} {
		t.Run(step, func(t *testing.T) {
			var crashed atomic.Bool
			e := newEnv(t, func(o *substrate.Options) {
				substrate.SetCrashAt(o, func(p substrate.Point) bool {
					return p.Step == step && p.Kind == substrate.PointAfterCall && crashed.CompareAndSwap(false, true)
				})
			})
			e.applyStep(twoPools("1.33"))
			e.converge(10*time.Second, 40)
			w0 := callCounts(e.fake, writes)
			e.applyStep(twoPools("1.34"))
			for n := 0; n < 40 && !crashed.Load(); n++ {
				err := e.rec.ReconcileOnce(t.Context())
				if err != nil && !substrate.IsCrashed(err) {
					t.Fatal(err)
				}
				e.clock.Advance(10 * time.Second)
			}
			if !crashed.Load() {
				t.Fatalf("no %s call was made", step)
			}
			// Calls are not counted across a restart: count them apart.
			before := callCounts(e.fake, writes)
			e.restart()
			e.converge(10*time.Second, 60)
			e.check(twoPools("1.34"))
			after := callCounts(e.fake, writes)
			total := map[string]int{}
			for k := range before {
				total[k] = before[k] - w0[k] + after[k]
			}
			if total["EnsureCluster"] != 1 || total["EnsureNodePool"] != 2 {
				t.Errorf("writes across the kill %v: a hop was sent again", total)
			}
		})
	}
}

// TestRefusedUpgradeNamesTheRefusal: a hop the provider refuses is a
// problem (UpgradeRefused) in the provider's words, the substrate in
// error; a newer document makes the hop again.
func TestRefusedUpgradeNamesTheRefusal(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(twoPools("1.33"))
	e.converge(10*time.Second, 40)
	if err := e.fake.InjectFault(fake.Fault{Method: "EnsureCluster", Class: providers.Invalid, SideEffect: providers.None, Message: "version 1.34 is not offered in fake-east"}); err != nil {
		t.Fatal(err)
	}
	e.applyStep(twoPools("1.34"))
	e.converge(10*time.Second, 40)
	st := e.status("gpu")
	c := condition(st, substrate.CondUpgrade)
	if st.State != "error" || c.Status != substrate.ConditionFalse || c.Reason != substrate.ReasonUpgradeRefused ||
		!strings.Contains(c.Message, "1.33 -> 1.34 (control plane)") || !strings.Contains(c.Message, "version 1.34 is not offered in fake-east") {
		t.Fatalf("a refused hop: state %s, condition %+v", st.State, c)
	}
	next := twoPools("1.34")
	next.Pools[0].Flavors[0].Nodes = 2
	e.applyStep(next)
	e.converge(10*time.Second, 60)
	e.check(next)
}

// TestEveryHopKeepsItsProviderOperation: each hop's journaled operation,
// the control plane's as much as a node pool's, keeps the provider's id of
// the upgrade it started (an EKS update id, a GKE operation), so the
// journal says which provider operation a hop is.
func TestEveryHopKeepsItsProviderOperation(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(twoPools("1.33"))
	e.converge(10*time.Second, 40)
	e.applyStep(twoPools("1.34"))
	e.converge(10*time.Second, 120)
	e.check(twoPools("1.34"))
	hops := 0
	if err := e.store.View(func(tx *state.Tx) error {
		ops, err := tx.JournalOps("")
		for _, op := range ops {
			if !strings.HasPrefix(op.Step, "upgrade") {
				continue
			}
			hops++
			var r struct {
				Operation string `json:"operation"`
			}
			if json.Unmarshal(op.Result, &r) != nil || r.Operation == "" {
				t.Errorf("%s (%s): result %s keeps no provider operation", op.Key, op.Step, op.Result)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if hops != 3 {
		t.Fatalf("%d upgrade operations in the journal, want 3 (the control plane and two node pools)", hops)
	}
}

// TestHopKeepsTheInClusterVerdict: while a control plane hop keeps the
// cluster updating, the in-cluster half does not run, and the substrate
// says what it last found there: a running substrate stays ready (its
// nodes run through the hop), one whose node daemon was refused stays in
// error (a hop does not hide what needs a person).
func TestHopKeepsTheInClusterVerdict(t *testing.T) {
	for _, c := range []struct {
		name   string
		refuse error
		want   string
	}{{"applied", nil, "ready"}, {"refused", errors.New("the claim names another installation"), "error"}} {
		t.Run(c.name, func(t *testing.T) {
			d := &daemon{refuse: c.refuse}
			e := newClockEnv(t, func(o *substrate.Options) { o.InCluster = d })
			d.env = e
			e.applyStep(twoPools("1.33"))
			for n := 0; n < 200 && e.status("gpu").Upgrade == nil && condition(e.status("gpu"), substrate.CondInCluster).Type == ""; n++ {
				if err := e.rec.ReconcileOnce(t.Context()); err != nil {
					t.Fatal(err)
				}
				e.clock.Advance(10 * time.Second)
			}
			if st := e.status("gpu"); st.State != c.want {
				t.Fatalf("before the hop: %s (%s), want %s", st.State, st.Message, c.want)
			}
			e.applyStep(twoPools("1.34"))
			hopped := false
			for n := 0; n < 400; n++ {
				if err := e.rec.ReconcileOnce(t.Context()); err != nil {
					t.Fatal(err)
				}
				st := e.status("gpu")
				if up := condition(st, substrate.CondUpgrade); up.Reason == substrate.ReasonUpgradeInProgress && strings.Contains(up.Message, "control plane") {
					hopped = true
					if st.State != c.want {
						t.Fatalf("during the control plane hop: state %s (%s), want %s", st.State, st.Message, c.want)
					}
				}
				if hopped && condition(st, substrate.CondUpgrade).Reason == substrate.ReasonVersionCurrent {
					break
				}
				e.clock.Advance(10 * time.Second)
			}
			if !hopped {
				t.Fatal("no control plane hop seen")
			}
		})
	}
}

// TestLogLinesHaveOneOfEachKey: every line the reconciler logs through a
// lifecycle (create, upgrade, teardown) is a JSON object that
// names each key once; a repeated key (the logger's own "message" given
// again as a field) leaves a reader with whichever copy its parser keeps.
func TestLogLinesHaveOneOfEachKey(t *testing.T) {
	e := newEnv(t, nil)
	e.applyStep(twoPools("1.33"))
	e.converge(10*time.Second, 40)
	e.applyStep(twoPools("1.34"))
	e.converge(10*time.Second, 120)
	e.applyStep(crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Left: true}}, Prune: true})
	e.converge(10*time.Second, 60)
	lines := strings.Split(strings.TrimSpace(e.logs.String()), "\n")
	if len(lines) < 5 {
		t.Fatalf("only %d log lines", len(lines))
	}
	for _, line := range lines {
		if key, ok := repeatedKey(line); ok {
			t.Fatalf("key %q twice in %s", key, line)
		}
	}
}

// repeatedKey finds a key named twice at the top of a JSON object.
func repeatedKey(line string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(line))
	if _, err := dec.Token(); err != nil {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		key, _ := tok.(string)
		if seen[key] {
			return key, true
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// TestUpgradeTakesEveryGeneration: a blue/green flavor's node pool after a
// replacement carries a generation in its name; an upgrade takes it with
// the others (it was left at the old minor while the Upgrade condition
// said the version was current).
func TestUpgradeTakesEveryGeneration(t *testing.T) {
	e := newEnv(t, nil)
	pool := func(v, machine string) crashtest.Step {
		return crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Version: v, Flavors: []crashtest.Flavor{
			{Name: "a", MachineType: machine, Nodes: 2, Replace: true}, {Name: "b", MachineType: "fake-cpu-8", Nodes: 1}}}}}
	}
	e.applyStep(pool("1.33", "fake-cpu-4"))
	e.converge(10*time.Second, 40)
	e.applyStep(pool("1.33", "fake-cpu-8"))
	e.converge(10*time.Second, 120)
	e.applyStep(pool("1.34", "fake-cpu-8"))
	e.converge(10*time.Second, 200)
	n := 0
	for _, c := range e.fake.Snapshot().Clusters {
		if c.Seeded {
			continue
		}
		for name, np := range c.NodePools {
			n++
			if !strings.HasPrefix(np.Version, "1.34") {
				t.Errorf("node pool %s runs %s after the upgrade to 1.34", name, np.Version)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d node pools, want 2", n)
	}
	if c := condition(e.status("gpu"), substrate.CondUpgrade); c.Reason != substrate.ReasonVersionCurrent {
		t.Fatalf("Upgrade condition %+v", c)
	}
}
