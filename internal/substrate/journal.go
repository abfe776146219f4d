package substrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/substrate/opjournal"
)

// The journal's state machine and waits are opjournal's; these names are
// the substrate's own use of them.
type (
	Event      = opjournal.Event
	Transition = opjournal.Transition
)

// The events of the journal's state machine.
const (
	Begin     = opjournal.Begin
	Accept    = opjournal.Accept
	Ambiguous = opjournal.Ambiguous
	Retry     = opjournal.Retry
	Refuse    = opjournal.Refuse
	Succeed   = opjournal.Succeed
	Defer     = opjournal.Defer
	Abandon   = opjournal.Abandon
)

// Events lists every event.
var Events = opjournal.Events

// ErrIllegal is what Next returns for an event the state does not take.
var ErrIllegal = opjournal.ErrIllegal

// Next is the state an event takes an operation in state from to, or an
// error wrapping ErrIllegal.
func Next(from state.JournalState, ev Event) (state.JournalState, error) {
	return opjournal.Next(from, ev)
}

// notForStep narrows the state machine per step: the events of the table a
// step's operation never takes, by construction of the code that drives it.
// The checked machine (NextFor) refuses them, so that code that starts to
// make one fails loudly instead of wandering into a path no crash campaign
// has been through; and the exhaustive campaign fails when a transition a
// step does take is never crashed in.
var notForStep = opjournal.Narrowing{
	// A journaled operation is deferred only by settle, which drives the
	// deletes whose object a fresh read showed gone: a create or a change
	// is never deferred before its call.
	stepCreateCluster:  {state.Journaled: {Defer}},
	stepCreateNodePool: {state.Journaled: {Defer}},
	// The same; and an accepted change is never made again: its read-back
	// never finds it absent (a node pool gone fails it, a settled one is
	// done, one being deleted is still in progress).
	stepUpdateNodePool: {state.Journaled: {Defer}, state.Accepted: {Retry}},
	stepResizeNodePool: {state.Journaled: {Defer}, state.Accepted: {Retry}},
	// A removal of drained Nodes is a resize that names them: the same.
	stepRemoveNodes: {state.Journaled: {Defer}, state.Accepted: {Retry}},
	// A delete is never refused for good (every refusal is tried again on
	// the long schedule: a teardown is never given up), and one the
	// provider accepted is followed to its end: the decision was taken on
	// the labels the cluster then had, and the provider is deleting it.
	stepDeleteCluster: {state.InFlight: {Refuse}, state.Verifying: {Refuse}, state.Accepted: {Refuse, Abandon}},
	// A node pool's delete is never refused for good, nor abandoned: no
	// document takes a removed flavor's pool back (a flavor of the same
	// name makes a pool only once the delete is done), and a teardown
	// follows it.
	stepDeleteNodePool: {state.Journaled: {Abandon}, state.InFlight: {Refuse}, state.Verifying: {Refuse, Abandon}, state.Accepted: {Refuse, Abandon}},
	// An upgrade hop is never deferred before its call nor abandoned (a
	// hop in flight is finished whatever the document says meanwhile), and
	// an accepted one is never made again: settled below its minor, the
	// provider gave it up, and that fails it.
	stepUpgradeControlPlane: {state.Journaled: {Defer, Abandon}, state.Verifying: {Abandon}, state.Accepted: {Retry, Abandon}},
	stepUpgradeNodePool:     {state.Journaled: {Defer, Abandon}, state.Verifying: {Abandon}, state.Accepted: {Retry, Abandon}},
}

// NextFor is Next for an operation of step: also an error wrapping
// ErrIllegal for an event the step never takes from that state.
func NextFor(step string, from state.JournalState, ev Event) (state.JournalState, error) {
	return notForStep.Next(step, from, ev)
}

// StepTransitions lists the transitions (from -> to, any event) an
// operation of step may make between states it is found in, in a fixed
// order: what the exhaustive campaign must crash in.
func StepTransitions(step string) []Transition { return notForStep.Transitions(step) }

// The waits of the retry authority (opjournal's).
const (
	RetryBase   = opjournal.RetryBase
	RetryCap    = opjournal.RetryCap
	RefusalBase = opjournal.RefusalBase
	RefusalCap  = opjournal.RefusalCap
)

// RetryWait is the wait after the n-th transient failure (n from 1).
func RetryWait(n int) time.Duration { return opjournal.RetryWait(n) }

// RefusalWait is the wait after the n-th refusal (n from 1).
func RefusalWait(n int) time.Duration { return opjournal.RefusalWait(n) }

// errCrashed is what every step returns once a test crashed the
// reconciler: nothing more is written or called.
var errCrashed = errors.New("substrate: crashed (test hook)")

// isCrashed reports whether err comes from a crash a test asked for.
func isCrashed(err error) bool { return errors.Is(err, errCrashed) }

// open writes a new operation in state journaled, and marks the substrate
// not converged in the same transaction, so that a crash before the pass
// ends leaves a record that says there is work to finish.
func (p *pass) open(step, object string, repeat int, req request) (*state.JournalOp, error) {
	if err := p.alive(); err != nil {
		return nil, err
	}
	key := opKey(p.want.PoolID, step, object, p.want.Generation, repeat)
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	now := p.r.clock.Now().UnixMilli()
	op := &state.JournalOp{Key: key, PoolID: p.want.PoolID, Step: step, Object: object, Generation: p.want.Generation,
		ClientToken: ClientToken(key), State: state.Journaled, Request: data, CreatedAt: now, UpdatedAt: now}
	var rev int64
	err = p.r.store.UpdateIn(p.ctx, func(tx *state.Tx) error {
		tx.OnCommitAt(func(r int64) { rev = r })
		if err := tx.SwapJournalOp(nil, op); err != nil {
			return err
		}
		seen, err := tx.SubstrateSeen(p.want.PoolID)
		if err != nil {
			return err
		}
		if seen != nil && seen.Converged {
			seen.Converged = false
			return tx.PutSubstrateSeen(*seen)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.ops[key] = op
	p.r.log.Info().Str("pool", p.want.Pool).Str("op", key).Str("step", step).Str("object", object).
		Str("to", string(op.State)).Int64("rev", rev).Msg("substrate: journal operation written")
	return op, p.r.at(opjournal.Point{Kind: opjournal.PointTransition, PoolID: p.want.PoolID, Op: key, Step: step, To: state.Journaled})
}

// move makes one transition of op: in one transaction it checks that the
// stored operation is still the one op holds (compare-and-swap on its
// revision and state), that ev is legal from that state, applies change to a
// copy and writes it; also, when set, writes what must land with it (the
// cluster's id with its create's acceptance). op is updated once the
// transaction committed.
func (p *pass) move(op *state.JournalOp, ev Event, change func(*state.JournalOp), also func(*state.Tx) error) error {
	if err := p.alive(); err != nil {
		return err
	}
	to, err := NextFor(op.Step, op.State, ev)
	if err != nil {
		return fmt.Errorf("journal %s: %w", op.Key, err)
	}
	next := *op
	if change != nil {
		change(&next)
	}
	next.State = to
	next.UpdatedAt = p.r.clock.Now().UnixMilli()
	var rev int64
	err = p.r.store.UpdateIn(p.ctx, func(tx *state.Tx) error {
		tx.OnCommitAt(func(r int64) { rev = r })
		if err := tx.SwapJournalOp(op, &next); err != nil {
			return err
		}
		if also != nil {
			return also(tx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	from := op.State
	*op = next
	ev2 := p.r.log.Info()
	if to == state.Failed || ev == Defer || ev == Retry {
		ev2 = p.r.log.Warn()
	}
	ev2 = ev2.Str("pool", p.want.Pool).Str("op", op.Key).Str("step", op.Step).Str("object", op.Object).
		Str("event", string(ev)).Str("from", string(from)).Str("to", string(to)).Int("attempts", op.Attempts).
		Int64("rev", rev)
	if op.LastError != nil && ev != Succeed && ev != Begin {
		ev2 = ev2.Str("class", op.LastError.Class).Str("reason", op.LastError.Reason).Str("error", op.LastError.Message)
	}
	if op.NextAttemptAt > 0 && (ev == Retry || ev == Defer) {
		ev2 = ev2.Time("nextAttemptAt", time.UnixMilli(op.NextAttemptAt).UTC())
	}
	ev2.Msg("substrate: journal transition")
	p.r.metrics.JournalOp(op.Step, resultOf(ev, to))
	return p.r.at(opjournal.Point{Kind: opjournal.PointTransition, PoolID: p.want.PoolID, Op: op.Key, Step: op.Step, From: from, To: to, Event: ev})
}

// resultOf names a transition for the journal metric.
func resultOf(ev Event, to state.JournalState) string {
	switch {
	case ev == Abandon:
		return "abandoned"
	case to == state.Succeeded:
		return "succeeded"
	case to == state.Failed:
		return "failed"
	case to == state.Verifying:
		return "verifying"
	case ev == Retry:
		return "retried"
	case ev == Defer:
		return "deferred"
	case to == state.Accepted:
		return "accepted"
	}
	return "sent"
}
