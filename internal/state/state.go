// Package state is the store: one bbolt file that holds the fleet's objects,
// the names fleet gave them, the applied document, drift, the audit log and
// the agent's own records (reviewed plans, proposals, the outbox, the
// substrates and the journal of their provider operations, the hashed join
// tokens and joined nodes). bbolt has one writer: every change is one transaction, so a kill
// at any moment leaves either the old fleet or the new one.
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

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

// Store is an open store: a bbolt file, or a prefix of an etcd cluster
// (etcd.go).
type Store struct {
	be   backend
	db   *bolt.DB // nil on etcd
	etcd *etcdBackend
	path string
}

// backend runs transactions; bbolt's and etcd's.
type backend interface {
	view(fn func(kvTx) error) error
	update(fn func(kvTx) error) error
	close() error
}

type boltBackend struct{ db *bolt.DB }

func (b boltBackend) view(fn func(kvTx) error) error {
	return b.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b boltBackend) update(fn func(kvTx) error) error {
	return b.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b boltBackend) close() error { return b.db.Close() }

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

// ErrInUse is the cause of Open's refusal when another process holds the
// file's lock, so that a caller tells a busy file from a broken one
// without reading the message.
var ErrInUse = errors.New("the state file is locked by another process")

// ErrNotAStateFile is the cause of a refusal to open a file that is text a
// person wrote (a fleet document, a config) given where the state file
// belongs: the path is wrong, the file is not damaged.
var ErrNotAStateFile = errors.New("the file is not a state file")

// Open opens (or creates, mode 0600) the state file at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 200 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if dir := filepath.Dir(path); !opts.ReadOnly {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, refusal.Wrap(refusal.InvalidState, err, "cannot create the state directory %s", dir)
		}
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, refusal.Wrap(refusal.InvalidState, err, "cannot open the state file %s", path)
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, ReadOnly: opts.ReadOnly, NoSync: opts.NoSync})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			r := refusal.New(refusal.InvalidState,
				"the state file %s is in use by another process (a running fleet-agent holds it); use the command through the running agent, or stop it first", path)
			r.Err = ErrInUse
			return nil, r
		}
		if guess := notAStateFile(path); guess != "" {
			r := refusal.New(refusal.InvalidState, "cannot open the state file %s (%v): %s", path, err, guess)
			r.Err = fmt.Errorf("%w: %w", ErrNotAStateFile, err)
			return nil, r
		}
		return nil, refusal.Wrap(refusal.InvalidState, err, "cannot open the state file %s", path)
	}
	s := &Store{be: boltBackend{db}, db: db, path: path}
	if opts.ReadOnly {
		if err := s.checkFormat(); err != nil {
			db.Close()
			return nil, err
		}
		return s, nil
	}
	if err := s.be.update(func(tx kvTx) error { return prepare(tx, opts) }); err != nil {
		db.Close()
		return nil, refusal.Wrap(refusal.InvalidState, err, "cannot prepare the state file %s", path)
	}
	if err := s.checkFormat(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
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
	t := &Tx{tx: tx}
	if s.etcd != nil {
		t.auditKeep = s.etcd.auditKeep
	}
	return t
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

// Backup writes a consistent copy of the file to w while others read and
// write (bbolt copies inside a read transaction).
// On etcd it writes a bbolt file holding the same records (CopyTo), so a
// restore works on one box.
func (s *Store) Backup(path string) error {
	if s.db == nil {
		return s.backupToFile(path)
	}
	return s.db.View(func(tx *bolt.Tx) error { return tx.CopyFile(path, 0o600) })
}

// Check runs bbolt's consistency check over the whole file.
// On etcd it reads every record back (CheckRecords).
func (s *Store) Check() error {
	if s.db == nil {
		return s.CheckRecords()
	}
	return s.db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

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
	return inventory.NewSnapshot(objects), nil
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

// WriteBackup streams a consistent copy of the file to w (a read
// transaction: writers go on meanwhile).
func (s *Store) WriteBackup(w io.Writer) (int64, error) {
	if s.db == nil {
		return s.streamBackup(w)
	}
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// notAStateFile guesses, from its first bytes, what a file that bbolt
// cannot open is when it is text a person wrote: a fleet document or a
// config given where the state file belongs (--state fleet.json). It says
// what the file looks like and where it goes, or nothing for other files (a
// damaged state file gets no guess).
func notAStateFile(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	head = bytes.TrimLeft(head[:n], "\ufeff \t\r\n")
	if len(head) == 0 || !utf8.Valid(head[:len(head)-min(len(head), utf8.UTFMax)]) || bytes.IndexByte(head, 0) >= 0 {
		return ""
	}
	const where = "--state names the agent's state file (a database such as fleet.db, made by apply or the agent)"
	switch {
	case head[0] == '{' && (bytes.Contains(head, []byte(`"sites"`)) || bytes.Contains(head, []byte(`"pools"`)) || bytes.Contains(head, []byte(`"version"`))):
		return "it looks like a fleet document (JSON), not a state file; " + where + ", and a document is the command's FILE argument (fleet-agent plan FILE, apply FILE)"
	case head[0] == '{' || head[0] == '[':
		return "it looks like a JSON document, not a state file; " + where
	default:
		return "it is text (a config or a document?), not a state file; " + where + "; a config is given with --config"
	}
}
