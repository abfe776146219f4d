// Package statetest opens real stores for tests: a bbolt file in
// t.TempDir(), checked for consistency by bbolt when the test ends, or,
// when FLEET_AGENT_TEST_STATE=etcd, a fresh prefix of a real etcd server
// that this package starts once per test binary (make test runs the
// store's users' suites both ways).
package statetest

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/state"
)

// BackendEnv chooses the backend of Open: "" or "bbolt", or "etcd".
const BackendEnv = "FLEET_AGENT_TEST_STATE"

var fixedNow = func() time.Time { return time.UnixMilli(1790251200000) }

// Open creates a store: a state file in a temporary directory, or a new
// prefix on the test etcd server, leading it. At cleanup the store is
// closed, opened again and checked.
func Open(t testing.TB) *state.Store {
	t.Helper()
	if Backend() == "etcd" {
		return OpenEtcd(t)
	}
	path := filepath.Join(t.TempDir(), "fleet.db")
	return OpenAt(t, path)
}

// OpenAt opens the state file at path with the same cleanup as Open.
func OpenAt(t testing.TB, path string) *state.Store {
	t.Helper()
	s, err := state.Open(path, state.Options{Now: fixedNow})
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

// OpenEtcd opens a store on a new prefix of the test etcd server and leads
// it.
func OpenEtcd(t testing.TB) *state.Store {
	t.Helper()
	opts := EtcdOptions(t)
	s, err := state.OpenEtcd(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Lead(ctx); err != nil {
		s.Close()
		t.Fatalf("lead the test store: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		opts.ReadOnly = true
		again, err := state.OpenEtcd(context.Background(), opts)
		if err != nil {
			t.Errorf("reopen state: %v", err)
			return
		}
		defer again.Close()
		if err := again.Check(); err != nil {
			t.Errorf("store inconsistent: %v", err)
		}
	})
	return s
}

// SetSpec writes set into the spec of the object kind/name straight to the
// store, past apply's edit: for the fields edit refuses (a plan never lets
// them change) that a state file written by an agent from before may hold.
func SetSpec(t testing.TB, s *state.Store, kind inventory.Kind, name string, set map[string]any) {
	t.Helper()
	if err := s.Update(func(tx *state.Tx) error {
		snap, err := tx.Snapshot()
		if err != nil {
			return err
		}
		o, ok := snap.ByName(kind, name)
		if !ok {
			return fmt.Errorf("no %s %s", kind, name)
		}
		maps.Copy(o.Spec, set)
		stored := ""
		if o.Name != o.ID {
			stored = o.Name
		}
		return tx.PutObject(o, stored)
	}); err != nil {
		t.Fatal(err)
	}
}
