// Package webhooks is the delivery of the agent's events to the receivers
// of events.webhooks: each webhook has its own durable queue in the state
// file (beside the GitHub outbox, never in it), filled in the caller's
// transaction, coalesced per subject, delivered oldest first by one loop
// per webhook with capped exponential backoff, and resumed after a restart.
//
// # Once, and only once
//
// An event is written to a webhook's queue with its CloudEvents id before
// anything is sent, and deleted in the transaction that records the
// receiver's 2xx: after a restart nothing delivered is sent again, and
// what was not delivered is sent with the same id. A send whose answer was
// lost (the agent stopped or the network broke after the request left) is
// sent again with the same id, and the receiver tells the two apart by it:
// receivers must treat the id as the delivery's identity (docs/drift.md).
//
// # Coalescing and isolation
//
// Two events with the same subject and type for one webhook are one: the
// newer replaces the queued one in its place (a drift that changes while
// its receiver is down arrives once, as it is now). A webhook's failures
// hold only its own queue: each webhook has its own loop, and none of them
// touches the GitHub outbox's queue. A 4xx other than 408 and 429 drops the
// event (the same request would meet the same answer) with an error line;
// anything else is retried.
//
// # Secrets
//
// A webhook's secret (and its URL, which for Slack is a credential) are
// references resolved at each send and never kept: the queue holds the
// event, the status names the webhook by its id and the URL's host, and a
// failure is recorded by its class, never with the receiver's answer or
// the URL.
package webhooks

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/events"
	"github.com/fleet-agent/fleet-agent/internal/secrets"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Hook is one configured receiver.
type Hook struct {
	// URL is the receiver's address, or a secret reference to it (a Slack
	// incoming webhook's URL is itself a credential).
	URL string
	// Secret is the reference to the HMAC key; "" sends unsigned.
	Secret string
	// Events are the event types it wants; empty for all.
	Events []string
	// Format is cloudevents (the default) or slack.
	Format string
}

// ID names the webhook's queue: a hash of its URL as written, so that a
// reordered list keeps each queue and a changed URL starts a new one.
func (h Hook) ID() string {
	s := sha256.Sum256([]byte(h.URL))
	return "wh-" + hex.EncodeToString(s[:6])
}

// Display names the webhook for people without revealing anything secret:
// the reference as written, or the scheme and host of a plain URL.
func (h Hook) Display() string {
	if secrets.LooksLikeRef(h.URL) {
		return h.URL
	}
	u, err := url.Parse(h.URL)
	if err != nil || u.Host == "" {
		return h.ID()
	}
	return u.Scheme + "://" + u.Host
}

// Wants reports whether the hook takes events of type t.
func (h Hook) Wants(t string) bool { return len(h.Events) == 0 || slices.Contains(h.Events, t) }

// record is one queued event.
type record struct {
	Event events.Event `json:"event"`
	// Rev counts replacements by coalescing: a delivery deletes the entry
	// only if it still holds what was sent.
	Rev uint64 `json:"rev,omitempty"`
	// InFlight: a send may have reached the receiver, its answer unknown.
	InFlight  bool   `json:"inFlight,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
	NotBefore int64  `json:"notBefore,omitempty"` // Unix ms; 0 for now
	LastError string `json:"lastError,omitempty"`
	QueuedAt  int64  `json:"queuedAt,omitempty"` // Unix ms
}

func decode(e state.OutboxEntry) (record, error) {
	var r record
	if err := json.Unmarshal(e.Data, &r); err != nil {
		return record{}, fmt.Errorf("event queue entry %d: %w", e.Seq, err)
	}
	return r, nil
}

func (r record) encode() []byte {
	data, err := json.Marshal(r)
	if err != nil {
		panic(err) // plain strings, numbers and JSON data
	}
	return data
}

func key(e events.Event) string { return e.Type + "\x00" + e.Subject }

// Enqueue queues e, inside the caller's transaction, for every hook that
// wants it, coalescing it with a queued event of the same type and subject.
func Enqueue(tx *state.Tx, hooks []Hook, e events.Event, at time.Time) error {
	for _, h := range hooks {
		if !h.Wants(e.Type) {
			continue
		}
		q := tx.EventQueue(h.ID())
		old, ok, err := q.Lookup(key(e))
		if err != nil {
			return err
		}
		if !ok {
			if _, err := q.Append(key(e), record{Event: e, QueuedAt: at.UnixMilli()}.encode()); err != nil {
				return err
			}
			continue
		}
		rec, err := decode(old)
		if err != nil {
			return err
		}
		// Same place; the hold stays (a failing receiver does not
		// recover because the content changed).
		rec.Event = e
		rec.Rev++
		if err := q.Replace(old.Seq, rec.encode()); err != nil {
			return err
		}
	}
	return nil
}

// Delivery is one outcome the status shows.
type Delivery struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Subject string    `json:"subject"`
	At      time.Time `json:"at"`
	Code    int       `json:"code,omitempty"`  // the receiver's HTTP status, 0 for none
	Error   string    `json:"error,omitempty"` // the failure's class, "" for a delivery
	Dropped bool      `json:"dropped,omitempty"`
}

// meta is what the state keeps per webhook for the status.
type meta struct {
	Delivered []Delivery `json:"delivered,omitempty"` // newest last
	Failures  []Delivery `json:"failures,omitempty"`  // newest last
	Total     int64      `json:"total,omitempty"`
	Failed    int64      `json:"failed,omitempty"`
	Dropped   int64      `json:"dropped,omitempty"`
}

// keep is how many deliveries and failures the status remembers.
const keep = 10

func (m *meta) add(d Delivery) {
	if d.Error == "" {
		m.Total++
		m.Delivered = append(m.Delivered, d)
		if len(m.Delivered) > keep {
			m.Delivered = m.Delivered[len(m.Delivered)-keep:]
		}
		return
	}
	m.Failed++
	if d.Dropped {
		m.Dropped++
	}
	m.Failures = append(m.Failures, d)
	if len(m.Failures) > keep {
		m.Failures = m.Failures[len(m.Failures)-keep:]
	}
}

func readMeta(q state.EventQueue) (meta, error) {
	var m meta
	data, err := q.Meta()
	if err != nil || data == nil {
		return m, err
	}
	return m, json.Unmarshal(data, &m)
}

// Status is one webhook as `status` and the page show it.
type Status struct {
	ID        string     `json:"id"`
	Receiver  string     `json:"receiver"`
	Format    string     `json:"format"`
	Events    []string   `json:"events,omitempty"`
	Queued    int        `json:"queued"`
	Oldest    *time.Time `json:"oldestQueued,omitempty"`
	HeldUntil *time.Time `json:"heldUntil,omitempty"`
	LastError string     `json:"lastError,omitempty"`
	Delivered int64      `json:"delivered"`
	Failed    int64      `json:"failed"`
	Dropped   int64      `json:"dropped"`
	Recent    []Delivery `json:"recent,omitempty"`   // newest last
	Failures  []Delivery `json:"failures,omitempty"` // newest last
}

// Statuses reads every hook's status.
func Statuses(tx *state.Tx, hooks []Hook) ([]Status, error) {
	out := make([]Status, 0, len(hooks))
	for _, h := range hooks {
		q := tx.EventQueue(h.ID())
		format := h.Format
		if format == "" {
			format = "cloudevents"
		}
		s := Status{ID: h.ID(), Receiver: h.Display(), Format: format, Events: h.Events}
		err := q.Entries(func(e state.OutboxEntry) error {
			r, err := decode(e)
			if err != nil {
				return err
			}
			if s.Queued == 0 {
				if r.QueuedAt != 0 {
					t := time.UnixMilli(r.QueuedAt).UTC()
					s.Oldest = &t
				}
				if r.NotBefore != 0 {
					t := time.UnixMilli(r.NotBefore).UTC()
					s.HeldUntil = &t
				}
				s.LastError = r.LastError
			}
			s.Queued++
			return nil
		})
		if err != nil {
			return nil, err
		}
		m, err := readMeta(q)
		if err != nil {
			return nil, err
		}
		s.Delivered, s.Failed, s.Dropped, s.Recent, s.Failures = m.Total, m.Failed, m.Dropped, m.Delivered, m.Failures
		out = append(out, s)
	}
	return out, nil
}

func isRef(s string) bool { return secrets.LooksLikeRef(s) }

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// Queue is what the agent and the substrate reconciler queue events
// through: each event goes, in the caller's transaction, to the queue of
// every hook that wants it, and the deliverer is woken once it commits.
type Queue struct {
	Hooks     []Hook
	Deliverer *Deliverer // nil: the loops' timers find the events
	Now       func() time.Time
	// Source is the events' CloudEvents source (the agent's tenant).
	Source string
	// Redact masks resolved secret values in an event before it is
	// written to the state file; nil for none.
	Redact func(string) string
}

// SubstrateChanged queues substrate.ready or substrate.error for a
// substrate that became so (the substrate reconciler's StateEvents).
func (q *Queue) SubstrateChanged(tx *state.Tx, poolID string, to state.SubstrateState, message string) error {
	typ := events.SubstrateReady
	if to == state.SubstrateError {
		typ = events.SubstrateError
	}
	now := time.Now
	if q != nil && q.Now != nil {
		now = q.Now
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	src := "urn:fleet-agent"
	if q != nil && q.Source != "" {
		src = q.Source
	}
	return q.Enqueue(tx, events.Event{ID: hex.EncodeToString(id[:]), Type: typ, Source: src, Subject: "substrate/" + poolID,
		Time: now().UTC(), Summary: "substrate " + poolID + " is " + string(to),
		Data: map[string]any{"poolId": poolID, "state": string(to), "message": message}})
}

// Enqueue queues e inside tx.
func (q *Queue) Enqueue(tx *state.Tx, e events.Event) error {
	if q == nil || len(q.Hooks) == 0 {
		return nil
	}
	now := time.Now
	if q.Now != nil {
		now = q.Now
	}
	if err := Enqueue(tx, q.Hooks, redact(e, q.Redact), now()); err != nil {
		return err
	}
	if q.Deliverer != nil {
		tx.OnCommit(q.Deliverer.Wake)
	}
	return nil
}
