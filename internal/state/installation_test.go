package state

import (
	"path/filepath"
	"regexp"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestInstallationIDKeptAndDistinct(t *testing.T) {
	dir := t.TempDir()
	open := func(p string) *Store {
		s, err := Open(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := open(filepath.Join(dir, "a.db"))
	id := a.Installation()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("installation id %q is not 32 lower-case hex characters", id)
	}
	if err := a.Backup(filepath.Join(dir, "copy.db")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	a = open(filepath.Join(dir, "a.db"))
	if got := a.Installation(); got != id {
		t.Fatalf("reopen changed the installation: %q then %q", id, got)
	}
	a.Close()
	c := open(filepath.Join(dir, "copy.db"))
	if got := c.Installation(); got != id {
		t.Fatalf("backup changed the installation: %q then %q", id, got)
	}
	c.Close()
	b := open(filepath.Join(dir, "b.db"))
	defer b.Close()
	if b.Installation() == id {
		t.Fatal("two state files share one installation id")
	}
}

// A file made before installations gets an id at its first write open, and
// the substrates it recorded then keep their names (LegacyNames); those
// recorded afterwards do not.
func TestOldFileGetsAnInstallationAndKeepsItsNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error {
		return tx.PutSubstrateWant(SubstrateWant{PoolID: "pool_old", Pool: "gpu", Present: true, Generation: 1})
	}); err != nil {
		t.Fatal(err)
	}
	// Make it an old file: no installation id.
	if err := s.be.(boltBackend).db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Delete(keyOwnedNames); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Delete(keyInstallation)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Installation() == "" {
		t.Fatal("the old file got no installation id at its first write open")
	}
	if err := s.Update(func(tx *Tx) error {
		return tx.PutSubstrateWant(SubstrateWant{PoolID: "pool_new", Pool: "cpu", Present: true, Generation: 1})
	}); err != nil {
		t.Fatal(err)
	}
	for id, legacy := range map[string]bool{"pool_old": true, "pool_new": false} {
		var w *SubstrateWant
		if err := s.View(func(tx *Tx) error { w, err = tx.SubstrateWant(id); return err }); err != nil || w == nil {
			t.Fatalf("%s: %v %v", id, w, err)
		}
		if w.LegacyNames != legacy {
			t.Errorf("%s: LegacyNames = %v, want %v", id, w.LegacyNames, legacy)
		}
	}
}
