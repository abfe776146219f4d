package substrate

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// TestStateMachine checks every state against every event, written out
// here rather than read from the table it tests: "" is illegal.
func TestStateMachine(t *testing.T) {
	const (
		J, I, A, S, F, V = state.Journaled, state.InFlight, state.Accepted, state.Succeeded, state.Failed, state.Verifying
		x                = state.JournalState("")
	)
	want := map[state.JournalState]map[Event]state.JournalState{
		//           Begin      Accept     Ambiguous  Retry      Refuse     Succeed    Defer      Abandon
		J: {Begin: I, Accept: x, Ambiguous: x, Retry: x, Refuse: x, Succeed: x, Defer: J, Abandon: F},
		I: {Begin: x, Accept: A, Ambiguous: V, Retry: J, Refuse: F, Succeed: x, Defer: x, Abandon: x},
		V: {Begin: x, Accept: A, Ambiguous: x, Retry: J, Refuse: F, Succeed: x, Defer: V, Abandon: F},
		A: {Begin: x, Accept: x, Ambiguous: x, Retry: J, Refuse: F, Succeed: S, Defer: A, Abandon: F},
		S: {Begin: x, Accept: x, Ambiguous: x, Retry: x, Refuse: x, Succeed: x, Defer: x, Abandon: x},
		F: {Begin: x, Accept: x, Ambiguous: x, Retry: x, Refuse: x, Succeed: x, Defer: x, Abandon: x},
	}
	if len(want) != len(state.JournalStates) {
		t.Fatalf("the table covers %d of %d states", len(want), len(state.JournalStates))
	}
	for _, from := range state.JournalStates {
		row := want[from]
		if len(row) != len(Events) {
			t.Fatalf("the row of %s covers %d of %d events", from, len(row), len(Events))
		}
		for _, ev := range Events {
			to, err := Next(from, ev)
			exp := row[ev]
			switch {
			case exp == x && (err == nil || !errors.Is(err, ErrIllegal)):
				t.Errorf("%s -%s-> %s: want illegal", from, ev, to)
			case exp != x && (err != nil || to != exp):
				t.Errorf("%s -%s-> %s (%v): want %s", from, ev, to, err, exp)
			}
		}
	}
	if _, err := Next("lost", Begin); !errors.Is(err, ErrIllegal) {
		t.Errorf("an unknown state: %v", err)
	}
}

// TestMoveIsChecked: a transition is refused, and nothing written, when it
// is illegal or when the stored operation moved since it was read.
func TestMoveIsChecked(t *testing.T) {
	store, err := state.Open(filepath.Join(t.TempDir(), "fleet.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := New(Options{Store: store, Clock: clock.NewFake(time.Unix(1790000000, 0)), Log: zerolog.Nop()})
	p := &pass{r: r, ctx: t.Context(), ops: map[string]*state.JournalOp{},
		want: state.SubstrateWant{PoolID: "pool_x", Pool: "x", Generation: 1}}
	op, err := p.open(stepCreateCluster, "fa-x-x", 0, request{})
	if err != nil {
		t.Fatal(err)
	}
	if op.ClientToken != ClientToken(op.Key) || op.Key != "pool_x/createCluster/fa-x-x/g1" {
		t.Fatalf("op %+v", op)
	}
	if err := p.move(op, Succeed, nil, nil); !errors.Is(err, ErrIllegal) {
		t.Fatalf("journaled -succeed->: %v", err)
	}
	stale := *op
	if err := p.move(op, Begin, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.move(&stale, Begin, nil, nil); !errors.Is(err, state.ErrJournalConflict) {
		t.Fatalf("a move from a stale read: %v", err)
	}
	var got *state.JournalOp
	if err := store.View(func(tx *state.Tx) (err error) { got, err = tx.JournalOp(op.Key); return }); err != nil {
		t.Fatal(err)
	}
	if got.State != state.InFlight || got.Rev != 2 {
		t.Fatalf("stored %+v", got)
	}
	// Opening the same operation twice is refused: its key is its identity.
	if _, err := p.open(stepCreateCluster, "fa-x-x", 0, request{}); !errors.Is(err, state.ErrJournalConflict) {
		t.Fatalf("a second open: %v", err)
	}
}

// TestStepTransitions writes out, per step, the transitions its operations
// may make (the state machine narrowed per step), rather than reading them
// from the table it tests.
func TestStepTransitions(t *testing.T) {
	all := "journaled->in_flight journaled->journaled journaled->failed in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->journaled accepted->accepted"
	want := map[string]string{
		stepCreateCluster:       "journaled->in_flight journaled->failed in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->journaled accepted->accepted",
		stepCreateNodePool:      "journaled->in_flight journaled->failed in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->journaled accepted->accepted",
		stepUpdateNodePool:      "journaled->in_flight journaled->failed in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->accepted",
		stepResizeNodePool:      "journaled->in_flight journaled->failed in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->accepted",
		stepDeleteCluster:       "journaled->in_flight journaled->journaled journaled->failed in_flight->accepted in_flight->verifying in_flight->journaled verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->journaled accepted->accepted",
		stepDeleteNodePool:      "journaled->in_flight journaled->journaled in_flight->accepted in_flight->verifying in_flight->journaled verifying->accepted verifying->journaled verifying->verifying accepted->succeeded accepted->journaled accepted->accepted",
		stepUpgradeControlPlane: "journaled->in_flight in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->accepted",
		stepRemoveNodes:         "journaled->in_flight journaled->failed in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->accepted",
		stepUpgradeNodePool:     "journaled->in_flight in_flight->accepted in_flight->verifying in_flight->journaled in_flight->failed verifying->accepted verifying->journaled verifying->failed verifying->verifying accepted->succeeded accepted->failed accepted->accepted",
	}
	for _, step := range Steps {
		var got []string
		for _, tr := range StepTransitions(step) {
			got = append(got, tr.String())
		}
		w := strings.Fields(want[step])
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s:\n got %v\nwant %v", step, got, w)
		}
	}
	if got := StepTransitions("someStep"); len(got) != len(strings.Fields(all)) {
		t.Errorf("a step the narrowing does not name takes the whole table: %v", got)
	}
	// The narrowing refuses, per event: a delete refused for good, an
	// accepted delete abandoned.
	for _, c := range []struct {
		step string
		from state.JournalState
		ev   Event
	}{
		{stepDeleteCluster, state.InFlight, Refuse},
		{stepDeleteCluster, state.Accepted, Abandon},
		{stepDeleteNodePool, state.Journaled, Abandon},
		{stepResizeNodePool, state.Accepted, Retry},
		{stepCreateCluster, state.Journaled, Defer},
	} {
		if _, err := NextFor(c.step, c.from, c.ev); !errors.Is(err, ErrIllegal) {
			t.Errorf("%s %s -%s->: %v, want illegal", c.step, c.from, c.ev, err)
		}
	}
	if to, err := NextFor(stepDeleteCluster, state.Verifying, Abandon); err != nil || to != state.Failed {
		t.Errorf("a lost delete the document took back: %s %v", to, err)
	}
}
