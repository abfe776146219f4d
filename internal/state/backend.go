package state

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// The store's records live in nested buckets of sorted keys, the shape
// bbolt gives. The records' code (state.go, records.go, outbox.go, ...) is
// written against the two interfaces below, and each backend gives them:
// bbolt directly (this file), etcd by mapping a bucket path and a key to
// one etcd key (etcd.go). A backend's transaction is what the records see
// as one: every reader sees all of it or none.

// kvTx is one transaction of a backend.
type kvTx interface {
	Bucket(name []byte) kvBucket
	CreateBucketIfNotExists(name []byte) (kvBucket, error)
	Writable() bool
	OnCommit(fn func())
	// Revision names the commit, read in an OnCommit callback: etcd's
	// revision of its commit point, bbolt's transaction id.
	Revision() int64
}

// kvBucket is one bucket: sorted keys with values, and nested buckets.
type kvBucket interface {
	Get(key []byte) []byte
	Put(key, value []byte) error
	Delete(key []byte) error
	// Bucket is nil when the bucket does not exist.
	Bucket(name []byte) kvBucket
	CreateBucketIfNotExists(name []byte) (kvBucket, error)
	// ForEach visits the keys (never nested buckets) in order.
	ForEach(fn func(k, v []byte) error) error
	// Scan visits, in order, the keys that start with prefix.
	Scan(prefix []byte, fn func(k, v []byte) error) error
	// Reverse visits the keys newest (largest) first until fn says stop.
	Reverse(fn func(k, v []byte) (more bool, err error)) error
	// First is the smallest key and its value; nil when the bucket is empty.
	First() (k, v []byte)
	NextSequence() (uint64, error)
	// SetSequence sets the sequence (a copy keeps the source's).
	SetSequence(n uint64) error
	Len() (int, error)
}

// boltTx is a bbolt transaction as a kvTx.
type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Bucket(name []byte) kvBucket { return wrapBolt(t.tx.Bucket(name)) }

func (t boltTx) CreateBucketIfNotExists(name []byte) (kvBucket, error) {
	b, err := t.tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return boltBucket{b}, nil
}

func (t boltTx) Writable() bool     { return t.tx.Writable() }
func (t boltTx) OnCommit(fn func()) { t.tx.OnCommit(fn) }
func (t boltTx) Revision() int64    { return int64(t.tx.ID()) }

// wrapBolt keeps a missing bucket a nil interface, not an interface
// holding a nil pointer.
func wrapBolt(b *bolt.Bucket) kvBucket {
	if b == nil {
		return nil
	}
	return boltBucket{b}
}

type boltBucket struct{ b *bolt.Bucket }

func (b boltBucket) Get(key []byte) []byte       { return b.b.Get(key) }
func (b boltBucket) Put(key, value []byte) error { return b.b.Put(key, value) }
func (b boltBucket) Delete(key []byte) error     { return b.b.Delete(key) }
func (b boltBucket) Bucket(name []byte) kvBucket { return wrapBolt(b.b.Bucket(name)) }

func (b boltBucket) CreateBucketIfNotExists(name []byte) (kvBucket, error) {
	nb, err := b.b.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return boltBucket{nb}, nil
}

func (b boltBucket) ForEach(fn func(k, v []byte) error) error {
	return b.b.ForEach(func(k, v []byte) error {
		if v == nil { // a nested bucket
			return nil
		}
		return fn(k, v)
	})
}

func (b boltBucket) Scan(prefix []byte, fn func(k, v []byte) error) error {
	c := b.b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if v == nil {
			continue
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (b boltBucket) Reverse(fn func(k, v []byte) (bool, error)) error {
	c := b.b.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		if v == nil {
			continue
		}
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (b boltBucket) First() ([]byte, []byte) {
	c := b.b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			return k, v
		}
	}
	return nil, nil
}

func (b boltBucket) NextSequence() (uint64, error) { return b.b.NextSequence() }
func (b boltBucket) SetSequence(n uint64) error    { return b.b.SetSequence(n) }

func (b boltBucket) Len() (int, error) {
	n := 0
	err := b.ForEach(func(_, _ []byte) error { n++; return nil })
	return n, err
}
