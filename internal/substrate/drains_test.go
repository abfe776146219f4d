package substrate_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// drainer is the in-cluster half with a drain whose blockers the test
// holds and lets go (the drain room itself is tested on a real control
// plane in internal/substrate/drain and incluster).
type drainer struct {
	*daemon
	mu      sync.Mutex
	blocked bool
	calls   []time.Time
	asked   []substrate.DrainAsk
}

func (d *drainer) Drain(_ context.Context, _ substrate.Target, ask substrate.DrainAsk) (substrate.DrainReport, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, d.env.clock.Now())
	d.asked = append(d.asked, ask)
	if d.blocked {
		return substrate.DrainReport{Blocked: true, Message: "drain blocked by pod ml/train on n1 (GPU job, since 2026-06-02T00:00:00Z)"}, nil
	}
	return substrate.DrainReport{Finished: true}, nil
}

func (d *drainer) Undrain(context.Context, substrate.Target, string) error { return nil }

func (d *drainer) drains() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}

// TestDrainStartsInAWindowAndFinishesAfterIt: the drain before a removed
// flavor's node pool is deleted is a disruptive step: it starts only once
// a window opens; a drain held past the window's end goes on (it began);
// the delete is sent only after the drain finished, once. The drain is
// asked with the substrate's drain settings and the pool's budget.
func TestDrainStartsInAWindowAndFinishesAfterIt(t *testing.T) {
	d := &drainer{daemon: &daemon{}, blocked: true}
	e := newEnv(t, func(o *substrate.Options) { o.InCluster = d })
	d.env = e
	window := windowDoc(`{"days":["tue"],"start":"00:00","duration":"4h"}`)
	doc := func(flavors ...crashtest.Flavor) string {
		return strings.Replace(strings.Replace(window(flavors...), `"flavors":[`, `"drain":{"timeout":"1h","then":"force"},"flavors":[`, 1),
			`"substrate":`, `"disruptionBudget":0.5,"substrate":`, 1)
	}
	h100 := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}
	l4 := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 2}
	e.apply(doc(h100, l4), false)
	e.converge(10*time.Second, 40)

	e.apply(doc(h100), true)
	for range 12 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	if n, del := d.drains(), e.fake.Calls("DeleteNodePool"); n != 0 || del != 0 {
		t.Fatalf("outside the window: %d drain passes, %d deletes", n, del)
	}

	opens := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	e.clock.Advance(opens.Sub(e.clock.Now()))
	// Into the window and past its end, the drain held.
	for e.clock.Now().Before(opens.Add(5 * time.Hour)) {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Minute)
	}
	if n, del := d.drains(), e.fake.Calls("DeleteNodePool"); n == 0 || del != 0 || d.calls[0].Before(opens) {
		t.Fatalf("in the window with the drain held: %d drain passes (first at %v), %d deletes", n, d.calls, del)
	}
	if last := d.calls[len(d.calls)-1]; !last.After(opens.Add(4 * time.Hour)) {
		t.Fatalf("the drain was not looked at after the window closed (last at %s)", last)
	}
	st := e.status("gpu")
	held := false
	for _, c := range st.Conditions {
		held = held || c.Type == substrate.CondNodePools && c.Status == substrate.ConditionUnknown && c.Reason == substrate.ReasonDrainBlocked &&
			strings.Contains(c.Message, "pod ml/train on n1 (GPU job, since 2026-06-02T00:00:00Z)")
	}
	if !held || !strings.Contains(st.Message, "pod ml/train") {
		t.Fatalf("status while held: %s %+v", st.Message, st.Conditions)
	}
	a := d.asked[0]
	if !strings.HasSuffix(a.NodePool, "-l4") || a.Budget == nil || *a.Budget != 0.5 || a.Timeout != time.Hour || !a.Force {
		t.Fatalf("drain asked %+v: want the l4 node pool, budget 0.5, 1h, force", a)
	}

	d.mu.Lock()
	d.blocked = false
	d.mu.Unlock()
	e.converge(10*time.Second, 40)
	if del := e.fake.Calls("DeleteNodePool"); del != 1 {
		t.Fatalf("%d deletes after the drain finished, want 1", del)
	}
}
