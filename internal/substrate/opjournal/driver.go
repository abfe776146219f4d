package opjournal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/providers"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Phase is what a read-back says of an operation's work.
type Phase int

const (
	// Absent: the work did not happen (or its object vanished).
	Absent Phase = iota
	InProgress
	Finished
	// FailedThere: the provider took the call and the work failed there.
	FailedThere
)

// Observed is what a call or a read-back learned: the phase, the object
// (V: whatever the caller's calls return) and the provider's words.
type Observed[V any] struct {
	Phase   Phase
	Value   V
	Message string
	// Doubt: what the operation works on is gone; the caller should look
	// at everything again.
	Doubt bool
}

// Result is how a drive of an operation ended.
type Result int

const (
	Done Result = iota
	// Wait: in progress, or waiting out a backoff.
	Wait
	// Refused: refused by the provider in a way a person must fix; the
	// journal tries again on the long schedule.
	Refused
	// Failed: refused for good.
	Failed
	// Superseded: abandoned for a newer operation.
	Superseded
	// Later: in error, looked at again later, nothing in the journal
	// waiting (a caller's own stop, never a drive's).
	Later
)

// Outcome is where a drive left an operation: its result, what was
// observed last, when to look again and the words for a person.
type Outcome[V any] struct {
	Result  Result
	Obs     Observed[V]
	Until   time.Time
	Message string
	// Doubt: the drive learned that what the operation works on is gone.
	Doubt bool
}

// Calls is what the driver asks of its caller: the operation's provider
// call (with its client token) and its read-back by name, and what the
// caller keeps of an answer.
type Calls[V any] interface {
	Call(op *state.JournalOp) (Observed[V], error)
	ReadBack(op *state.JournalOp) (Observed[V], error)
	// Identified reports whether an answer names what the call made (a
	// create's id): one that does not is read back by name.
	Identified(op *state.JournalOp, obs Observed[V]) bool
	// Result is what the journal keeps of an accepted answer.
	Result(obs Observed[V]) json.RawMessage
	// OnAccept is what must be written with the acceptance (nil: nothing).
	OnAccept(op *state.JournalOp, obs Observed[V]) func(*state.Tx) error
	// Progress is what an answer says of work still going on ("" or
	// " (provisioning)").
	Progress(obs Observed[V]) string
}

// Journal writes an operation's transitions, and says whether the caller
// may still act.
type Journal interface {
	// Move makes one transition of op (compare-and-swap on what op holds),
	// with change applied to it and also written in the same transaction.
	Move(op *state.JournalOp, ev Event, change func(*state.JournalOp), also func(*state.Tx) error) error
	// At is asked at each point between journal steps whether the drive
	// may go on (a leader asks its fence there, right before a provider
	// call); an error stops the drive at that point. Tests crash there.
	At(Point) error
	// Alive is nil while the caller may make provider calls (it leads).
	Alive() error
}

// Inputs are what one drive works with besides the operation.
type Inputs[V any] struct {
	Ctx     context.Context
	Now     func() time.Time
	Poll    time.Duration
	Journal Journal
	Calls   Calls[V]
	// Describe names what the operation does, for messages.
	Describe string
	// Delete: the operation removes something; it is never refused for
	// good (a refusal is tried again on the long schedule).
	Delete bool
	// Stale: something newer wants another thing; the operation is
	// abandoned at the first point where that is safe.
	Stale bool
}

// PointKind says which kind of point between journal steps a Point is.
type PointKind string

// The points between journal steps.
const (
	// PointTransition: a journal write committed.
	PointTransition PointKind = "transition"
	// PointBeforeCall: the operation is in flight and its call not made.
	PointBeforeCall PointKind = "beforeCall"
	// PointAfterCall: the provider answered and nothing is recorded yet.
	PointAfterCall PointKind = "afterCall"
)

// Point is one place between journal steps, as the driver tells its
// Journal where it stands (Journal.At). It is part of the driver's
// interface: a Journal in another package must be able to name it.
type Point struct {
	Kind   PointKind
	PoolID string
	Op     string
	Step   string
	From   state.JournalState
	To     state.JournalState
	Event  Event
}

// Drive moves an operation as far as it goes now: it makes the call when
// due, settles an unknown outcome by reading back, and observes accepted
// work until it is done. It never sleeps: a backoff or work in progress
// ends it with Wait. A stale operation is abandoned at the first point
// where that is safe (nothing is in progress at the provider).
func Drive[V any](op *state.JournalOp, in Inputs[V]) (out Outcome[V], err error) {
	d := driver[V]{in}
	doubted := false
	defer func() { out.Doubt = out.Doubt || doubted }()
	for range 8 {
		now := in.Now()
		due := time.UnixMilli(op.NextAttemptAt)
		switch op.State {
		case state.Succeeded:
			return Outcome[V]{Result: Done}, nil
		case state.Failed:
			return Outcome[V]{Result: Failed, Message: in.Describe + ": " + Failure(op, in.Delete)}, nil
		case state.InFlight:
			// Found in flight: a previous run died during the call.
			err := in.Journal.Move(op, Ambiguous, func(o *state.JournalOp) {
				o.NextAttemptAt = 0
				o.LastError = &state.OpError{Class: string(providers.Unknown), SideEffect: string(providers.Maybe),
					Message: "the agent stopped during the call; its outcome is not known"}
			}, nil)
			if err != nil {
				return Outcome[V]{}, err
			}
		case state.Journaled:
			if in.Stale {
				return Outcome[V]{Result: Superseded}, in.Journal.Move(op, Abandon, nil, nil)
			}
			if op.NextAttemptAt > 0 && now.Before(due) {
				return d.waiting(op, due), nil
			}
			if err := in.Journal.Move(op, Begin, func(o *state.JournalOp) { o.Attempts++ }, nil); err != nil {
				return Outcome[V]{}, err
			}
			// Only a leader calls (an etcd store): the journal's write
			// above was fenced by etcd, At asks the fence again, and the
			// call's context carries it to the provider's side, so a
			// leader paused in between never calls once another took
			// over. The operation stays in flight: whoever leads reads the
			// provider back, as after a crash.
			if err := in.Journal.At(Point{Kind: PointBeforeCall, PoolID: op.PoolID, Op: op.Key, Step: op.Step, From: state.InFlight}); err != nil {
				return Outcome[V]{}, err
			}
			obs, callErr := in.Calls.Call(op)
			if err := in.Journal.At(Point{Kind: PointAfterCall, PoolID: op.PoolID, Op: op.Key, Step: op.Step, From: state.InFlight}); err != nil {
				return Outcome[V]{}, err // the provider may have acted; nothing is recorded
			}
			if callErr != nil && providers.Cancelled(callErr) && in.Ctx.Err() != nil {
				err := in.Journal.Move(op, Ambiguous, func(o *state.JournalOp) { o.LastError = OpError(callErr) }, nil)
				return Outcome[V]{Result: Wait, Until: now}, errors.Join(in.Ctx.Err(), err)
			}
			doubt, err := d.settleCall(op, obs, callErr)
			doubted = doubted || doubt
			if err != nil {
				return Outcome[V]{}, err
			}
		case state.Verifying:
			obs, end, err := d.look(op, now)
			if err != nil || end != nil {
				return ended(end), err
			}
			doubted = doubted || obs.Doubt
			switch obs.Phase {
			case Absent:
				if in.Stale {
					return Outcome[V]{Result: Superseded}, in.Journal.Move(op, Abandon, nil, nil)
				}
				// It did not happen: call again, now, with the same key.
				if err := in.Journal.Move(op, Retry, func(o *state.JournalOp) { o.NextAttemptAt, o.ReadFailures = 0, 0 }, nil); err != nil {
					return Outcome[V]{}, err
				}
			case FailedThere:
				if err := d.refuseThere(op, obs); err != nil {
					return Outcome[V]{}, err
				}
			default:
				if err := in.Journal.Move(op, Accept, func(o *state.JournalOp) { o.NextAttemptAt, o.ReadFailures = 0, 0 }, in.Calls.OnAccept(op, obs)); err != nil {
					return Outcome[V]{}, err
				}
			}
		case state.Accepted:
			obs, end, err := d.look(op, now)
			if err != nil || end != nil {
				return ended(end), err
			}
			doubted = doubted || obs.Doubt
			switch obs.Phase {
			case InProgress:
				return Outcome[V]{Result: Wait, Obs: obs, Until: now.Add(in.Poll), Message: in.Describe + in.Calls.Progress(obs)}, nil
			case Finished:
				err := in.Journal.Move(op, Succeed, func(o *state.JournalOp) { o.NextAttemptAt, o.LastError = 0, nil }, nil)
				return Outcome[V]{Result: Done, Obs: obs}, err
			case FailedThere:
				if err := d.refuseThere(op, obs); err != nil {
					return Outcome[V]{}, err
				}
			case Absent:
				// Accepted, then gone before it was done (a provider drops
				// a failed create): make the call again.
				if err := in.Journal.Move(op, Retry, func(o *state.JournalOp) {
					o.NextAttemptAt = now.Add(RetryWait(o.Attempts)).UnixMilli()
					o.LastError = &state.OpError{Class: string(providers.NotFound), Message: "accepted, then gone at the provider before it was done"}
				}, nil); err != nil {
					return Outcome[V]{}, err
				}
			}
		default:
			return Outcome[V]{}, fmt.Errorf("journal %s: unknown state %q", op.Key, op.State)
		}
	}
	return Outcome[V]{Result: Wait, Until: in.Now().Add(in.Poll), Message: in.Describe}, nil
}

type driver[V any] struct{ in Inputs[V] }

// look reads an operation back once it is due; end is set when the drive
// ends here (a backoff to wait out, a read-back that failed).
func (d driver[V]) look(op *state.JournalOp, now time.Time) (Observed[V], *Outcome[V], error) {
	if due := time.UnixMilli(op.NextAttemptAt); op.NextAttemptAt > 0 && now.Before(due) {
		w := d.waiting(op, due)
		return Observed[V]{}, &w, nil
	}
	// A read-back is a provider call too: only the leader makes it.
	if err := d.in.Journal.Alive(); err != nil {
		return Observed[V]{}, nil, err
	}
	obs, err := d.in.Calls.ReadBack(op)
	if err != nil {
		if err := d.deferRead(op, err); err != nil {
			return Observed[V]{}, nil, err
		}
		w := d.waiting(op, time.UnixMilli(op.NextAttemptAt))
		return Observed[V]{}, &w, nil
	}
	return obs, nil, nil
}

func ended[V any](o *Outcome[V]) Outcome[V] {
	if o == nil {
		return Outcome[V]{}
	}
	return *o
}

// settleCall records a call's answer: the one place that reads a provider
// error's class and side effect. doubt says what the call needs is gone.
func (d driver[V]) settleCall(op *state.JournalOp, obs Observed[V], err error) (doubt bool, _ error) {
	in := d.in
	now := in.Now()
	if err == nil && !in.Calls.Identified(op, obs) {
		// "It happened" without the object (a 2xx the client could not
		// read, DOKS accepting without an id): what was made is not known,
		// so it is read back by name like any unknown outcome. Accepting
		// it would leave a create with no result that no later pass can
		// settle.
		return false, in.Journal.Move(op, Ambiguous, func(o *state.JournalOp) {
			o.NextAttemptAt = 0
			o.LastError = &state.OpError{Class: string(providers.Unknown), SideEffect: string(providers.Done),
				Message: "the provider answered without the object it made; reading it back by name"}
		}, nil)
	}
	if err == nil {
		return false, in.Journal.Move(op, Accept, func(o *state.JournalOp) {
			o.LastError, o.NextAttemptAt = nil, 0
			o.Result = in.Calls.Result(obs)
		}, in.Calls.OnAccept(op, obs))
	}
	oe := OpError(err)
	side, class := providers.SideEffectOf(err), providers.ClassOf(err)
	switch {
	case side == providers.Done || (class == providers.NotFound && in.Delete):
		// It happened (a delete of what is gone is what a delete wants).
		return false, in.Journal.Move(op, Accept, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, 0 }, in.Calls.OnAccept(op, obs))
	case side == providers.Maybe:
		// Not known: read back by name before anything else.
		return false, in.Journal.Move(op, Ambiguous, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, 0 }, nil)
	case providers.Retryable(err) || class == providers.NotFound:
		wait := max(RetryWait(op.Attempts), providers.RetryAfterOf(err))
		// What the call needs (its cluster) may be gone: look again.
		return class == providers.NotFound, in.Journal.Move(op, Retry, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, now.Add(wait).UnixMilli() }, nil)
	case class == providers.Terminal || in.Delete:
		// A refusal a person must fix (a permission, a quota, a refused
		// delete): tried again on the long schedule; a teardown is never
		// given up.
		return false, in.Journal.Move(op, Retry, func(o *state.JournalOp) {
			o.Refusals++
			o.LastError = oe
			o.NextAttemptAt = now.Add(max(RefusalWait(o.Refusals), providers.RetryAfterOf(err))).UnixMilli()
		}, nil)
	default:
		return false, in.Journal.Move(op, Refuse, func(o *state.JournalOp) { o.LastError, o.NextAttemptAt = oe, 0 }, nil)
	}
}

// refuseThere ends an operation whose work failed at the provider.
func (d driver[V]) refuseThere(op *state.JournalOp, obs Observed[V]) error {
	msg := obs.Message
	if msg == "" {
		msg = "failed at the provider"
	}
	if d.in.Delete {
		return d.in.Journal.Move(op, Retry, func(o *state.JournalOp) {
			o.Refusals++
			o.LastError = &state.OpError{Class: string(providers.Terminal), Message: msg}
			o.NextAttemptAt = d.in.Now().Add(RefusalWait(o.Refusals)).UnixMilli()
		}, nil)
	}
	return d.in.Journal.Move(op, Refuse, func(o *state.JournalOp) {
		o.LastError = &state.OpError{Class: string(providers.Invalid), Reason: "failedAtProvider", Message: msg}
	}, nil)
}

// deferRead records a failed read-back; the journal tries again later.
func (d driver[V]) deferRead(op *state.JournalOp, err error) error {
	now := d.in.Now()
	return d.in.Journal.Move(op, Defer, func(o *state.JournalOp) {
		o.ReadFailures++
		o.LastError = OpError(err)
		o.LastError.Message = "reading it back: " + o.LastError.Message
		o.NextAttemptAt = now.Add(max(RetryWait(o.ReadFailures), providers.RetryAfterOf(err))).UnixMilli()
	}, nil)
}

// waiting is the outcome of an operation waiting out its backoff.
func (d driver[V]) waiting(op *state.JournalOp, until time.Time) Outcome[V] {
	at := until.UTC().Format(time.RFC3339)
	res := Wait
	var msg string
	switch {
	case op.State == state.Verifying:
		msg = fmt.Sprintf("%s: the outcome is not known (%s); reading it back by name at %s", d.in.Describe, lastMessage(op), at)
	case op.Refusals > 0 && op.LastError != nil && (op.LastError.Class == string(providers.Terminal) || op.LastError.Class == string(providers.Invalid) || d.in.Delete):
		res = Refused
		msg = fmt.Sprintf("%s: the provider refused: %s; %s; the next attempt is at %s (refusal %d)", d.in.Describe, lastMessage(op), hint(op, d.in.Delete), at, op.Refusals)
	case op.LastError != nil:
		msg = fmt.Sprintf("%s: %s; trying again at %s (attempt %d)", d.in.Describe, lastMessage(op), at, op.Attempts+1)
	default:
		msg = fmt.Sprintf("%s: next attempt at %s", d.in.Describe, at)
	}
	return Outcome[V]{Result: res, Until: until, Message: msg}
}

func lastMessage(op *state.JournalOp) string {
	if op.LastError == nil {
		return "no answer"
	}
	return op.LastError.Message
}

// Failure says why an operation failed and what a person can do (del: it
// is a delete).
func Failure(op *state.JournalOp, del bool) string {
	return "the provider refused: " + lastMessage(op) + "; " + hint(op, del)
}

// hint says what a person can do about a refusal.
func hint(op *state.JournalOp, del bool) string {
	reason := ""
	if op.LastError != nil {
		reason = op.LastError.Reason
	}
	switch {
	case reason == "shapeChange":
		return "a node pool's machine type, GPUs, Spot, disk and zones never change in place: give the flavor a new name to make a new node pool"
	case reason == "zeroNodes":
		return "this provider needs at least one node in a fixed-size node pool: set nodes to 1 or more, or use autoscaling with minNodes 0"
	case reason == "quota":
		return "raise the quota at the provider"
	case reason == "credentialsRefused" || reason == "secretMissing":
		return "fix the provider account's credentials (the secret its reference names)"
	case reason == "failedAtProvider":
		return "see the provider's console for why; change the flavor in the document to try another shape"
	case del:
		return "fix the cause at the provider (a permission, something still using it); the delete is tried again on its own"
	case op.LastError != nil && op.LastError.Class == string(providers.Terminal):
		return "fix the cause at the provider or in the account (a permission, a quota, a credential); it is tried again on its own"
	}
	return "change the substrate in the document"
}
