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

// outboxBuckets returns the queue and the index, creating them in a write
// transaction; in a read transaction on a file that never queued anything
// they are nil.
func (t *Tx) outboxBuckets() (queue, index kvBucket, err error) {
	root := t.tx.Bucket(bucketOutbox)
	if root == nil {
		return nil, nil, fmt.Errorf("the state file has no outbox bucket")
	}
	if !t.tx.Writable() {
		return root.Bucket(outboxQueue), root.Bucket(outboxIndex), nil
	}
	if queue, err = root.CreateBucketIfNotExists(outboxQueue); err != nil {
		return nil, nil, err
	}
	if index, err = root.CreateBucketIfNotExists(outboxIndex); err != nil {
		return nil, nil, err
	}
	return queue, index, nil
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

// OutboxAppend puts a new entry at the end of the queue and, when key is not
// "", indexes it by key (replacing what the index held for key). It returns
// the entry's sequence number.
func (t *Tx) OutboxAppend(key string, data []byte) (uint64, error) {
	queue, index, err := t.outboxBuckets()
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

// OutboxLookup returns the entry that holds key, if one is queued.
func (t *Tx) OutboxLookup(key string) (OutboxEntry, bool, error) {
	queue, index, err := t.outboxBuckets()
	if err != nil || index == nil {
		return OutboxEntry{}, false, err
	}
	v := index.Get([]byte(key))
	if len(v) != 8 {
		return OutboxEntry{}, false, nil
	}
	return t.outboxGet(queue, binary.BigEndian.Uint64(v))
}

// OutboxGet returns the entry seq, if it is still queued.
func (t *Tx) OutboxGet(seq uint64) (OutboxEntry, bool, error) {
	queue, _, err := t.outboxBuckets()
	if err != nil || queue == nil {
		return OutboxEntry{}, false, err
	}
	return t.outboxGet(queue, seq)
}

func (t *Tx) outboxGet(queue kvBucket, seq uint64) (OutboxEntry, bool, error) {
	v := queue.Get(u64(seq))
	if v == nil {
		return OutboxEntry{}, false, nil
	}
	e, err := decodeOutbox(seq, v)
	return e, err == nil, err
}

// OutboxReplace rewrites the data of entry seq in place: it keeps its place
// in the queue and its key.
func (t *Tx) OutboxReplace(seq uint64, data []byte) error {
	queue, _, err := t.outboxBuckets()
	if err != nil {
		return err
	}
	old, ok, err := t.outboxGet(queue, seq)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("outbox entry %d is not queued", seq)
	}
	return queue.Put(u64(seq), encodeOutbox(old.Key, data))
}

// OutboxDelete removes entry seq and its index key (when the index still
// points at it). Removing an entry that is gone is not an error.
func (t *Tx) OutboxDelete(seq uint64) error {
	queue, index, err := t.outboxBuckets()
	if err != nil {
		return err
	}
	old, ok, err := t.outboxGet(queue, seq)
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

// OutboxFirst returns the oldest queued entry.
func (t *Tx) OutboxFirst() (OutboxEntry, bool, error) {
	queue, _, err := t.outboxBuckets()
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

// OutboxEntries visits the queued entries oldest first.
func (t *Tx) OutboxEntries(fn func(OutboxEntry) error) error {
	queue, _, err := t.outboxBuckets()
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

// OutboxLen counts the queued entries.
func (t *Tx) OutboxLen() (int, error) {
	queue, _, err := t.outboxBuckets()
	if err != nil || queue == nil {
		return 0, err
	}
	return queue.Len()
}

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
