package opjournal

import (
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

// Narrowing narrows the state machine per step: the events of the table a
// step's operation never takes, by construction of the code that drives it.
// The checked machine (Narrowing.Next) refuses them, so that code that
// starts to make one fails loudly instead of wandering into a path no
// crash campaign has been through.
type Narrowing map[string]map[state.JournalState][]Event

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

// Next is the package's Next for an operation of step: also an error
// wrapping ErrIllegal for an event the step never takes from that state.
func (n Narrowing) Next(step string, from state.JournalState, ev Event) (state.JournalState, error) {
	to, err := Next(from, ev)
	if err != nil {
		return "", err
	}
	if slices.Contains(n[step][from], ev) {
		return "", fmt.Errorf("%w: a %s operation in %s never takes %s", ErrIllegal, step, from, ev)
	}
	return to, nil
}

// Transition is one edge of a step's state machine.
type Transition struct {
	From, To state.JournalState
}

func (t Transition) String() string { return string(t.From) + "->" + string(t.To) }

// Transitions lists the transitions (from -> to, any event) an operation
// of step may make between states it is found in, in a fixed order: what
// an exhaustive crash campaign must crash in.
func (n Narrowing) Transitions(step string) []Transition {
	var out []Transition
	for _, from := range []state.JournalState{state.Journaled, state.InFlight, state.Verifying, state.Accepted} {
		seen := map[state.JournalState]bool{}
		for _, ev := range Events {
			to, err := n.Next(step, from, ev)
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

// OpError turns a provider error into what the journal keeps of it.
func OpError(err error) *state.OpError {
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
