package state

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// A copy moves every record between stores of either backend: a move from
// one box to etcd and back, and a backup of an etcd store into a bbolt file
// that a restore on one box opens as it is.

// CopyTo copies every record of s into dst, which must hold no fleet yet
// (a new file, or a prefix nothing was applied to). The installation id
// travels: the copy is the same installation, and its names and labels
// at the providers stay its own. It returns the number of records copied.
func (s *Store) CopyTo(dst *Store) (int, error) {
	src := s.be
	if err := dst.mustBeEmpty(); err != nil {
		return 0, err
	}
	type rec struct {
		path [][]byte
		k, v []byte
	}
	var recs []rec
	if err := src.walk(func(path [][]byte, k, v []byte) error {
		recs = append(recs, rec{path, bytes.Clone(k), bytes.Clone(v)})
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	err := dst.be.update(func(tx kvTx) error {
		for _, r := range recs {
			b, err := tx.CreateBucketIfNotExists(r.path[0])
			if err != nil {
				return err
			}
			for _, name := range r.path[1:] {
				if b, err = b.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			if r.k == nil {
				seq, err := strconv.ParseUint(string(r.v), 10, 64)
				if err != nil {
					return refusal.New(refusal.InvalidState, "a sequence of the source is damaged")
				}
				if err := b.SetSequence(seq); err != nil {
					return err
				}
				continue
			}
			if err := b.Put(r.k, r.v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// mustBeEmpty refuses a destination that holds anything beyond what
// opening it wrote.
func (s *Store) mustBeEmpty() error {
	errFull := errors.New("full")
	err := s.be.walk(func(path [][]byte, k, _ []byte) error {
		if k == nil || bytes.Equal(path[0], bucketMeta) && !bytes.Equal(k, keyGeneration) {
			return nil
		}
		return errFull
	})
	if errors.Is(err, errFull) {
		return refusal.New(refusal.InvalidState, "the destination %s already holds a store; copy into a new file or an unused etcd prefix", s.path)
	}
	return err
}

// backupToFile writes the records of a store into a new bbolt file.
func (s *Store) backupToFile(path string) error {
	if _, err := os.Stat(path); err == nil {
		return refusal.New(refusal.InvalidInput, "%s exists; a backup is written to a new file", path)
	}
	dst, err := Open(path, Options{})
	if err != nil {
		return err
	}
	if _, err := s.CopyTo(dst); err != nil {
		dst.Close()
		os.Remove(path)
		return err
	}
	return dst.Close()
}

// streamBackup writes a bbolt file of a store's records to w.
func (s *Store) streamBackup(w io.Writer) (int64, error) {
	dir, err := os.MkdirTemp("", "fleet-agent-backup-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "backup.db")
	if err := s.backupToFile(path); err != nil {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}

// CheckRecords reads every record back and decodes the fleet, the
// substrates and the audit log: the check of a store that is not a file.
func (s *Store) CheckRecords() error {
	if err := s.be.walk(func(_ [][]byte, _, _ []byte) error { return nil }); err != nil {
		return err
	}
	return s.View(func(tx *Tx) error {
		if _, err := tx.Snapshot(); err != nil {
			return err
		}
		if _, err := tx.Substrates(); err != nil {
			return err
		}
		_, err := tx.Audit()
		return err
	})
}
