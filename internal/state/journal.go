package state

import (
	"encoding/json"
	"errors"
	"fmt"
)

// JournalState is where one provider operation is in the journal. The
// transitions between states are the substrate's state machine; the store
// only makes each one a checked compare-and-swap (SwapJournalOp).
type JournalState string

// The journal states (docs/design.md, "One writer, one retry authority").
const (
	// Journaled: written before the call; not (yet) sent.
	Journaled JournalState = "journaled"
	// InFlight: the call is being made; found after a restart, its outcome
	// is not known.
	InFlight JournalState = "in_flight"
	// Accepted: the provider took the call; its work may still be running.
	Accepted JournalState = "accepted"
	// Succeeded: the provider finished what the call asked.
	Succeeded JournalState = "succeeded"
	// Failed: refused for good (or abandoned); only a new document helps.
	Failed JournalState = "failed"
	// Verifying: the outcome is not known (a crash, a lost answer); the
	// provider is read back by name before anything else is done.
	Verifying JournalState = "verifying"
)

// JournalStates lists every state.
var JournalStates = []JournalState{Journaled, InFlight, Accepted, Succeeded, Failed, Verifying}

// Terminal reports whether nothing more happens to an operation.
func (s JournalState) Terminal() bool { return s == Succeeded || s == Failed }

// OpError is the last failure of an operation: the provider error's class,
// side effect, reason and message (which never hold a secret value), and the
// wait the provider asked for.
type OpError struct {
	Class        string `json:"class"`
	SideEffect   string `json:"sideEffect,omitempty"`
	Reason       string `json:"reason,omitempty"`
	Message      string `json:"message"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
}

// JournalOp is one provider operation of a substrate.
type JournalOp struct {
	// Key is `<pool id>/<step>/<object>/g<generation>[.r<n>]`: derived,
	// never random, so that the same step of the same generation is the
	// same operation after any number of restarts.
	Key        string `json:"key"`
	PoolID     string `json:"poolId"`
	Step       string `json:"step"`
	Object     string `json:"object"`
	Generation uint64 `json:"generation"`
	// ClientToken is the idempotency key derived from Key, sent as the
	// provider's client token on every attempt.
	ClientToken string       `json:"clientToken"`
	State       JournalState `json:"state"`
	// Request is the call's parameters, fixed when the operation is
	// journaled: a retry sends exactly what the first attempt sent.
	Request json.RawMessage `json:"request"`
	// Result is what the provider answered (a cluster's id), once accepted.
	Result json.RawMessage `json:"result,omitempty"`
	// Attempts counts the calls made; Refusals the refusals a person must
	// fix (they follow the long teardown schedule); ReadFailures the
	// read-backs that failed.
	Attempts     int `json:"attempts"`
	Refusals     int `json:"refusals,omitempty"`
	ReadFailures int `json:"readFailures,omitempty"`
	// NextAttemptAt is when the operation may move again (Unix ms), 0 now.
	NextAttemptAt int64    `json:"nextAttemptAt,omitempty"`
	LastError     *OpError `json:"lastError,omitempty"`
	// Rev counts the writes of the record; a swap must name the revision it
	// read.
	Rev       uint64 `json:"rev"`
	CreatedAt int64  `json:"createdAt"`
	UpdatedAt int64  `json:"updatedAt"`
}

// ErrJournalConflict is what SwapJournalOp returns when the stored operation
// is not the one the caller read: someone else moved it.
var ErrJournalConflict = errors.New("journal: the operation changed since it was read")

// JournalOp returns one operation, or nil.
func (t *Tx) JournalOp(key string) (*JournalOp, error) {
	data := t.tx.Bucket(bucketJournal).Get([]byte(key))
	if data == nil {
		return nil, nil
	}
	var op JournalOp
	if err := json.Unmarshal(data, &op); err != nil {
		return nil, fmt.Errorf("journal operation %s is damaged: %w", key, err)
	}
	return &op, nil
}

// SwapJournalOp writes next in place of the operation the caller read,
// checking that the store still holds that read: the same revision and
// state (old nil: that no operation has next's key yet). next's revision is
// set to one past old's. Anything else is ErrJournalConflict and nothing is
// written.
func (t *Tx) SwapJournalOp(old *JournalOp, next *JournalOp) error {
	if next == nil || next.Key == "" {
		return fmt.Errorf("journal: an operation needs a key")
	}
	cur, err := t.JournalOp(next.Key)
	if err != nil {
		return err
	}
	switch {
	case old == nil && cur != nil:
		return fmt.Errorf("%w: %s exists already (%s)", ErrJournalConflict, next.Key, cur.State)
	case old != nil && cur == nil:
		return fmt.Errorf("%w: %s is gone", ErrJournalConflict, next.Key)
	case old != nil && (old.Key != next.Key || cur.Rev != old.Rev || cur.State != old.State):
		return fmt.Errorf("%w: %s is at revision %d (%s), the caller read %d (%s)", ErrJournalConflict, next.Key, cur.Rev, cur.State, old.Rev, old.State)
	}
	next.Rev = 1
	if old != nil {
		next.Rev = old.Rev + 1
	}
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	return t.tx.Bucket(bucketJournal).Put([]byte(next.Key), data)
}

// JournalOps returns the operations whose key starts with prefix, in key
// order.
func (t *Tx) JournalOps(prefix string) ([]JournalOp, error) {
	var out []JournalOp
	err := t.tx.Bucket(bucketJournal).Scan([]byte(prefix), func(k, v []byte) error {
		var op JournalOp
		if err := json.Unmarshal(v, &op); err != nil {
			return fmt.Errorf("journal operation %s is damaged: %w", k, err)
		}
		out = append(out, op)
		return nil
	})
	return out, err
}

// DeleteJournalOp removes a finished operation; one that is not finished is
// refused (it is the only memory of a call that may have acted).
func (t *Tx) DeleteJournalOp(key string) error {
	cur, err := t.JournalOp(key)
	if err != nil || cur == nil {
		return err
	}
	if !cur.State.Terminal() {
		return fmt.Errorf("journal: %s is %s; only a finished operation is removed", key, cur.State)
	}
	return t.tx.Bucket(bucketJournal).Delete([]byte(key))
}
