package state_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/fleet"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// TestSubstrateHalvesStayApart: apply's half and the reconciler's half are
// written by different transactions and neither touches the other's fields.
func TestSubstrateHalvesStayApart(t *testing.T) {
	s := statetest.Open(t)
	want := state.SubstrateWant{PoolID: "pool_a", Pool: "a", Tenant: "root", Account: "k8s", Generation: 1, Present: true,
		Spec: fleet.Substrate{Kind: "kubernetes", Account: "k8s", Cluster: fleet.Cluster{Create: &fleet.ClusterCreate{Location: "fake-east"}}}}
	seen := state.SubstrateSeen{PoolID: "pool_a", State: state.SubstrateCreating, Message: "m", ObservedGeneration: 1,
		Cluster: &state.SeenCluster{ID: "c1", GlobalID: "g1"}}
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.PutSubstrateWant(want) })
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.PutSubstrateSeen(seen) })
	want.Generation, want.Present = 2, false
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.PutSubstrateWant(want) })
	var recs []state.SubstrateRecord
	mustView(t, s, func(tx *state.Tx) (err error) { recs, err = tx.Substrates(); return })
	if len(recs) != 1 || recs[0].Seen == nil || recs[0].Seen.Cluster.ID != "c1" || recs[0].Seen.Message != "m" ||
		recs[0].Want.Generation != 2 || recs[0].Want.Present {
		t.Fatalf("records %+v seen %+v", recs, recs[0].Seen)
	}
	// An apply without a reconciler yet: no seen half.
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.PutSubstrateWant(state.SubstrateWant{PoolID: "pool_b"}) })
	mustView(t, s, func(tx *state.Tx) (err error) { recs, err = tx.Substrates(); return })
	if len(recs) != 2 || recs[1].Seen != nil {
		t.Fatalf("records %+v", recs)
	}
	if err := s.Update(func(tx *state.Tx) error { return tx.PutSubstrateWant(state.SubstrateWant{}) }); err == nil {
		t.Fatal("a record without a pool id was written")
	}
}

func TestClusterClaims(t *testing.T) {
	s := statetest.Open(t)
	claim := func(g, p string) string {
		var h string
		mustUpdate(t, s, func(tx *state.Tx) (err error) { h, err = tx.ClaimCluster(g, p); return })
		return h
	}
	first := claim("g", "pool_a")
	if again := claim("g", "pool_a"); first != "pool_a" || again != "pool_a" {
		t.Fatal("claiming twice")
	}
	if claim("g", "pool_b") != "pool_a" {
		t.Fatal("a second pool took the claim")
	}
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.ReleaseCluster("g", "pool_b") })
	if claim("g", "pool_b") != "pool_a" {
		t.Fatal("another pool released a claim it does not hold")
	}
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.ReleaseCluster("g", "pool_a") })
	if claim("g", "pool_b") != "pool_b" {
		t.Fatal("a released claim was not free")
	}
}

// TestJournalSwapIsChecked: every write of an operation names the revision
// and state it read; a stale or doubled write is refused, nothing written.
func TestJournalSwapIsChecked(t *testing.T) {
	s := statetest.Open(t)
	op := state.JournalOp{Key: "pool_a/createCluster/fa-a-x/g1", State: state.Journaled, Request: []byte(`{}`)}
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.SwapJournalOp(nil, &op) })
	if op.Rev != 1 {
		t.Fatalf("rev %d", op.Rev)
	}
	again := op
	if err := s.Update(func(tx *state.Tx) error { return tx.SwapJournalOp(nil, &again) }); !errors.Is(err, state.ErrJournalConflict) {
		t.Fatalf("a second create: %v", err)
	}
	read := op
	next := op
	next.State = state.InFlight
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.SwapJournalOp(&read, &next) })
	stale := read
	stale.State = state.Failed
	if err := s.Update(func(tx *state.Tx) error { return tx.SwapJournalOp(&read, &stale) }); !errors.Is(err, state.ErrJournalConflict) {
		t.Fatalf("a write from a stale read: %v", err)
	}
	var got *state.JournalOp
	mustView(t, s, func(tx *state.Tx) (err error) { got, err = tx.JournalOp(op.Key); return })
	if got.State != state.InFlight || got.Rev != 2 {
		t.Fatalf("stored %+v", got)
	}
	if err := s.Update(func(tx *state.Tx) error { return tx.DeleteJournalOp(op.Key) }); err == nil {
		t.Fatal("an operation in flight was deleted")
	}
	if err := s.Update(func(tx *state.Tx) error {
		return tx.SwapJournalOp(&state.JournalOp{Key: "pool_b/x/y/g1"}, &state.JournalOp{Key: "pool_b/x/y/g1"})
	}); !errors.Is(err, state.ErrJournalConflict) {
		t.Fatalf("a swap of an operation that does not exist: %v", err)
	}
}

func TestJournalPrefixAndReadOnlyOld(t *testing.T) {
	s := statetest.Open(t)
	for _, k := range []string{"pool_a/s/1/g1", "pool_ab/s/1/g1", "pool_a/s/2/g1"} {
		op := state.JournalOp{Key: k, State: state.Succeeded}
		mustUpdate(t, s, func(tx *state.Tx) error { return tx.SwapJournalOp(nil, &op) })
	}
	var ops []state.JournalOp
	mustView(t, s, func(tx *state.Tx) (err error) { ops, err = tx.JournalOps("pool_a/"); return })
	if len(ops) != 2 || ops[0].Key != "pool_a/s/1/g1" {
		t.Fatalf("ops %+v", ops)
	}
	mustUpdate(t, s, func(tx *state.Tx) error { return tx.DeleteJournalOp("pool_a/s/1/g1") })
	// A read-only open of a file that never held a substrate reads none.
	path := filepath.Join(t.TempDir(), "ro.db")
	w, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	ro, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	mustView(t, ro, func(tx *state.Tx) error {
		recs, err := tx.Substrates()
		if err != nil || len(recs) != 0 {
			t.Fatalf("%v %v", recs, err)
		}
		w, err := tx.SubstrateWant("x")
		if err != nil || w != nil {
			t.Fatalf("%v %v", w, err)
		}
		return nil
	})
}

func mustUpdate(t *testing.T, s *state.Store, fn func(*state.Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func mustView(t *testing.T, s *state.Store, fn func(*state.Tx) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotCarriesRunningClusterVersions: a snapshot holds the version
// each substrate's cluster last ran, from the reconciler's half, so a plan
// and an export can compare a document against it; a snapshot read inside
// a write transaction creates no bucket on a fresh file.
func TestSnapshotCarriesRunningClusterVersions(t *testing.T) {
	s := statetest.Open(t)
	mustUpdate(t, s, func(tx *state.Tx) error {
		snap, err := tx.Snapshot()
		if err == nil && snap.ClusterVersion("pool_a") != "" {
			t.Error("a fresh file reports a running version")
		}
		return err
	})
	mustUpdate(t, s, func(tx *state.Tx) error {
		return tx.PutSubstrateSeen(state.SubstrateSeen{PoolID: "pool_a", Cluster: &state.SeenCluster{ID: "c1", Version: "1.33.5-gke.1200"}})
	})
	mustUpdate(t, s, func(tx *state.Tx) error {
		return tx.PutSubstrateSeen(state.SubstrateSeen{PoolID: "pool_b", State: state.SubstratePending})
	})
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.ClusterVersion("pool_a"); got != "1.33.5-gke.1200" {
		t.Errorf("pool_a runs %q, want 1.33.5-gke.1200", got)
	}
	if got := snap.ClusterVersion("pool_b"); got != "" {
		t.Errorf("pool_b, never seen running, runs %q", got)
	}
}
