package state

import (
	"context"
	"io"
)

// The store's records live in nested buckets of sorted keys, the shape
// bbolt gives. The records' code (state.go, records.go, outbox.go, ...) is
// written against the interfaces below, and each backend gives them: bbolt
// directly (bolt.go), etcd by mapping a bucket path and a key to one etcd
// key (etcd.go, with its election in leader.go). A backend's transaction is
// what the records see as one: every reader sees all of it or none. What
// differs between the backends beyond that (leadership, backups, checks)
// is a method of backend too, so the store never asks which one it has.

// backend runs transactions and answers for what the two backends do
// differently.
type backend interface {
	view(fn func(kvTx) error) error
	update(fn func(kvTx) error) error
	// updateIn is update fenced by the term l: refused once l ended. A nil
	// l is update.
	updateIn(l *Leadership, fn func(kvTx) error) error
	close() error
	// kind names the backend: "bbolt" or "etcd".
	kind() string
	// walk visits every record with its bucket path; a nil key carries
	// the bucket's sequence as decimal text.
	walk(fn func(path [][]byte, k, v []byte) error) error
	// backup writes a bbolt file holding the store's records at path;
	// writeBackup streams one to w. s is the store, for a backend that
	// builds the file by copying its records.
	backup(s *Store, path string) error
	writeBackup(s *Store, w io.Writer) (int64, error)
	// check checks the backend's own structure, then the records (s).
	check(s *Store) error
	// auditKeep is how many audit rows the store keeps (0: all).
	auditKeep() uint64

	// campaign blocks until this store leads, or ctx ends.
	campaign(ctx context.Context) (*Leadership, error)
	// mayWrite reports whether this store may write now.
	mayWrite() bool
	// fence is nil while l is this store's current term and its hold is
	// good now; with a nil l, while this store may write.
	fence(l *Leadership) error
	// leaderName names the agent that leads ("" when none, or no election).
	leaderName(ctx context.Context) (string, error)
	// agentName is this agent's name in the election ("" without one).
	agentName() string
	// health asks each server of the backend for its status (nil: none).
	health(ctx context.Context) []EndpointHealth
	// etcdStats are the etcd backend's counters (nil on bbolt).
	etcdStats() *EtcdStats
}

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

var (
	_ backend = boltBackend{}
	_ backend = (*etcdBackend)(nil)
)
