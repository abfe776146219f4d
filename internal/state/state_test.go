package state_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fleet-agent/fleet-agent/internal/inventory"
	"github.com/fleet-agent/fleet-agent/internal/refusal"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

func TestObjectsNamesAndSnapshot(t *testing.T) {
	s := statetest.Open(t)
	pool := inventory.Object{Kind: inventory.Pool, ID: inventory.ID("root", inventory.Pool, "vps-fra"),
		Spec: map[string]any{"class": "vps-host", "policy": map[string]any{"w": 0.5, "n": int64(2)}}}
	external := inventory.Object{Kind: inventory.Pool, ID: "pool_external", Spec: map[string]any{"class": "provider"}}
	err := s.Update(func(tx *state.Tx) error {
		if err := tx.PutObject(pool, "vps-fra"); err != nil {
			return err
		}
		return tx.PutObject(external, "")
	})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := snap.ByName(inventory.Pool, "vps-fra")
	if !ok || got.ID != pool.ID || !inventory.Equal(got.Spec, pool.Spec) {
		t.Fatalf("named pool: %+v", got)
	}
	if ext, ok := snap.ByName(inventory.Pool, "pool_external"); !ok || ext.ID != "pool_external" {
		t.Fatalf("an object no apply created is named by its id: %+v", ext)
	}
	err = s.Update(func(tx *state.Tx) error { return tx.DeleteObject(inventory.Pool, pool.ID, "vps-fra") })
	if err != nil {
		t.Fatal(err)
	}
	snap, _ = s.Snapshot()
	if _, ok := snap.ByName(inventory.Pool, "vps-fra"); ok || snap.Len() != 1 {
		t.Fatal("delete left the object or its name")
	}
}

func TestFileModeAndFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "fleet.db")
	s, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	// A newer format is refused with a message that says what to do.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("format"), []byte("99")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = state.Open(path, state.Options{})
	if !refusal.Is(err, refusal.InvalidState) || !strings.Contains(err.Error(), "newer fleet-agent") {
		t.Fatalf("newer format: %v", err)
	}
}

func TestHeldFileFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	holder, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	start := time.Now()
	_, err = state.Open(path, state.Options{LockTimeout: 100 * time.Millisecond})
	if !refusal.Is(err, refusal.InvalidState) || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("want a clear refusal, got %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("opening a held file hung")
	}
}

func TestNotAStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	if err := os.WriteFile(path, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Open(path, state.Options{}); !refusal.Is(err, refusal.InvalidState) {
		t.Fatalf("got %v", err)
	}
}

func TestAuditAppliedDriftKV(t *testing.T) {
	s := statetest.Open(t)
	err := s.Update(func(tx *state.Tx) error {
		for _, a := range []string{"call", "call", "apply"} {
			if err := tx.AppendAudit(state.AuditRow{Action: a, Who: "ops@box"}); err != nil {
				return err
			}
		}
		if err := tx.SetApplied(state.Applied{Document: []byte(`{"version":1}`), PlanHash: "h", AppliedBy: "ops@box", AppliedAt: 1}); err != nil {
			return err
		}
		if err := tx.SetDrift(&state.Drift{PlanHash: "d", CheckedAt: 2}); err != nil {
			return err
		}
		return tx.Put("reviewed", "7", map[string]string{"planHash": "x"})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(func(tx *state.Tx) error {
		rows, err := tx.Audit()
		if err != nil || len(rows) != 3 || rows[2].Seq != 3 || rows[2].Action != "apply" {
			t.Errorf("audit %+v %v", rows, err)
		}
		a, err := tx.Applied()
		if err != nil || a == nil || a.PlanHash != "h" {
			t.Errorf("applied %+v %v", a, err)
		}
		d, err := tx.Drift()
		if err != nil || d == nil || d.PlanHash != "d" {
			t.Errorf("drift %+v %v", d, err)
		}
		var r map[string]string
		if ok, err := tx.Get("reviewed", "7", &r); !ok || err != nil || r["planHash"] != "x" {
			t.Errorf("kv %v %v %v", ok, err, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBackupIsConsistentCopy(t *testing.T) {
	s := statetest.Open(t)
	if err := s.Update(func(tx *state.Tx) error {
		return tx.PutObject(inventory.Object{Kind: inventory.Site, ID: "site_1", Spec: map[string]any{"kind": "shared"}}, "fra")
	}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "backup.db")
	if err := s.Backup(out); err != nil {
		t.Fatal(err)
	}
	b := statetest.OpenAt(t, out)
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.ByName(inventory.Site, "fra"); !ok {
		t.Fatal("backup lacks the site")
	}
}
