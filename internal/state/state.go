// Package state is the store: the fleet's objects, the names fleet gave
// them, the applied document, drift, the audit log and the agent's own
// records (reviewed plans, proposals, the outbox, the substrates and the
// journal of their provider operations, the hashed join tokens and joined
// nodes), in one bbolt file (bolt.go) or under a prefix of an etcd cluster
// (etcd.go, leader.go). The records are written against one interface of
// the backend (backend.go) and never ask which backend they are on. A store
// has one writer: every change is one transaction, so a kill at any moment
// leaves either the old fleet or the new one.
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// FormatVersion is the store format this build writes. A file written by a
// newer build is refused rather than misread.
const FormatVersion = 1

var (
	bucketMeta      = []byte("meta")
	bucketObjects   = []byte("objects")
	bucketNames     = []byte("names")
	bucketApplied   = []byte("applied")
	bucketDrift     = []byte("drift")
	bucketAudit     = []byte("audit")
	bucketReviewed  = []byte("reviewed")
	bucketProposals = []byte("proposals")
	bucketOutbox    = []byte("outbox")
	bucketJournal   = []byte("journal")
	bucketKV        = []byte("kv")
	// bucketSubstrates and bucketJoins are declared with their records
	// (substrates.go, joins.go).

	keyFormat     = []byte("format")
	keyGeneration = []byte("generation")
	keyCreated    = []byte("created")
	keyCurrent    = []byte("current")
	// keyInstallation holds the installation id: 128 random bits as 32
	// lower-case hex characters, a form that fits a GCP label value, an EKS
	// tag and a DOKS key:value tag alike.
	keyInstallation = []byte("installation")
	// keyOwnedNames is set once the substrates a file records name and label
	// what they make from the installation; the substrates recorded before
	// it was set keep their names (markLegacyNames).
	keyOwnedNames = []byte("ownedNames")
)

var allBuckets = [][]byte{bucketMeta, bucketObjects, bucketNames, bucketApplied, bucketDrift, bucketAudit,
	bucketReviewed, bucketProposals, bucketOutbox, bucketJournal, bucketKV, bucketSubstrates, bucketJoins}

// Store is an open store: a bbolt file (bolt.go), or a prefix of an etcd
// cluster (etcd.go).
type Store struct {
	be   backend
	path string
}

// Options tune Open.
type Options struct {
	// LockTimeout is how long Open waits for another process to let go of
	// the file. Short by default: a running agent holds it for its whole
	// life, so waiting longer would only hang the command line.
	LockTimeout time.Duration
	// ReadOnly opens the file for reading (it must exist).
	ReadOnly bool
	// Now stamps the creation record; tests inject it.
	Now func() time.Time
	// NoSync skips fsync on commit, for tests that crash the process, not
	// the machine: a killed process loses nothing the kernel already holds,
	// a machine that loses power may. Never set in production.
	NoSync bool
	// Installation is the id a file made by this open gets, instead of a
	// random one: tests that compare names with fixed ones set it. An
	// existing file keeps its own. Never set in production.
	Installation string
}

// prepare makes the buckets and the meta records of a new store, and
// brings an older one up to date, in one write transaction.
func prepare(tx kvTx, opts Options) error {
	for _, b := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if meta.Get(keyFormat) == nil {
		if err := meta.Put(keyFormat, []byte(strconv.Itoa(FormatVersion))); err != nil {
			return err
		}
		if err := meta.Put(keyCreated, []byte(strconv.FormatInt(opts.Now().UnixMilli(), 10))); err != nil {
			return err
		}
	}
	// A file made before installations gets its id on first open, in
	// this same write transaction, and the substrates it recorded
	// before its names derived from the installation keep the names
	// they have (markLegacyNames).
	if meta.Get(keyOwnedNames) == nil {
		if err := markLegacyNames(tx); err != nil {
			return err
		}
		if err := meta.Put(keyOwnedNames, []byte("1")); err != nil {
			return err
		}
	}
	if meta.Get(keyInstallation) == nil {
		if opts.Installation != "" {
			return meta.Put(keyInstallation, []byte(opts.Installation))
		}
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		return meta.Put(keyInstallation, []byte(hex.EncodeToString(b[:])))
	}
	return nil
}

func (s *Store) checkFormat() error {
	return s.be.view(func(tx kvTx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return refusal.New(refusal.InvalidState, "%s is not a fleet-agent state file (no meta bucket)", s.path)
		}
		v, err := strconv.Atoi(string(meta.Get(keyFormat)))
		if err != nil {
			return refusal.New(refusal.InvalidState, "%s has no readable format version; it is not a fleet-agent state file", s.path)
		}
		if v > FormatVersion {
			return refusal.New(refusal.InvalidState, "%s was written by a newer fleet-agent (store format %d; this build reads up to %d); upgrade fleet-agent", s.path, v, FormatVersion)
		}
		return nil
	})
}

// Installation is the id of the installation this file belongs to (32
// lower-case hex characters). A read-only open of a file made before
// installations answers "" until a writer has opened it once.
func (s *Store) Installation() string {
	var id string
	_ = s.be.view(func(tx kvTx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			id = string(meta.Get(keyInstallation))
		}
		return nil
	})
	return id
}

// Path is the file's path.
func (s *Store) Path() string { return s.path }

// Close closes the file or lets go of etcd (and of any leadership).
func (s *Store) Close() error { return s.be.close() }

// View runs fn in a read transaction.
func (s *Store) View(fn func(*Tx) error) error {
	return s.be.view(func(tx kvTx) error { return fn(s.tx(tx)) })
}

func (s *Store) tx(tx kvTx) *Tx {
	return &Tx{tx: tx, auditKeep: s.be.auditKeep()}
}

// Update runs fn in the one write transaction; an error rolls it all back.
// On etcd it is fenced: it commits only while this store leads (Lead).
func (s *Store) Update(fn func(*Tx) error) error {
	return s.be.update(func(tx kvTx) error { return fn(s.tx(tx)) })
}

// Snapshot reads the fleet in one read transaction.
func (s *Store) Snapshot() (*inventory.Snapshot, error) {
	snap, _, err := s.SnapshotAt()
	return snap, err
}

// SnapshotAt reads the fleet and the generation it was read at.
func (s *Store) SnapshotAt() (*inventory.Snapshot, uint64, error) {
	var snap *inventory.Snapshot
	var gen uint64
	err := s.View(func(tx *Tx) error {
		var err error
		snap, err = tx.Snapshot()
		gen = tx.Generation()
		return err
	})
	return snap, gen, err
}

// Backup writes a consistent copy of the store to a new bbolt file at path
// while others read and write: bbolt copies its file inside a read
// transaction; etcd writes a file holding the same records (CopyTo), so a
// restore works on one box.
func (s *Store) Backup(path string) error { return s.be.backup(s, path) }

// Check checks the store: bbolt's consistency check over the whole file;
// on etcd, every record read back (CheckRecords).
func (s *Store) Check() error { return s.be.check(s) }

// Tx is a transaction on the store.
type Tx struct {
	tx     kvTx
	bumped bool
	// auditKeep bounds the audit log on etcd (EtcdOptions.AuditKeep).
	auditKeep uint64
}

// Generation counts the transactions that changed an object. Two reads at
// the same generation saw the same fleet, so a plan made from the first is
// the plan of the second: an apply uses this to know, inside its write
// transaction, that the fleet did not move since it checked its calls.
func (t *Tx) Generation() uint64 {
	v := t.tx.Bucket(bucketMeta).Get(keyGeneration)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// touch moves the generation on, once per transaction.
func (t *Tx) touch() error {
	if t.bumped {
		return nil
	}
	t.bumped = true
	return t.tx.Bucket(bucketMeta).Put(keyGeneration, u64(t.Generation()+1))
}

// Writable reports whether tx can write.
func (t *Tx) Writable() bool { return t.tx.Writable() }

func nameKey(k inventory.Kind, name string) []byte {
	return append(append([]byte(k), 0), name...)
}

// Snapshot reads every object with its fleet name.
func (t *Tx) Snapshot() (*inventory.Snapshot, error) {
	root := t.tx.Bucket(bucketObjects)
	names := t.tx.Bucket(bucketNames)
	idToName := map[string]string{}
	if err := names.ForEach(func(k, v []byte) error {
		_, name, ok := bytes.Cut(k, []byte{0})
		if ok {
			idToName[string(v)] = string(name)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var objects []inventory.Object
	for _, kind := range inventory.Kinds {
		b := root.Bucket([]byte(kind))
		if b == nil {
			continue
		}
		err := b.ForEach(func(k, v []byte) error {
			o, err := decodeObject(v)
			if err != nil {
				return fmt.Errorf("object %s/%s: %w", kind, k, err)
			}
			o.Kind, o.ID = kind, string(k)
			o.Name = o.ID
			if n, ok := idToName[o.ID]; ok {
				o.Name = n
			}
			objects = append(objects, o)
			return nil
		})
		if err != nil {
			return nil, refusal.Wrap(refusal.InvalidState, err, "the state file is damaged; restore a backup")
		}
	}
	running, err := t.clusterVersions()
	if err != nil {
		return nil, refusal.Wrap(refusal.InvalidState, err, "the state file is damaged; restore a backup")
	}
	return inventory.NewSnapshot(objects).WithClusterVersions(running), nil
}

// storedObject is what one object record holds; kind, id and name live in
// the keys.
type storedObject struct {
	Spec     map[string]any `json:"spec"`
	Archived bool           `json:"archived,omitempty"`
}

func decodeObject(v []byte) (inventory.Object, error) {
	var so storedObject
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&so); err != nil {
		return inventory.Object{}, err
	}
	spec, _ := inventory.Normalize(so.Spec).(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	return inventory.Object{Spec: spec, Archived: so.Archived}, nil
}

// PutObject writes an object and, when name is not "", the name fleet gave it.
func (t *Tx) PutObject(o inventory.Object, name string) error {
	if err := t.touch(); err != nil {
		return err
	}
	b, err := t.tx.Bucket(bucketObjects).CreateBucketIfNotExists([]byte(o.Kind))
	if err != nil {
		return err
	}
	data, err := json.Marshal(storedObject{Spec: o.Spec, Archived: o.Archived})
	if err != nil {
		return err
	}
	if err := b.Put([]byte(o.ID), data); err != nil {
		return err
	}
	if name != "" {
		return t.tx.Bucket(bucketNames).Put(nameKey(o.Kind, name), []byte(o.ID))
	}
	return nil
}

// GetObject reads one object by kind and id.
func (t *Tx) GetObject(k inventory.Kind, id string) (inventory.Object, bool, error) {
	b := t.tx.Bucket(bucketObjects).Bucket([]byte(k))
	if b == nil {
		return inventory.Object{}, false, nil
	}
	v := b.Get([]byte(id))
	if v == nil {
		return inventory.Object{}, false, nil
	}
	o, err := decodeObject(v)
	o.Kind, o.ID = k, id
	return o, true, err
}

// DeleteObject removes an object and its name.
func (t *Tx) DeleteObject(k inventory.Kind, id string, name string) error {
	if err := t.touch(); err != nil {
		return err
	}
	if b := t.tx.Bucket(bucketObjects).Bucket([]byte(k)); b != nil {
		if err := b.Delete([]byte(id)); err != nil {
			return err
		}
	}
	if name != "" {
		names := t.tx.Bucket(bucketNames)
		if v := names.Get(nameKey(k, name)); v != nil && string(v) == id {
			return names.Delete(nameKey(k, name))
		}
	}
	return nil
}

// putJSON and getJSON keep single records.
func (t *Tx) putJSON(bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return t.tx.Bucket(bucket).Put(key, data)
}

func (t *Tx) getJSON(bucket, key []byte, v any) (bool, error) {
	data := t.tx.Bucket(bucket).Get(key)
	if data == nil {
		return false, nil
	}
	return true, json.Unmarshal(data, v)
}

func u64(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

// WriteBackup streams a consistent copy of the store to w, as a bbolt file
// (a read transaction: writers go on meanwhile).
func (s *Store) WriteBackup(w io.Writer) (int64, error) { return s.be.writeBackup(s, w) }

// Backend names the store's backend: "bbolt" or "etcd".
func (s *Store) Backend() string { return s.be.kind() }

// EtcdStats are the etcd backend's counters; nil on bbolt.
func (s *Store) EtcdStats() *EtcdStats { return s.be.etcdStats() }
