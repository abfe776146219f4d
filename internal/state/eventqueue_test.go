package state_test

import (
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/state/statetest"
)

// Each webhook's queue is its own: entries, index and meta of one are not
// the other's, and the GitHub outbox's queue holds none of them.
func TestEventQueuesAreSeparate(t *testing.T) {
	s := statetest.Open(t)
	var a1 uint64
	err := s.Update(func(tx *state.Tx) (err error) {
		a, b := tx.EventQueue("wh-a"), tx.EventQueue("wh-b")
		if a1, err = a.Append("k1", []byte("a1")); err != nil {
			return err
		}
		if _, err = a.Append("k2", []byte("a2")); err != nil {
			return err
		}
		if _, err = b.Append("k1", []byte("b1")); err != nil {
			return err
		}
		if err := a.SetMeta([]byte(`{"n":1}`)); err != nil {
			return err
		}
		return a.Replace(a1, []byte("a1'"))
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(func(tx *state.Tx) error {
		a, b := tx.EventQueue("wh-a"), tx.EventQueue("wh-b")
		var got []string
		if err := a.Entries(func(e state.OutboxEntry) error { got = append(got, e.Key+"="+string(e.Data)); return nil }); err != nil {
			return err
		}
		if len(got) != 2 || got[0] != "k1=a1'" || got[1] != "k2=a2" {
			t.Errorf("queue a = %q", got)
		}
		if e, ok, err := b.Lookup("k1"); err != nil || !ok || string(e.Data) != "b1" {
			t.Errorf("b's k1 = %+v %v %v", e, ok, err)
		}
		if m, err := b.Meta(); err != nil || m != nil {
			t.Errorf("b's meta = %q %v", m, err)
		}
		if m, err := a.Meta(); err != nil || string(m) != `{"n":1}` {
			t.Errorf("a's meta = %q %v", m, err)
		}
		if n, err := tx.OutboxLen(); err != nil || n != 0 {
			t.Errorf("the GitHub outbox holds %d (%v)", n, err)
		}
		if _, ok, err := tx.EventQueue("wh-none").First(); err != nil || ok {
			t.Errorf("an unknown webhook's queue: %v %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *state.Tx) error { return tx.EventQueue("wh-a").Delete(a1) }); err != nil {
		t.Fatal(err)
	}
	err = s.View(func(tx *state.Tx) error {
		a := tx.EventQueue("wh-a")
		if _, ok, err := a.Lookup("k1"); err != nil || ok {
			t.Errorf("k1 still indexed after its delete: %v %v", ok, err)
		}
		if e, ok, err := a.First(); err != nil || !ok || string(e.Data) != "a2" {
			t.Errorf("first after the delete = %+v %v %v", e, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
