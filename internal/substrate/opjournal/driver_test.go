package opjournal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"
)

// answer is one scripted answer of the provider: what a call or a
// read-back returns.
type answer struct {
	obs opjournal.Observed[string]
	err error
}

// script is a provider that answers calls and read-backs from two queues,
// and fails the test when asked more than it was scripted for.
type script struct {
	t              *testing.T
	calls, reads   []answer
	called, reread int
}

func (s *script) Call(*state.JournalOp) (opjournal.Observed[string], error) {
	if s.called >= len(s.calls) {
		s.t.Fatalf("call %d was not scripted", s.called+1)
	}
	a := s.calls[s.called]
	s.called++
	return a.obs, a.err
}

func (s *script) ReadBack(*state.JournalOp) (opjournal.Observed[string], error) {
	if s.reread >= len(s.reads) {
		s.t.Fatalf("read-back %d was not scripted", s.reread+1)
	}
	a := s.reads[s.reread]
	s.reread++
	return a.obs, a.err
}

func (s *script) Identified(_ *state.JournalOp, obs opjournal.Observed[string]) bool {
	return obs.Value != ""
}

func (s *script) Result(obs opjournal.Observed[string]) json.RawMessage {
	return json.RawMessage(fmt.Sprintf("%q", obs.Value))
}

func (s *script) OnAccept(*state.JournalOp, opjournal.Observed[string]) func(*state.Tx) error {
	return nil
}

func (s *script) Progress(obs opjournal.Observed[string]) string {
	if obs.Value == "" {
		return ""
	}
	return " (" + obs.Value + ")"
}

// memJournal applies transitions in memory through the state machine,
// and keeps each one and each point passed; crashAt stops the drive at a
// point of that kind.
type memJournal struct {
	moves   []string
	points  []opjournal.PointKind
	crashAt opjournal.PointKind
}

var errCrash = errors.New("crashed")

func (j *memJournal) Move(op *state.JournalOp, ev opjournal.Event, change func(*state.JournalOp), _ func(*state.Tx) error) error {
	to, err := opjournal.Next(op.State, ev)
	if err != nil {
		return err
	}
	next := *op
	if change != nil {
		change(&next)
	}
	next.State = to
	j.moves = append(j.moves, fmt.Sprintf("%s-%s->%s", op.State, ev, to))
	*op = next
	return j.At(opjournal.Point{Kind: opjournal.PointTransition, Op: op.Key})
}

func (j *memJournal) At(p opjournal.Point) error {
	j.points = append(j.points, p.Kind)
	if p.Kind == j.crashAt {
		return errCrash
	}
	return nil
}

func (j *memJournal) Alive() error { return nil }

var t0 = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

func drive(t *testing.T, op *state.JournalOp, s *script, j *memJournal, del, stale bool) (opjournal.Outcome[string], error) {
	s.t = t
	return opjournal.Drive(op, opjournal.Inputs[string]{Ctx: context.Background(), Now: func() time.Time { return t0 }, Poll: 10 * time.Second,
		Journal: j, Calls: s, Describe: "making thing x", Delete: del, Stale: stale})
}

func newOp(st state.JournalState) *state.JournalOp {
	return &state.JournalOp{Key: "pool/make/x", Step: "make", Object: "x", State: st}
}

func maybeErr() error {
	return &providers.Error{Op: "Make", Class: providers.Unavailable, SideEffect: providers.Maybe, Message: "connection reset"}
}

// TestDrive drives one operation per case against a scripted provider:
// the transitions it makes, in order, and where it leaves the operation.
func TestDrive(t *testing.T) {
	for _, tc := range []struct {
		name        string
		from        state.JournalState
		del, stale  bool
		calls       []answer
		reads       []answer
		moves       []string
		result      opjournal.Result
		doubt       bool
		message     string // a part of the outcome's message
		nextAttempt time.Duration
	}{
		{name: "a call taken, then done", from: state.Journaled,
			calls: []answer{{obs: opjournal.Observed[string]{Value: "id-1"}}},
			reads: []answer{{obs: opjournal.Observed[string]{Phase: opjournal.Finished, Value: "running"}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-accept->accepted", "accepted-succeed->succeeded"}, result: opjournal.Done},
		{name: "work in progress says so and when to look again", from: state.Journaled,
			calls: []answer{{obs: opjournal.Observed[string]{Value: "id-1"}}},
			reads: []answer{{obs: opjournal.Observed[string]{Phase: opjournal.InProgress, Value: "provisioning"}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-accept->accepted"}, result: opjournal.Wait, message: "making thing x (provisioning)"},
		{name: "a lost answer is read back, found absent, and called again", from: state.Journaled,
			calls: []answer{{err: maybeErr()}, {obs: opjournal.Observed[string]{Value: "id-1"}}},
			reads: []answer{{obs: opjournal.Observed[string]{Phase: opjournal.Absent}}, {obs: opjournal.Observed[string]{Phase: opjournal.Finished}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-ambiguous->verifying", "verifying-retry->journaled",
				"journaled-begin->in_flight", "in_flight-accept->accepted", "accepted-succeed->succeeded"}, result: opjournal.Done},
		{name: "an answer without the object is read back by name", from: state.Journaled,
			calls: []answer{{obs: opjournal.Observed[string]{}}},
			reads: []answer{{obs: opjournal.Observed[string]{Phase: opjournal.Finished, Value: "id-1"}}, {obs: opjournal.Observed[string]{Phase: opjournal.Finished, Value: "id-1"}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-ambiguous->verifying", "verifying-accept->accepted", "accepted-succeed->succeeded"}, result: opjournal.Done},
		{name: "found in flight after a crash: its outcome is read back", from: state.InFlight,
			reads: []answer{{obs: opjournal.Observed[string]{Phase: opjournal.Finished}}, {obs: opjournal.Observed[string]{Phase: opjournal.Finished}}},
			moves: []string{"in_flight-ambiguous->verifying", "verifying-accept->accepted", "accepted-succeed->succeeded"}, result: opjournal.Done},
		{name: "a throttle waits what the provider asked", from: state.Journaled,
			calls: []answer{{err: &providers.Error{Class: providers.Throttled, SideEffect: providers.None, RetryAfter: time.Minute, Message: "slow down"}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-retry->journaled"}, result: opjournal.Wait,
			message: "making thing x: slow down; trying again at 2026-12-06T09:01:00Z (attempt 2)", nextAttempt: time.Minute},
		{name: "a terminal refusal is tried again on the long schedule", from: state.Journaled,
			calls: []answer{{err: &providers.Error{Class: providers.Terminal, SideEffect: providers.None, Message: "permission denied"}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-retry->journaled"}, result: opjournal.Refused,
			message: "the provider refused: permission denied", nextAttempt: opjournal.RefusalWait(1)},
		{name: "an invalid request fails for good", from: state.Journaled,
			calls: []answer{{err: &providers.Error{Class: providers.Invalid, SideEffect: providers.None, Message: "bad shape", Reason: "shapeChange"}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-refuse->failed"}, result: opjournal.Failed, message: "give the flavor a new name"},
		{name: "a delete of what is gone is done", from: state.Journaled, del: true,
			calls: []answer{{err: providers.NotFoundf("Delete", "gone")}},
			reads: []answer{{obs: opjournal.Observed[string]{Phase: opjournal.Finished}}},
			moves: []string{"journaled-begin->in_flight", "in_flight-accept->accepted", "accepted-succeed->succeeded"}, result: opjournal.Done},
		{name: "a call whose object is gone doubts", from: state.Journaled,
			calls: []answer{{err: providers.NotFoundf("Make", "cluster gone")}},
			moves: []string{"journaled-begin->in_flight", "in_flight-retry->journaled"}, result: opjournal.Wait, doubt: true, nextAttempt: opjournal.RetryWait(1)},
		{name: "a read-back that says the object is gone doubts", from: state.Accepted,
			reads: []answer{{obs: opjournal.Observed[string]{Phase: opjournal.FailedThere, Message: "x is gone", Doubt: true}}},
			moves: []string{"accepted-refuse->failed"}, result: opjournal.Failed, doubt: true, message: "x is gone"},
		{name: "a failed read-back is deferred", from: state.Verifying,
			reads: []answer{{err: &providers.Error{Class: providers.Unavailable, SideEffect: providers.None, Message: "503"}}},
			moves: []string{"verifying-defer->verifying"}, result: opjournal.Wait, message: "the outcome is not known (reading it back: 503)", nextAttempt: opjournal.RetryWait(1)},
		{name: "a stale operation not yet called is abandoned", from: state.Journaled, stale: true,
			moves: []string{"journaled-abandon->failed"}, result: opjournal.Superseded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, s, j := newOp(tc.from), &script{calls: tc.calls, reads: tc.reads}, &memJournal{}
			out, err := drive(t, op, s, j, tc.del, tc.stale)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(j.moves, tc.moves) {
				t.Errorf("moves %v, want %v", j.moves, tc.moves)
			}
			if out.Result != tc.result || out.Doubt != tc.doubt || !strings.Contains(out.Message, tc.message) {
				t.Errorf("outcome %+v, want result %d doubt %v and a message with %q", out, tc.result, tc.doubt, tc.message)
			}
			if s.called != len(tc.calls) || s.reread != len(tc.reads) {
				t.Errorf("%d calls and %d read-backs made, %d and %d scripted", s.called, s.reread, len(tc.calls), len(tc.reads))
			}
			if tc.nextAttempt != 0 && op.NextAttemptAt != t0.Add(tc.nextAttempt).UnixMilli() {
				t.Errorf("next attempt at %s, want %s", time.UnixMilli(op.NextAttemptAt).UTC(), t0.Add(tc.nextAttempt))
			}
		})
	}
}

// TestDriveStopsAtACrashPoint: a crash after the call leaves the operation
// in flight with nothing recorded of the answer; the next drive reads it
// back instead of calling again.
func TestDriveStopsAtACrashPoint(t *testing.T) {
	op, j := newOp(state.Journaled), &memJournal{crashAt: opjournal.PointAfterCall}
	s := &script{calls: []answer{{obs: opjournal.Observed[string]{Value: "id-1"}}}}
	if _, err := drive(t, op, s, j, false, false); !errors.Is(err, errCrash) {
		t.Fatalf("err %v, want the crash", err)
	}
	if op.State != state.InFlight || s.called != 1 {
		t.Fatalf("after the crash: %s, %d calls", op.State, s.called)
	}
	want := []opjournal.PointKind{opjournal.PointTransition, opjournal.PointBeforeCall, opjournal.PointAfterCall}
	if !slices.Equal(j.points, want) {
		t.Fatalf("points %v, want %v", j.points, want)
	}
	j.crashAt = ""
	s.reads = []answer{{obs: opjournal.Observed[string]{Phase: opjournal.Finished}}, {obs: opjournal.Observed[string]{Phase: opjournal.Finished}}}
	out, err := drive(t, op, s, j, false, false)
	if err != nil || out.Result != opjournal.Done || s.called != 1 {
		t.Fatalf("after the restart: %+v %v, %d calls", out, err, s.called)
	}
}

// TestNarrowingRefusesWhatAStepNeverTakes: the narrowed machine refuses an
// event the table allows but the step never takes, and lists only the
// transitions left.
func TestNarrowingRefusesWhatAStepNeverTakes(t *testing.T) {
	n := opjournal.Narrowing{"delete": {state.Accepted: {opjournal.Refuse, opjournal.Abandon}}}
	if _, err := n.Next("delete", state.Accepted, opjournal.Refuse); !errors.Is(err, opjournal.ErrIllegal) {
		t.Fatalf("refuse of an accepted delete: %v, want ErrIllegal", err)
	}
	if to, err := n.Next("make", state.Accepted, opjournal.Refuse); err != nil || to != state.Failed {
		t.Fatalf("refuse of an accepted make: %s %v", to, err)
	}
	if slices.Contains(n.Transitions("delete"), opjournal.Transition{From: state.Accepted, To: state.Failed}) {
		t.Fatalf("accepted->failed listed for delete: %v", n.Transitions("delete"))
	}
}
