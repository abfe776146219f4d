package state

import (
	"path/filepath"
	"regexp"
	"testing"
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
