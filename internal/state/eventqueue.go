package state

import (
	"encoding/binary"
	"fmt"
)

// Each events webhook has its own queue, beside the GitHub outbox's and
// never in it: a receiver that fails for a day holds only its own queue.
// They live under the outbox bucket in "events", one bucket per webhook id
// holding its queue, its index (coalescing key to sequence number) and a
// meta record (the webhook's recent deliveries, as the caller encodes them).
var (
	eventsRoot = []byte("events")
	eventsMeta = []byte("meta")
)

// EventQueue is one webhook's queue inside a transaction. Its entries are
// OutboxEntry values: the same shape as the GitHub outbox's, opaque here.
type EventQueue struct {
	t    *Tx
	hook []byte
}

// EventQueue returns the queue of the webhook named hook.
func (t *Tx) EventQueue(hook string) EventQueue { return EventQueue{t: t, hook: []byte(hook)} }

// buckets returns the webhook's bucket, queue and index, creating them in a
// write transaction; in a read transaction they may be nil.
func (q EventQueue) buckets() (b, queue, index kvBucket, err error) {
	root := q.t.tx.Bucket(bucketOutbox)
	if root == nil {
		return nil, nil, nil, fmt.Errorf("the state file has no outbox bucket")
	}
	if !q.t.tx.Writable() {
		ev := root.Bucket(eventsRoot)
		if ev == nil {
			return nil, nil, nil, nil
		}
		if b = ev.Bucket(q.hook); b == nil {
			return nil, nil, nil, nil
		}
		return b, b.Bucket(outboxQueue), b.Bucket(outboxIndex), nil
	}
	ev, err := root.CreateBucketIfNotExists(eventsRoot)
	if err != nil {
		return nil, nil, nil, err
	}
	if b, err = ev.CreateBucketIfNotExists(q.hook); err != nil {
		return nil, nil, nil, err
	}
	if queue, err = b.CreateBucketIfNotExists(outboxQueue); err != nil {
		return nil, nil, nil, err
	}
	if index, err = b.CreateBucketIfNotExists(outboxIndex); err != nil {
		return nil, nil, nil, err
	}
	return b, queue, index, nil
}

// Append puts a new entry at the end of the queue, indexed by key when key
// is not "".
func (q EventQueue) Append(key string, data []byte) (uint64, error) {
	_, queue, index, err := q.buckets()
	if err != nil {
		return 0, err
	}
	seq, err := queue.NextSequence()
	if err != nil {
		return 0, err
	}
	if err := queue.Put(u64(seq), encodeOutbox(key, data)); err != nil {
		return 0, err
	}
	if key != "" {
		if err := index.Put([]byte(key), u64(seq)); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

// Lookup returns the entry that holds key, if one is queued.
func (q EventQueue) Lookup(key string) (OutboxEntry, bool, error) {
	_, queue, index, err := q.buckets()
	if err != nil || index == nil {
		return OutboxEntry{}, false, err
	}
	v := index.Get([]byte(key))
	if len(v) != 8 {
		return OutboxEntry{}, false, nil
	}
	return q.t.outboxGet(queue, binary.BigEndian.Uint64(v))
}

// Get returns the entry seq, if it is still queued.
func (q EventQueue) Get(seq uint64) (OutboxEntry, bool, error) {
	_, queue, _, err := q.buckets()
	if err != nil || queue == nil {
		return OutboxEntry{}, false, err
	}
	return q.t.outboxGet(queue, seq)
}

// Replace rewrites the data of entry seq in place (its place and its key).
func (q EventQueue) Replace(seq uint64, data []byte) error {
	_, queue, _, err := q.buckets()
	if err != nil {
		return err
	}
	old, ok, err := q.t.outboxGet(queue, seq)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("event queue %s: entry %d is not queued", q.hook, seq)
	}
	return queue.Put(u64(seq), encodeOutbox(old.Key, data))
}

// Delete removes entry seq and its index key when the index points at it.
func (q EventQueue) Delete(seq uint64) error {
	_, queue, index, err := q.buckets()
	if err != nil {
		return err
	}
	old, ok, err := q.t.outboxGet(queue, seq)
	if err != nil || !ok {
		return err
	}
	if old.Key != "" {
		if v := index.Get([]byte(old.Key)); len(v) == 8 && binary.BigEndian.Uint64(v) == seq {
			if err := index.Delete([]byte(old.Key)); err != nil {
				return err
			}
		}
	}
	return queue.Delete(u64(seq))
}

// First returns the oldest queued entry.
func (q EventQueue) First() (OutboxEntry, bool, error) {
	_, queue, _, err := q.buckets()
	if err != nil || queue == nil {
		return OutboxEntry{}, false, err
	}
	k, v := queue.First()
	if k == nil {
		return OutboxEntry{}, false, nil
	}
	e, err := decodeOutbox(binary.BigEndian.Uint64(k), v)
	return e, err == nil, err
}

// Entries visits the queued entries oldest first.
func (q EventQueue) Entries(fn func(OutboxEntry) error) error {
	_, queue, _, err := q.buckets()
	if err != nil || queue == nil {
		return err
	}
	return queue.ForEach(func(k, v []byte) error {
		e, err := decodeOutbox(binary.BigEndian.Uint64(k), v)
		if err != nil {
			return err
		}
		return fn(e)
	})
}

// Meta returns the webhook's meta record (nil when none).
func (q EventQueue) Meta() ([]byte, error) {
	b, _, _, err := q.buckets()
	if err != nil || b == nil {
		return nil, err
	}
	if v := b.Get(eventsMeta); v != nil {
		return append([]byte(nil), v...), nil
	}
	return nil, nil
}

// SetMeta replaces the webhook's meta record.
func (q EventQueue) SetMeta(data []byte) error {
	b, _, _, err := q.buckets()
	if err != nil {
		return err
	}
	return b.Put(eventsMeta, data)
}
