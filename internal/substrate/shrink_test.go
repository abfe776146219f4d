package substrate_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/providers/fake"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// shrinker is the in-cluster half with a scale-down's choice, standing in
// for the drain room (tested on a real control plane in incluster): it
// chooses the lowest-numbered nodes of the node pool, the opposite of
// the fake's own scale-in (which drops the highest), so that a removal of
// the wrong ones shows. Its choice outlives a restart of the reconciler,
// as the annotation on a Node does; blocked holds the drain.
type shrinker struct {
	*daemon
	mu        sync.Mutex
	blocked   bool
	asked     []substrate.DrainAsk
	chosen    map[string][]string
	ever      map[string]bool
	undrained []string
}

func newShrinker() *shrinker {
	return &shrinker{daemon: &daemon{}, chosen: map[string][]string{}, ever: map[string]bool{}}
}

func (s *shrinker) Drain(_ context.Context, _ substrate.Target, ask substrate.DrainAsk) (substrate.DrainReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, ask)
	if ask.Shrink == nil {
		return substrate.DrainReport{Finished: !s.blocked}, nil
	}
	var ids []string
	for _, c := range s.env.fake.Snapshot().Clusters {
		if np, ok := c.NodePools[ask.NodePool]; ok {
			ids = np.ProviderIDs(c.Name)
		}
	}
	go_ := max(0, len(ids)-ask.Shrink.Keep)
	if have := s.chosen[ask.NodePool]; len(have) != go_ {
		s.chosen[ask.NodePool] = slices.Clone(ids[:go_])
		for _, id := range ids[:go_] {
			s.ever[id] = true
		}
	}
	if s.blocked {
		return substrate.DrainReport{Blocked: true, Message: "drain blocked by pod ml/train on n0 (GPU job, since 2026-06-01T12:00:00Z)"}, nil
	}
	out := slices.Clone(s.chosen[ask.NodePool])
	slices.Sort(out)
	return substrate.DrainReport{Finished: true, ProviderIDs: out}, nil
}

func (s *shrinker) Undrain(_ context.Context, _ substrate.Target, nodePool string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.undrained = append(s.undrained, nodePool)
	delete(s.chosen, nodePool)
	return nil
}

func (s *shrinker) hold(b bool) {
	s.mu.Lock()
	s.blocked = b
	s.mu.Unlock()
}

// nodesOf are the node pool's nodes at the fake, by providerID.
func (e *env) nodesOf(suffix string) []string {
	for _, c := range e.fake.Snapshot().Clusters {
		for name, np := range c.NodePools {
			if strings.HasSuffix(name, suffix) {
				return np.ProviderIDs(c.Name)
			}
		}
	}
	return nil
}

// opsOf are the journal's operations of one step.
func (e *env) opsOf(step string) []state.JournalOp {
	e.t.Helper()
	var out []state.JournalOp
	if err := e.store.View(func(tx *state.Tx) error {
		ops, err := tx.JournalOps("")
		for _, op := range ops {
			if op.Step == step {
				out = append(out, op)
			}
		}
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestShrinkDrainsTheChosenNodesThenRemovesThem: a node pool made smaller,
// with a drainer and a provider that removes chosen nodes, drains the
// Nodes the in-cluster half chose (asked with the pool's budget and the
// drain settings, and how many Nodes stay) and removes exactly them in one
// journaled removeNodes, once the drain finished; no resize is sent. While
// the drain is held the substrate says DrainBlocked with the blocker and
// sends nothing.
func TestShrinkDrainsTheChosenNodesThenRemovesThem(t *testing.T) {
	s := newShrinker()
	e := newEnv(t, func(o *substrate.Options) { o.InCluster = s })
	s.env = e
	doc := func(flavors ...crashtest.Flavor) string {
		return strings.Replace(strings.Replace(crashtest.Document(crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: flavors}}}),
			`"flavors":[`, `"drain":{"timeout":"2h","then":"wait"},"flavors":[`, 1),
			`"substrate":`, `"disruptionBudget":0.5,"substrate":`, 1)
	}
	l4 := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 4}
	e.apply(doc(l4), false)
	e.converge(10*time.Second, 40)
	before := e.nodesOf("-l4")
	if len(before) != 4 {
		t.Fatalf("nodes before: %v", before)
	}

	s.hold(true)
	l4.Nodes = 1
	e.apply(doc(l4), false)
	for range 10 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	if n, r := e.fake.Calls("RemoveNodes"), e.fake.Calls("ResizeNodePool"); n != 0 || r != 0 {
		t.Fatalf("while the drain is held: %d removals, %d resizes", n, r)
	}
	st := e.status("gpu")
	held := false
	for _, c := range st.Conditions {
		held = held || c.Type == substrate.CondNodePools && c.Reason == substrate.ReasonDrainBlocked && strings.Contains(c.Message, "pod ml/train on n0 (GPU job")
	}
	if !held {
		t.Fatalf("status while held: %s %+v", st.Message, st.Conditions)
	}
	a := s.asked[len(s.asked)-1]
	if !strings.HasSuffix(a.NodePool, "-l4") || a.Shrink == nil || a.Shrink.Keep != 1 || a.Budget == nil || *a.Budget != 0.5 || a.Timeout != 2*time.Hour || a.Force {
		t.Fatalf("drain asked %+v (shrink %+v): want the l4 node pool keeping 1, budget 0.5, 2h, wait", a, a.Shrink)
	}

	s.hold(false)
	e.converge(10*time.Second, 40)
	if n, r := e.fake.Calls("RemoveNodes"), e.fake.Calls("ResizeNodePool"); n != 1 || r != 0 {
		t.Fatalf("after the drain: %d removals, %d resizes; want 1 and 0", n, r)
	}
	if got := e.nodesOf("-l4"); !slices.Equal(got, before[3:]) {
		t.Fatalf("nodes left: %v, want %v (the chosen %v removed)", got, before[3:], before[:3])
	}
	ops := e.opsOf("removeNodes")
	if len(ops) != 1 || ops[0].State != state.Succeeded {
		t.Fatalf("removeNodes operations: %+v", ops)
	}
	var req struct {
		ProviderIDs []string        `json:"providerIDs"`
		Size        *providers.Size `json:"size"`
	}
	if err := json.Unmarshal(ops[0].Request, &req); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(req.ProviderIDs, before[:3]) || req.Size == nil || req.Size.NodeCount != 1 {
		t.Fatalf("removeNodes journaled %+v", req)
	}
	e.check(crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{l4}}}, Drained: true})
	if len(s.undrained) != 0 {
		t.Fatalf("a removal that went through let go of its nodes: %v", s.undrained)
	}
}

// TestShrinkTakenBackLetsGoOfItsNodes: a shrink whose size is put back
// before its drain finished removes nothing and uncordons what it
// cordoned (Undrain), once.
func TestShrinkTakenBackLetsGoOfItsNodes(t *testing.T) {
	s := newShrinker()
	e := newEnv(t, func(o *substrate.Options) { o.InCluster = s })
	s.env = e
	l4 := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 3}
	step := func(f crashtest.Flavor) crashtest.Step {
		return crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{f}}}}
	}
	e.applyStep(step(l4))
	e.converge(10*time.Second, 40)
	s.hold(true)
	e.applyStep(step(with(l4, 1)))
	for range 5 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	if len(s.chosen) != 1 {
		t.Fatalf("no choice was made: %v", s.asked)
	}
	e.applyStep(step(l4))
	e.converge(10*time.Second, 40)
	for range 3 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Minute)
	}
	if n := e.fake.Calls("RemoveNodes"); n != 0 || len(e.nodesOf("-l4")) != 3 {
		t.Fatalf("taken back: %d removals, nodes %v", n, e.nodesOf("-l4"))
	}
	if len(s.undrained) != 1 || !strings.HasSuffix(s.undrained[0], "-l4") || len(s.chosen) != 0 {
		t.Fatalf("undrained %v, choice left %v: want the l4 node pool let go of once", s.undrained, s.chosen)
	}
}

// noRemover is a provider without NodeRemover.
type noRemover struct{ substrate.Provider }

// TestShrinkWithoutNodeRemoverResizes: with a drainer but a provider that
// cannot remove chosen nodes, a shrink is a resize (the provider chooses),
// as before, and nothing is drained for it.
func TestShrinkWithoutNodeRemoverResizes(t *testing.T) {
	s := newShrinker()
	e := newEnv(t, func(o *substrate.Options) {
		o.InCluster = s
		o.Providers["fake"] = noRemover{o.Providers["fake"]}
	})
	s.env = e
	l4 := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 3}
	step := func(f crashtest.Flavor) crashtest.Step {
		return crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: []crashtest.Flavor{f}}}}
	}
	e.applyStep(step(l4))
	e.converge(10*time.Second, 40)
	before := e.nodesOf("-l4")
	s.hold(true)
	e.applyStep(step(with(l4, 1)))
	e.converge(10*time.Second, 40)
	if n, r := e.fake.Calls("RemoveNodes"), e.fake.Calls("ResizeNodePool"); n != 0 || r != 1 {
		t.Fatalf("%d removals, %d resizes; want 0 and 1", n, r)
	}
	if got := e.nodesOf("-l4"); !slices.Equal(got, before[:1]) {
		t.Fatalf("nodes left %v, want the provider's choice %v", got, before[:1])
	}
	for _, a := range s.asked {
		if a.Shrink != nil {
			t.Fatalf("a drain was asked for the shrink: %+v", a)
		}
	}
}

func with(f crashtest.Flavor, nodes int) crashtest.Flavor { f.Nodes = nodes; return f }

// scenarioEnv is newEnv for a campaign scenario: a drained one runs with
// a shrinker as its in-cluster half (nil otherwise), which outlives the
// reconciler's restarts as Nodes and their annotations do.
func scenarioEnv(t testing.TB, s crashtest.Scenario, tune func(*substrate.Options)) (*env, *shrinker) {
	var sh *shrinker
	if s.Drained() {
		sh = newShrinker()
	}
	e := newEnv(t, func(o *substrate.Options) {
		tune(o)
		if sh != nil {
			o.InCluster = sh
		}
	})
	if sh != nil {
		sh.env = e
	}
	return e, sh
}

// onlyChosenRemoved says ("" for nothing) where a drained scenario removed
// a node the shrinker never chose, or kept one it chose last.
func (s *shrinker) onlyChosenRemoved(e *env) string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range e.fake.Snapshot().Clusters {
		for name, np := range c.NodePools {
			left := np.ProviderIDs(c.Name)
			for _, n := range np.Removed {
				if id := fake.ProviderID(c.Name, name, n); !s.ever[id] {
					return "node " + id + " was removed and never chosen"
				}
			}
			for _, id := range s.chosen[name] {
				if slices.Contains(left, id) {
					return "node " + id + " was chosen and is still there"
				}
			}
		}
	}
	return ""
}

// TestShrinkDrainStartsInAWindowAndFinishesAfterIt: a drained scale-down
// is a disruptive step: its drain is first asked inside a maintenance
// window (outside one nothing is asked or sent, the substrate says
// OutsideWindow); a drain held past the window's end goes on, and the
// removal is sent once it finished, after the window closed.
func TestShrinkDrainStartsInAWindowAndFinishesAfterIt(t *testing.T) {
	s := newShrinker()
	e := newEnv(t, func(o *substrate.Options) { o.InCluster = s })
	s.env = e
	doc := windowDoc(`{"days":["tue"],"start":"00:00","duration":"4h"}`)
	l4 := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 3}
	e.apply(doc(l4), false)
	e.converge(10*time.Second, 40)
	s.hold(true)
	e.apply(doc(with(l4, 2)), false)
	for range 12 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	asked := func() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.asked) }
	if n, r := asked(), e.fake.Calls("RemoveNodes"); n != 0 || r != 0 {
		t.Fatalf("outside the window: %d drain passes, %d removals", n, r)
	}
	if st := e.status("gpu"); !strings.Contains(st.Message, "waits for a maintenance window") {
		t.Fatalf("outside the window the status says %q", st.Message)
	}
	opens := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	e.clock.Advance(opens.Sub(e.clock.Now()))
	for e.clock.Now().Before(opens.Add(5 * time.Hour)) {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Minute)
	}
	if n, r := asked(), e.fake.Calls("RemoveNodes"); n == 0 || r != 0 {
		t.Fatalf("in the window with the drain held: %d drain passes, %d removals", n, r)
	}
	s.hold(false)
	e.converge(10*time.Second, 40)
	if r := e.fake.Calls("RemoveNodes"); r != 1 || !e.clock.Now().After(opens.Add(4*time.Hour)) {
		t.Fatalf("%d removals (at %s), want 1 after the window closed", r, e.clock.Now())
	}
	if got := e.nodesOf("-l4"); len(got) != 2 || slices.Contains(got, s.chosen[e.poolName("-l4")][0]) {
		t.Fatalf("nodes left %v, chosen %v", got, s.chosen)
	}
}

// poolName is the name of the node pool whose name ends in suffix.
func (e *env) poolName(suffix string) string {
	for _, c := range e.fake.Snapshot().Clusters {
		for name := range c.NodePools {
			if strings.HasSuffix(name, suffix) {
				return name
			}
		}
	}
	return ""
}
