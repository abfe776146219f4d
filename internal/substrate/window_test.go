package substrate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"

	"github.com/fleet-agent/fleet-agent/internal/substrate"
	"github.com/fleet-agent/fleet-agent/internal/substrate/crashtest"
)

// TestDisruptiveStepsWaitForAWindow: with maintenance windows, a node pool
// made smaller and the node pool of a removed flavor wait until a window
// opens (NodePools Unknown OutsideWindow, saying when), while a create and a
// growth go on at once; inside the window both are done. The clock starts
// on a Monday at 12:00 UTC; the window is Tuesdays 00:00-04:00 UTC.
func TestDisruptiveStepsWaitForAWindow(t *testing.T) {
	e := newEnv(t, nil)
	doc := windowDoc(`{"days":["tue"],"start":"00:00","duration":"4h"}`)
	big := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 3}
	spot := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 1}
	e.apply(doc(big, spot), false)
	e.converge(10*time.Second, 40) // creates do not wait

	small := big
	small.Nodes = 1
	more := crashtest.Flavor{Name: "cpu", MachineType: "fake-cpu-4", Nodes: 2}
	e.apply(doc(small, more), false)
	for range 12 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	if n, d := e.fake.Calls("ResizeNodePool"), e.fake.Calls("DeleteNodePool"); n != 0 || d != 0 {
		t.Fatalf("outside the window: %d resizes, %d deletes", n, d)
	}
	st := e.status("gpu")
	var pools *substrate.StatusCondition
	for i, c := range st.Conditions {
		if c.Type == "NodePools" {
			pools = &st.Conditions[i]
		}
	}
	if pools == nil || pools.Status != "Unknown" || pools.Reason != substrate.ReasonOutsideWindow ||
		!strings.Contains(pools.Message, "from 3 to 1 nodes") || !strings.Contains(pools.Message, "the next opens at 2026-06-02T00:00:00Z") {
		t.Fatalf("conditions %+v", st.Conditions)
	}
	if !strings.Contains(st.Message, "waits for a maintenance window (tue 00:00 for 4h (UTC))") {
		t.Errorf("message %q", st.Message)
	}
	var made bool
	for _, np := range st.NodePools {
		made = made || np.Flavor == "cpu" && np.Nodes == 2
	}
	if !made {
		t.Fatalf("the new flavor's node pool waited too: %+v", st.NodePools)
	}

	e.clock.Advance(time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC).Sub(e.clock.Now()))
	e.converge(10*time.Second, 40)
	if n, d := e.fake.Calls("ResizeNodePool"), e.fake.Calls("DeleteNodePool"); n != 1 || d != 1 {
		t.Fatalf("inside the window: %d resizes, %d deletes, want one each", n, d)
	}
	if st := e.status("gpu"); strings.Contains(st.Message, "maintenance window") {
		t.Fatalf("after the window's steps: %s", st.Message)
	}
}

// TestSweepOfASubstrateWaitingForAWindow: a substrate with both a node pool
// of ours no flavor wants (its delete waits) and one whose size differs
// (its shrink waits) is swept without harm, at start and on schedule, and
// both are counted (found from outside: the sweep reused one log event for
// two lines and panicked, and so did every restart).
func TestSweepOfASubstrateWaitingForAWindow(t *testing.T) {
	e := newEnv(t, nil)
	doc := windowDoc(`{"days":["tue"],"start":"00:00","duration":"4h"}`)
	big := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 3}
	spot := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 1}
	e.apply(doc(big, spot), false)
	e.converge(10*time.Second, 40)
	small := big
	small.Nodes = 1
	e.apply(doc(small), false)
	for range 3 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	rep, err := e.rec.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.NodePoolOrphans != 1 || rep.Moved != 1 {
		t.Fatalf("sweep report %+v, want one orphan node pool and one moved", rep)
	}
}

// TestARefusedDeleteWaitsForTheNextWindow: a delete refused inside a window
// did nothing at the provider; once the window has closed, its retry waits
// for the next window instead of landing whenever the retry schedule says
// (found from outside: a refused delete went through at night).
func TestARefusedDeleteWaitsForTheNextWindow(t *testing.T) {
	e := newEnv(t, nil)
	// Every day 12:00-12:30 UTC; the clock starts at 12:00.
	doc := windowDoc(`{"days":["mon","tue","wed","thu","fri","sat","sun"],"start":"12:00","duration":"30m"}`)
	big := crashtest.Flavor{Name: "h100", MachineType: "fake-h100x8", Nodes: 1}
	spot := crashtest.Flavor{Name: "l4", MachineType: "fake-l4x1", Nodes: 1}
	e.apply(doc(big, spot), false)
	e.converge(10*time.Second, 40)
	if err := e.fake.InjectFault(fakeFault("DeleteNodePool", 3, providers.Terminal, "the account lost the permission to delete node pools")); err != nil {
		t.Fatal(err)
	}
	e.apply(doc(big), false)
	for e.fake.Calls("DeleteNodePool") == 0 {
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	// Refused three times: at the start, 5 and 15 minutes on (the retry
	// schedule), all inside the window; the fourth attempt would fall 35
	// minutes on, after the window closed: it waits.
	for range 90 {
		e.clock.Advance(time.Minute)
		if err := e.rec.ReconcileOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.fake.Calls("DeleteNodePool"); n != 3 {
		t.Fatalf("%d delete calls by 90 minutes on, want the three refused inside the window", n)
	}
	if st := e.status("gpu"); !strings.Contains(st.Message, "waits for a maintenance window") {
		t.Fatalf("status %s: %s", st.State, st.Message)
	}
	e.clock.Advance(time.Date(2026, 6, 2, 12, 0, 0, 0, time.UTC).Sub(e.clock.Now()))
	e.converge(10*time.Second, 40)
	if n := e.fake.Calls("DeleteNodePool"); n != 4 {
		t.Fatalf("%d delete calls after the next window opened, want 4", n)
	}
}

// windowDoc makes documents of pool gpu with one maintenance window and the
// flavors given.
func windowDoc(window string) func(flavors ...crashtest.Flavor) string {
	return func(flavors ...crashtest.Flavor) string {
		return strings.Replace(crashtest.Document(crashtest.Step{Pools: []crashtest.Pool{{Name: "gpu", Flavors: flavors}}}),
			`"flavors":[`, `"maintenance":{"windows":[`+window+`]},"flavors":[`, 1)
	}
}
