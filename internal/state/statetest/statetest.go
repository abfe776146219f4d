// Package statetest opens real state files for tests: in t.TempDir(), and
// checked for consistency by bbolt when the test ends.
package statetest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/state"
)

// Open creates a state file in a temporary directory. At cleanup the store
// is closed, opened again and checked with bbolt's consistency check.
func Open(t testing.TB) *state.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet.db")
	return OpenAt(t, path)
}

// OpenAt opens the state file at path with the same cleanup as Open.
func OpenAt(t testing.TB, path string) *state.Store {
	t.Helper()
	s, err := state.Open(path, state.Options{Now: func() time.Time { return time.UnixMilli(1790251200000) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		again, err := state.Open(path, state.Options{})
		if err != nil {
			t.Errorf("reopen state: %v", err)
			return
		}
		defer again.Close()
		if err := again.Check(); err != nil {
			t.Errorf("state file inconsistent: %v", err)
		}
	})
	return s
}
