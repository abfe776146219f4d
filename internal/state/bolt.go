package state

import (
	"bytes"
	"context"
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

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// The bbolt backend: one file, one process. The process that holds the
// file's lock is its only writer, so it always leads: there is no election,
// no term to fence and no server but the file.

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
	s := &Store{be: boltBackend{db}, path: path}
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

type boltBackend struct{ db *bolt.DB }

func (b boltBackend) view(fn func(kvTx) error) error {
	return b.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b boltBackend) update(fn func(kvTx) error) error {
	return b.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b boltBackend) close() error { return b.db.Close() }

func (b boltBackend) kind() string { return "bbolt" }

// updateIn is update: a bbolt file has one term, the process's.
func (b boltBackend) updateIn(_ *Leadership, fn func(kvTx) error) error { return b.update(fn) }

func (b boltBackend) backup(_ *Store, path string) error {
	return b.db.View(func(tx *bolt.Tx) error { return tx.CopyFile(path, 0o600) })
}

func (b boltBackend) writeBackup(_ *Store, w io.Writer) (int64, error) {
	var n int64
	err := b.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// check runs bbolt's consistency check over the whole file.
func (b boltBackend) check(_ *Store) error {
	return b.db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

// auditKeep is 0: a file keeps the whole audit log.
func (b boltBackend) auditKeep() uint64 { return 0 }

// campaign returns at once: the process that holds the file leads it.
func (b boltBackend) campaign(context.Context) (*Leadership, error) {
	return &Leadership{lost: make(chan struct{})}, nil
}

func (b boltBackend) mayWrite() bool                             { return true }
func (b boltBackend) fence(*Leadership) error                    { return nil }
func (b boltBackend) leaderName(context.Context) (string, error) { return "", nil }
func (b boltBackend) agentName() string                          { return "" }
func (b boltBackend) health(context.Context) []EndpointHealth    { return nil }
func (b boltBackend) etcdStats() *EtcdStats                      { return nil }

func (b boltBackend) walk(fn func(path [][]byte, k, v []byte) error) error {
	return b.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, root *bolt.Bucket) error {
			return walkBolt([][]byte{bytes.Clone(name)}, root, fn)
		})
	})
}

func walkBolt(path [][]byte, b *bolt.Bucket, fn func(path [][]byte, k, v []byte) error) error {
	if seq := b.Sequence(); seq > 0 {
		if err := fn(path, nil, []byte(strconv.FormatUint(seq, 10))); err != nil {
			return err
		}
	}
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			inner := append(append([][]byte{}, path...), bytes.Clone(k))
			return walkBolt(inner, b.Bucket(k), fn)
		}
		return fn(path, k, v)
	})
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
