package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The outbox bucket holds two buckets: the queue, keyed by a big-endian
// sequence number so that a cursor walks it oldest first, and the index from
// a coalescing key to the sequence number of the entry that holds it. The
// records are opaque here: the outbox package encodes them.
var (
	outboxQueue = []byte("queue")
	outboxIndex = []byte("index")
)

// OutboxEntry is one queued record.
type OutboxEntry struct {
	// Seq is the entry's place in the queue; lower is older.
	Seq uint64
	// Key is the coalescing key ("" for none).
	Key string
	// Data is the record, as the outbox encoded it.
	Data []byte
}

// A stored entry is the key's length as a uvarint, the key, then the data.
func encodeOutbox(key string, data []byte) []byte {
	out := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(key)+len(data)), uint64(len(key)))
	out = append(out, key...)
	return append(out, data...)
}

func decodeOutbox(seq uint64, v []byte) (OutboxEntry, error) {
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n {
		return OutboxEntry{}, fmt.Errorf("outbox entry %d is damaged", seq)
	}
	key := string(v[w : w+int(n)])
	return OutboxEntry{Seq: seq, Key: key, Data: bytes.Clone(v[w+int(n):])}, nil
}

// queue is one durable queue with its coalescing index, in a bucket below
// the outbox bucket: the GitHub outbox's is the outbox bucket itself, each
// events webhook's its own (eventqueue.go). Both are this one shape.
type queue struct {
	t *Tx
	// path is the queue's bucket below the outbox bucket (none: the
	// outbox bucket itself).
	path [][]byte
	// label names the queue in errors ("outbox", "event queue hook:").
	label string
}

// outbox is the GitHub outbox's queue.
func (t *Tx) outbox() queue { return queue{t: t, label: "outbox"} }

// bucket returns the queue's own bucket, creating its path in a write
// transaction; in a read transaction it is nil when nothing was queued
// there yet.
func (q queue) bucket() (kvBucket, error) {
	b := q.t.tx.Bucket(bucketOutbox)
	if b == nil {
		return nil, fmt.Errorf("the state file has no outbox bucket")
	}
	for _, name := range q.path {
		if !q.t.tx.Writable() {
			if b = b.Bucket(name); b == nil {
				return nil, nil
			}
			continue
		}
		var err error
		if b, err = b.CreateBucketIfNotExists(name); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// buckets returns the queue and the index, creating them in a write
// transaction; in a read transaction on a store that never queued anything
// there they are nil.
func (q queue) buckets() (entries, index kvBucket, err error) {
	b, err := q.bucket()
	if err != nil || b == nil {
		return nil, nil, err
	}
	if !q.t.tx.Writable() {
		return b.Bucket(outboxQueue), b.Bucket(outboxIndex), nil
	}
	if entries, err = b.CreateBucketIfNotExists(outboxQueue); err != nil {
		return nil, nil, err
	}
	if index, err = b.CreateBucketIfNotExists(outboxIndex); err != nil {
		return nil, nil, err
	}
	return entries, index, nil
}

// append puts a new entry at the end of the queue and, when key is not "",
// indexes it by key (replacing what the index held for key). It returns the
// entry's sequence number.
func (q queue) append(key string, data []byte) (uint64, error) {
	entries, index, err := q.buckets()
	if err != nil {
		return 0, err
	}
	seq, err := entries.NextSequence()
	if err != nil {
		return 0, err
	}
	if err := entries.Put(u64(seq), encodeOutbox(key, data)); err != nil {
		return 0, err
	}
	if key != "" {
		if err := index.Put([]byte(key), u64(seq)); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

// lookup returns the entry that holds key, if one is queued.
func (q queue) lookup(key string) (OutboxEntry, bool, error) {
	entries, index, err := q.buckets()
	if err != nil || index == nil {
		return OutboxEntry{}, false, err
	}
	v := index.Get([]byte(key))
	if len(v) != 8 {
		return OutboxEntry{}, false, nil
	}
	return getEntry(entries, binary.BigEndian.Uint64(v))
}

// get returns the entry seq, if it is still queued.
func (q queue) get(seq uint64) (OutboxEntry, bool, error) {
	entries, _, err := q.buckets()
	if err != nil || entries == nil {
		return OutboxEntry{}, false, err
	}
	return getEntry(entries, seq)
}

func getEntry(entries kvBucket, seq uint64) (OutboxEntry, bool, error) {
	v := entries.Get(u64(seq))
	if v == nil {
		return OutboxEntry{}, false, nil
	}
	e, err := decodeOutbox(seq, v)
	return e, err == nil, err
}

// replace rewrites the data of entry seq in place: it keeps its place in
// the queue and its key.
func (q queue) replace(seq uint64, data []byte) error {
	entries, _, err := q.buckets()
	if err != nil {
		return err
	}
	old, ok, err := getEntry(entries, seq)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s entry %d is not queued", q.label, seq)
	}
	return entries.Put(u64(seq), encodeOutbox(old.Key, data))
}

// remove removes entry seq and its index key (when the index still points
// at it). Removing an entry that is gone is not an error.
func (q queue) remove(seq uint64) error {
	entries, index, err := q.buckets()
	if err != nil {
		return err
	}
	old, ok, err := getEntry(entries, seq)
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
	return entries.Delete(u64(seq))
}

// first returns the oldest queued entry.
func (q queue) first() (OutboxEntry, bool, error) {
	entries, _, err := q.buckets()
	if err != nil || entries == nil {
		return OutboxEntry{}, false, err
	}
	k, v := entries.First()
	if k == nil {
		return OutboxEntry{}, false, nil
	}
	e, err := decodeOutbox(binary.BigEndian.Uint64(k), v)
	return e, err == nil, err
}

// each visits the queued entries oldest first.
func (q queue) each(fn func(OutboxEntry) error) error {
	entries, _, err := q.buckets()
	if err != nil || entries == nil {
		return err
	}
	return entries.ForEach(func(k, v []byte) error {
		e, err := decodeOutbox(binary.BigEndian.Uint64(k), v)
		if err != nil {
			return err
		}
		return fn(e)
	})
}

// len counts the queued entries.
func (q queue) len() (int, error) {
	entries, _, err := q.buckets()
	if err != nil || entries == nil {
		return 0, err
	}
	return entries.Len()
}

// OutboxAppend puts a new entry at the end of the queue and, when key is not
// "", indexes it by key (replacing what the index held for key). It returns
// the entry's sequence number.
func (t *Tx) OutboxAppend(key string, data []byte) (uint64, error) {
	return t.outbox().append(key, data)
}

// OutboxLookup returns the entry that holds key, if one is queued.
func (t *Tx) OutboxLookup(key string) (OutboxEntry, bool, error) { return t.outbox().lookup(key) }

// OutboxGet returns the entry seq, if it is still queued.
func (t *Tx) OutboxGet(seq uint64) (OutboxEntry, bool, error) { return t.outbox().get(seq) }

// OutboxReplace rewrites the data of entry seq in place: it keeps its place
// in the queue and its key.
func (t *Tx) OutboxReplace(seq uint64, data []byte) error { return t.outbox().replace(seq, data) }

// OutboxDelete removes entry seq and its index key (when the index still
// points at it). Removing an entry that is gone is not an error.
func (t *Tx) OutboxDelete(seq uint64) error { return t.outbox().remove(seq) }

// OutboxFirst returns the oldest queued entry.
func (t *Tx) OutboxFirst() (OutboxEntry, bool, error) { return t.outbox().first() }

// OutboxEntries visits the queued entries oldest first.
func (t *Tx) OutboxEntries(fn func(OutboxEntry) error) error { return t.outbox().each(fn) }

// OutboxLen counts the queued entries.
func (t *Tx) OutboxLen() (int, error) { return t.outbox().len() }

// OnCommit runs fn after the transaction commits (never when it rolls back):
// the outbox wakes its deliverer there, once the entry can be read. Only a
// write transaction commits.
func (t *Tx) OnCommit(fn func()) { t.tx.OnCommit(fn) }

// OnCommitAt runs fn after the transaction commits with the revision it
// landed at (etcd's revision of the commit point; bbolt's transaction id):
// a log line that carries it says when its write landed, whenever the line
// is written.
func (t *Tx) OnCommitAt(fn func(rev int64)) {
	// bbolt numbers a transaction when it begins and forgets the number
	// once it closed; etcd's revision is known only once the commit landed.
	begun := t.tx.Revision()
	t.tx.OnCommit(func() {
		if r := t.tx.Revision(); r > 0 {
			begun = r
		}
		fn(begun)
	})
}
