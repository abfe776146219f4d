package state

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
type EventQueue struct{ q queue }

// EventQueue returns the queue of the webhook named hook.
func (t *Tx) EventQueue(hook string) EventQueue {
	return EventQueue{queue{t: t, path: [][]byte{eventsRoot, []byte(hook)}, label: "event queue " + hook + ":"}}
}

// Append puts a new entry at the end of the queue, indexed by key when key
// is not "".
func (q EventQueue) Append(key string, data []byte) (uint64, error) { return q.q.append(key, data) }

// Lookup returns the entry that holds key, if one is queued.
func (q EventQueue) Lookup(key string) (OutboxEntry, bool, error) { return q.q.lookup(key) }

// Get returns the entry seq, if it is still queued.
func (q EventQueue) Get(seq uint64) (OutboxEntry, bool, error) { return q.q.get(seq) }

// Replace rewrites the data of entry seq in place (its place and its key).
func (q EventQueue) Replace(seq uint64, data []byte) error { return q.q.replace(seq, data) }

// Delete removes entry seq and its index key when the index points at it.
func (q EventQueue) Delete(seq uint64) error { return q.q.remove(seq) }

// First returns the oldest queued entry.
func (q EventQueue) First() (OutboxEntry, bool, error) { return q.q.first() }

// Entries visits the queued entries oldest first.
func (q EventQueue) Entries(fn func(OutboxEntry) error) error { return q.q.each(fn) }

// Meta returns the webhook's meta record (nil when none).
func (q EventQueue) Meta() ([]byte, error) {
	b, err := q.own()
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
	b, err := q.own()
	if err != nil {
		return err
	}
	return b.Put(eventsMeta, data)
}

// own is the webhook's bucket, with its queue and index made in a write
// transaction as every other use of the queue makes them.
func (q EventQueue) own() (kvBucket, error) {
	if _, _, err := q.q.buckets(); err != nil {
		return nil, err
	}
	return q.q.bucket()
}
