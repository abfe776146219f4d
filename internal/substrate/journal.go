package substrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/backoff"
	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Event is what happens to an operation; Next says where it takes it.
type Event string

// The events of the journal's state machine.
const (
	// Begin: the call is about to be made.
	Begin Event = "begin"
	// Accept: the provider took the call (its answer, or a read-back that
	// found its work).
	Accept Event = "accept"
	// Ambiguous: the outcome is not known (a lost answer, a timeout, or an
	// operation found in flight after a restart).
	Ambiguous Event = "ambiguous"
	// Retry: nothing happened (a refusal with no side effect, a read-back
	// that found nothing, an object that vanished before it was done): the
	// call is to be made again, with the same key.
	Retry Event = "retry"
	// Refuse: refused for good, or failed at the provider.
	Refuse Event = "refuse"
	// Succeed: the provider finished the work.
	Succeed Event = "succeed"
	// Defer: no news (a read-back failed); look again later.
	Defer Event = "defer"
	// Abandon: nothing wants the operation any more (a newer generation, or
	// a teardown overtook it).
	Abandon Event = "abandon"
)

// Events lists every event.
var Events = []Event{Begin, Accept, Ambiguous, Retry, Refuse, Succeed, Defer, Abandon}

// transitions is the state machine. An operation in flight can only be
// settled by its call's answer or by Ambiguous: nothing else may move it,
// since only the answer (or a read-back) knows what the provider did.
var transitions = map[state.JournalState]map[Event]state.JournalState{
	state.Journaled: {Begin: state.InFlight, Defer: state.Journaled, Abandon: state.Failed},
	state.InFlight: {Accept: state.Accepted, Ambiguous: state.Verifying, Retry: state.Journaled,
		Refuse: state.Failed},
	state.Verifying: {Accept: state.Accepted, Retry: state.Journaled, Refuse: state.Failed,
		Defer: state.Verifying, Abandon: state.Failed},
	state.Accepted: {Succeed: state.Succeeded, Refuse: state.Failed, Retry: state.Journaled,
		Defer: state.Accepted, Abandon: state.Failed},
	state.Succeeded: {},
	state.Failed:    {},
}

// notForStep narrows the state machine per step: the events of the table a
// step's operation never takes, by construction of the code that drives it.
// The checked machine (NextFor) refuses them, so that code that starts to
// make one fails loudly instead of wandering into a path no crash campaign
// has been through; and the exhaustive campaign fails when a transition a
// step does take is never crashed in.
var notForStep = map[string]map[state.JournalState][]Event{
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
}

// ErrIllegal is what Next returns for an event the state does not take.
var ErrIllegal = errors.New("illegal journal transition")

// Next is the state an event takes an operation in state from to, or an
// error wrapping ErrIllegal.
func Next(from state.JournalState, ev Event) (state.JournalState, error) {
	row, ok := transitions[from]
	if !ok {
		return "", fmt.Errorf("%w: unknown state %q", ErrIllegal, from)
	}
	to, ok := row[ev]
	if !ok {
		return "", fmt.Errorf("%w: %s does not take %s", ErrIllegal, from, ev)
	}
	return to, nil
}

// NextFor is Next for an operation of step: also an error wrapping
// ErrIllegal for an event the step never takes from that state.
func NextFor(step string, from state.JournalState, ev Event) (state.JournalState, error) {
	to, err := Next(from, ev)
	if err != nil {
		return "", err
	}
	if slices.Contains(notForStep[step][from], ev) {
		return "", fmt.Errorf("%w: a %s operation in %s never takes %s", ErrIllegal, step, from, ev)
	}
	return to, nil
}

// Transition is one edge of a step's state machine.
type Transition struct {
	From, To state.JournalState
}

func (t Transition) String() string { return string(t.From) + "->" + string(t.To) }

// StepTransitions lists the transitions (from -> to, any event) an
// operation of step may make between states it is found in, in a fixed
// order: what the exhaustive campaign must crash in.
func StepTransitions(step string) []Transition {
	var out []Transition
	for _, from := range []state.JournalState{state.Journaled, state.InFlight, state.Verifying, state.Accepted} {
		seen := map[state.JournalState]bool{}
		for _, ev := range Events {
			to, err := NextFor(step, from, ev)
			if err != nil || seen[to] {
				continue
			}
			seen[to] = true
			out = append(out, Transition{From: from, To: to})
		}
	}
	return out
}

// The waits of the retry authority. A transient failure waits
// RetryBase·2^(n-1) up to RetryCap (or what the provider asked, when that is
// longer); a refusal a person must fix waits RefusalBase·2^(n-1) up to
// RefusalCap: 5, 10, 20, 40 minutes ... 6 hours.
const (
	RetryBase   = 5 * time.Second
	RetryCap    = 5 * time.Minute
	RefusalBase = 5 * time.Minute
	RefusalCap  = 6 * time.Hour
)

// RetryWait is the wait after the n-th transient failure (n from 1). It is
// exact, not drawn: the journal persists when the next attempt is due.
func RetryWait(n int) time.Duration { return backoff.Wait(n, RetryBase, RetryCap, nil) }

// RefusalWait is the wait after the n-th refusal (n from 1).
func RefusalWait(n int) time.Duration { return backoff.Wait(n, RefusalBase, RefusalCap, nil) }

// opError turns a provider error into what the journal keeps of it.
func opError(err error) *state.OpError {
	if err == nil {
		return nil
	}
	return &state.OpError{
		Class:        string(providers.ClassOf(err)),
		SideEffect:   string(providers.SideEffectOf(err)),
		Reason:       providers.ReasonOf(err),
		Message:      err.Error(),
		RetryAfterMs: providers.RetryAfterOf(err).Milliseconds(),
	}
}

// errCrashed is what every step returns once a test hook crashed the
// reconciler: nothing more is written or called.
var errCrashed = errors.New("substrate: crashed (test hook)")

// IsCrashed reports whether err comes from a crash a test hook asked for.
func IsCrashed(err error) bool { return errors.Is(err, errCrashed) }

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
	return op, p.r.at(Point{Kind: PointTransition, PoolID: p.want.PoolID, Op: key, Step: step, To: state.Journaled})
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
	return p.r.at(Point{Kind: PointTransition, PoolID: p.want.PoolID, Op: op.Key, Step: op.Step, From: from, To: to, Event: ev})
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
