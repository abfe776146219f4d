package state_test

import (
	"errors"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

func outboxList(t *testing.T, s *state.Store) []state.OutboxEntry {
	t.Helper()
	var out []state.OutboxEntry
	if err := s.View(func(tx *state.Tx) error {
		return tx.OutboxEntries(func(e state.OutboxEntry) error { out = append(out, e); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOutboxQueueAndIndex(t *testing.T) {
	s := statetest.Open(t)

	// A fresh file reads as an empty queue, even in a read transaction.
	if err := s.View(func(tx *state.Tx) error {
		n, err := tx.OutboxLen()
		if err != nil || n != 0 {
			t.Errorf("len %d, %v", n, err)
		}
		_, ok, err := tx.OutboxFirst()
		if err != nil || ok {
			t.Errorf("first on empty: %v %v", ok, err)
		}
		_, ok, err = tx.OutboxLookup("k")
		if err != nil || ok {
			t.Errorf("lookup on empty: %v %v", ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var seqs []uint64
	committed := 0
	if err := s.Update(func(tx *state.Tx) error {
		tx.OnCommit(func() { committed++ })
		// More than 255 entries: the big-endian keys keep them in order.
		for i := range 300 {
			key := ""
			if i%2 == 0 {
				key = string(rune('a'+i%26)) + string(rune('0'+i/26))
			}
			seq, err := tx.OutboxAppend(key, []byte{byte(i)})
			if err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if committed != 1 {
		t.Errorf("OnCommit ran %d times", committed)
	}
	list := outboxList(t, s)
	if len(list) != 300 {
		t.Fatalf("%d entries", len(list))
	}
	for i, e := range list {
		if e.Seq != seqs[i] || len(e.Data) != 1 || e.Data[0] != byte(i) {
			t.Fatalf("entry %d: %+v, want seq %d", i, e, seqs[i])
		}
	}

	if err := s.Update(func(tx *state.Tx) error {
		e, ok, err := tx.OutboxLookup("c0")
		if err != nil || !ok || e.Seq != seqs[2] || e.Key != "c0" {
			t.Errorf("lookup c0: %+v %v %v", e, ok, err)
		}
		// Replace keeps the place and the key.
		if err := tx.OutboxReplace(seqs[2], []byte("new")); err != nil {
			return err
		}
		if err := tx.OutboxReplace(1<<40, []byte("x")); err == nil {
			t.Error("replacing an entry that is not queued must fail")
		}
		// Delete removes the index key with the entry.
		if err := tx.OutboxDelete(seqs[0]); err != nil {
			return err
		}
		if err := tx.OutboxDelete(seqs[0]); err != nil {
			t.Errorf("deleting twice: %v", err)
		}
		if _, ok, _ := tx.OutboxLookup("a0"); ok {
			t.Error("the index still holds a deleted entry's key")
		}
		first, ok, err := tx.OutboxFirst()
		if err != nil || !ok || first.Seq != seqs[1] {
			t.Errorf("first after delete: %+v", first)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.View(func(tx *state.Tx) error {
		e, ok, err := tx.OutboxGet(seqs[2])
		if err != nil || !ok || string(e.Data) != "new" || e.Key != "c0" {
			t.Errorf("replaced: %+v %v %v", e, ok, err)
		}
		if n, _ := tx.OutboxLen(); n != 299 {
			t.Errorf("len %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A rolled back transaction leaves nothing and runs no OnCommit.
	boom := errors.New("boom")
	ran := false
	err := s.Update(func(tx *state.Tx) error {
		tx.OnCommit(func() { ran = true })
		if _, err := tx.OutboxAppend("z", []byte("lost")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || ran {
		t.Fatalf("rollback: %v, OnCommit ran %v", err, ran)
	}
	if n := len(outboxList(t, s)); n != 299 {
		t.Errorf("%d entries after a rollback", n)
	}
}

// The index keeps the newest entry for a key: deleting an older entry that
// held the key once leaves the newer one findable.
func TestOutboxIndexFollowsNewest(t *testing.T) {
	s := statetest.Open(t)
	var old, newer uint64
	if err := s.Update(func(tx *state.Tx) error {
		var err error
		if old, err = tx.OutboxAppend("k", []byte("1")); err != nil {
			return err
		}
		if newer, err = tx.OutboxAppend("k", []byte("2")); err != nil {
			return err
		}
		if err := tx.OutboxDelete(old); err != nil {
			return err
		}
		e, ok, err := tx.OutboxLookup("k")
		if err != nil || !ok || e.Seq != newer {
			t.Errorf("lookup: %+v %v %v", e, ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
