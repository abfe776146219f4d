// Package outbox is the outbox: every post to GitHub (commit statuses, the
// sticky plan comment, result and drift comments) is written to the state
// file in the caller's transaction before anything is sent, then delivered
// oldest first by one loop, coalesced, retried with capped backoff honouring
// GitHub's rate limits, and resumed after a restart: nothing posted is lost
// and nothing is posted twice (docs/configuration.md).
//
// The outbox sends through a Sender it declares; the binary passes the forge
// in (forge.(*GitHub).Poster). It imports neither the forge nor go-github.
//
// # Coalescing and order
//
// Posts with the same key are one post: the newest status per commit and
// context, the newest check run per commit and context (a GitHub App's, with
// its annotations: the Sender sends them 50 a request and, sent again, adds
// only those not yet on the run), the newest body per pull request and
// marker for sticky comments;
// a once-comment queued again with the same pull request and marker is a
// no-op (the first wins: its marker names one result, so a second one is the
// same result said again).
//
// A replaced post keeps its place in the queue; it does not move to the end.
// Two reasons. The objects a key names are independent on GitHub (one status
// per commit and context, one comment per pull request and marker), so what
// matters for each is its final content, and keeping the place delivers that
// content as early as its first version would have been: a sticky comment
// updated on every push during a long rate limit is never pushed back behind
// newer posts again and again (no starvation). And the one order GitHub
// shows across keys, the order in which comments are created on a pull
// request, stays the order in which the agent first asked for them: the plan
// comment is created before the result comment of the same pull request even
// when the plan was edited after. Survivors are delivered in queue order,
// one at a time; nothing overtakes the oldest, not even while it waits for a
// rate limit. Two sends are at least Options.MinSpacing apart (a second by
// default, GitHub's advice for write requests): a long queue after an outage
// drains at that pace instead of running into the secondary limits.
//
// # Delivery, errors and restarts
//
// The oldest entry is marked in flight (persisted) before it is sent and
// deleted, in a transaction, after GitHub took it. A retryable failure (rate
// limit, secondary limit, 5xx, network) holds the whole queue until
// max(the error's RetryAt, capped exponential backoff); the hold is persisted
// in the entry, so a restart honours it too. A failure that the same request
// would meet again (403, 404, a 422 about the content, any other 4xx) drops
// the post: a poison post never jams the queue.
//
// A 422 to a comment that is not about its content (the forge's class
// content_limited: "was submitted too quickly", "the endpoint has been
// spammed") is GitHub's limit on creating content, and passes: it holds the
// queue like a secondary limit. It is retried ContentLimitAttempts times (20
// by default, about 70 minutes: GitHub's content limits run per minute and
// per hour), then dropped, so that a 422 misjudged as a limit cannot hold
// every post behind it for ever.
//
// # Nothing is dropped unsaid
//
// Every drop is an error log line (the post, the attempts, the reason), a
// count by kind and reason (Drops, for fleet_agent_posts_dropped_total), and,
// for a comment, a status that says so. A comment queued by (*Outbox).Enqueue
// in the same transaction as a status (the agent queues a status and the
// comment that explains it together: plan, apply, drift) is paired with the
// first such status. When the comment is dropped, that status is queued
// again, in the transaction that drops the comment, with its newest known
// content (a version of it still queued is amended in place; else the one
// this process delivered last; else the one paired) and a description that
// starts by telling the reviewer the comment could not be posted and to look
// in the fleet-agent log. A comment with no paired status, a dropped status
// and a dropped check run (it stands beside its status, it does not explain
// it) are logged and counted only.
//
// A 401 (or a credential that does not resolve) is never about the post but
// about the credential, which may be in the middle of a rotation (a token
// file replaced, an installation token revoked and minted again on the next
// request). Dropping at once would lose every post of a short rotation, the
// final status of an apply among them, and leave GitHub showing it pending;
// holding forever would let a credential nobody fixes keep every post. So it
// is retried with the same capped backoff AuthAttempts times (20 by default:
// about an hour of waiting, 2 s doubling to the 5 min cap), then dropped with
// an error line. With a credential that stays wrong the queue so loses its
// oldest post about once an hour while the log and the metrics say why; a
// fixed credential delivers the rest.
//
// After a crash or a lost answer (network error, 5xx: GitHub may have acted)
// an entry is still in flight. A sticky comment is then simply sent again:
// the upsert finds its comment by marker and edits it only if the body
// differs. A once-comment looks for its marker before it posts. A status is
// checked first: when the newest status for its commit and context on GitHub
// is already identical it is not posted again (statuses are append-only on
// GitHub, so a second post would be a duplicate).
package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// record is what the state file holds for one queued post.
type record struct {
	Post Post `json:"post"`
	// Rev counts the replacements by coalescing, so that delivery deletes
	// an entry only if it still holds what was sent.
	Rev uint64 `json:"rev,omitempty"`
	// InFlight: a send may have reached GitHub and its outcome is not
	// known (set before each send, kept after a crash or a lost answer).
	InFlight bool `json:"inFlight,omitempty"`
	// Attempts counts failed sends since the last success; AuthFailures
	// those of them that met 401 or an unresolvable credential,
	// LimitFailures those that met GitHub's content limit.
	Attempts      int `json:"attempts,omitempty"`
	AuthFailures  int `json:"authFailures,omitempty"`
	LimitFailures int `json:"limitFailures,omitempty"`
	// Status, for a comment, is the status queued with it that the note
	// of a drop goes on (see "Nothing is dropped unsaid").
	Status *Post `json:"status,omitempty"`
	// NotBefore is when the next send may be made (Unix ms), 0 for now.
	NotBefore int64 `json:"notBefore,omitempty"`
	// LastError is the last failure's text, for logs and metrics.
	LastError string `json:"lastError,omitempty"`
	// QueuedAt is when the post took its place in the queue (Unix ms; a
	// coalesced post keeps it), for the page's "oldest waiting"; 0 when
	// queued without a clock (the package's Enqueue).
	QueuedAt int64 `json:"queuedAt,omitempty"`
}

func decodeRecord(e state.OutboxEntry) (record, error) {
	var r record
	if err := json.Unmarshal(e.Data, &r); err != nil {
		return record{}, fmt.Errorf("outbox entry %d: %w", e.Seq, err)
	}
	return r, nil
}

func (r record) encode() []byte {
	data, err := json.Marshal(r)
	if err != nil {
		panic(err) // plain strings and numbers
	}
	return data
}

// Enqueue queues p inside the caller's transaction, coalescing it with what
// is queued under the same key; it is delivered once tx commits. Nothing
// wakes a deliverer: use (*Outbox).Enqueue for that, or let its timer find
// it. A comment queued here is paired with no status: use (*Outbox).Enqueue
// for that too.
func Enqueue(tx *state.Tx, p Post) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return enqueue(tx, p, nil, 0)
}

// enqueue is Enqueue of a valid post; status is the status a comment is
// paired with, nil for none; at is when (Unix ms, 0 not known).
func enqueue(tx *state.Tx, p Post, status *Post, at int64) error {
	if p.Kind == KindStatus {
		status = nil
	}
	key := p.Key()
	old, ok, err := tx.OutboxLookup(key)
	if err != nil {
		return err
	}
	if !ok {
		_, err := tx.OutboxAppend(key, record{Post: p, Status: status, QueuedAt: at}.encode())
		return err
	}
	if p.Kind == KindOnce {
		return nil // the first wins
	}
	rec, err := decodeRecord(old)
	if err != nil {
		return err
	}
	if status != nil {
		rec.Status = status
	}
	if rec.Post.equal(p) {
		if status == nil {
			return nil
		}
		return tx.OutboxReplace(old.Seq, rec.encode())
	}
	// Same place in the queue (see the package comment). The in-flight
	// mark stays: an older version may have reached GitHub. The hold stays
	// too: a rate limit does not lift because the content changed.
	rec.Post = p
	rec.Rev++
	return tx.OutboxReplace(old.Seq, rec.encode())
}

// Entry is a queued post as Queued lists it.
type Entry struct {
	Seq       uint64
	Post      Post
	InFlight  bool
	Attempts  int
	NotBefore time.Time // zero: due now
	LastError string
	QueuedAt  time.Time // zero: not known
}

// Queued lists the queued posts, oldest first.
func Queued(tx *state.Tx) ([]Entry, error) {
	var out []Entry
	err := tx.OutboxEntries(func(e state.OutboxEntry) error {
		r, err := decodeRecord(e)
		if err != nil {
			return err
		}
		out = append(out, entryOf(e.Seq, r))
		return nil
	})
	return out, err
}

func entryOf(seq uint64, r record) Entry {
	q := Entry{Seq: seq, Post: r.Post, InFlight: r.InFlight, Attempts: r.Attempts, LastError: r.LastError}
	if r.NotBefore != 0 {
		q.NotBefore = time.UnixMilli(r.NotBefore)
	}
	if r.QueuedAt != 0 {
		q.QueuedAt = time.UnixMilli(r.QueuedAt)
	}
	return q
}

// Oldest is the post at the head of the queue, if any: the page shows how
// long it has waited.
func Oldest(tx *state.Tx) (Entry, bool, error) {
	e, ok, err := tx.OutboxFirst()
	if err != nil || !ok {
		return Entry{}, false, err
	}
	r, err := decodeRecord(e)
	if err != nil {
		return Entry{}, false, err
	}
	return entryOf(e.Seq, r), true, nil
}

// HeldError says that the oldest post waits (for a rate limit, a backoff
// after a failure) and until when; Flush returns it.
type HeldError struct {
	Until  time.Time
	Post   Post
	Reason string
}

// ErrHeld matches every *HeldError with errors.Is.
var ErrHeld = errors.New("outbox: the oldest post waits")

func (e *HeldError) Error() string {
	return fmt.Sprintf("outbox: %s waits until %s: %s", e.Post, e.Until.UTC().Format(time.RFC3339), e.Reason)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }
