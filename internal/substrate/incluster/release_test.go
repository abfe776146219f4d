package incluster

import (
	"errors"
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/substrate/join"
)

// TestSilentNodeReleased: a joined Node whose daemon sends no heartbeat for
// join.ReleaseAfter (15 minutes, on the injected clock) is released while
// its Node is still listed: its node key stops working and its name waits
// to join again, with a token that allows it; a Node that keeps beating is
// never released.
func TestSilentNodeReleased(t *testing.T) {
	u := newUnit(t, node("a", poolID), node("b", poolID))
	ctx := t.Context()
	if _, err := u.ic.Apply(ctx, u.target("create")); err != nil {
		t.Fatal(err)
	}
	tok, ok := u.secretToken()
	if !ok {
		t.Fatal("no join Secret")
	}
	keyA, err := u.joins.Join(ctx, poolID, "a", tok)
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := u.joins.Join(ctx, poolID, "b", tok)
	if err != nil {
		t.Fatal(err)
	}
	beat := func(name, key string) error { return u.joins.Heartbeat(ctx, poolID, name, key, "") }
	if err := beat("a", keyA); err != nil {
		t.Fatal(err)
	}
	// b beats every minute; a stays silent after its first beat.
	for range 14 {
		u.clock.Advance(time.Minute)
		if err := beat("b", keyB); err != nil {
			t.Fatal(err)
		}
	}
	u.clock.Advance(time.Minute - time.Second)
	if n, err := u.ic.Apply(ctx, u.target("create")); err != nil || n.Joined != 2 {
		t.Fatalf("released before 15 minutes of silence: %+v %v", n, err)
	}
	u.clock.Advance(time.Second)
	if err := beat("b", keyB); err != nil {
		t.Fatal(err)
	}
	n, err := u.ic.Apply(ctx, u.target("create"))
	if err != nil || n.Listed != 2 || n.Joined != 1 {
		t.Fatalf("a silent for 15 minutes is not released: %+v %v", n, err)
	}
	if j, _ := u.joins.Joined(ctx, poolID); len(j) != 1 || j[0].Name != "b" {
		t.Fatalf("joined %+v", j)
	}
	var r *join.Refusal
	if err := beat("a", keyA); !errors.As(err, &r) || r.Code != join.CodeKeyUnknown {
		t.Fatalf("the released key still beats: %v", err)
	}
	if err := beat("b", keyB); err != nil {
		t.Fatalf("the beating node lost its key: %v", err)
	}
	fresh, ok := u.secretToken()
	if !ok || fresh == tok {
		t.Fatal("no new token for the released name")
	}
	if _, err := u.joins.Join(ctx, poolID, "a", fresh); err != nil {
		t.Fatalf("the released name cannot join again: %v", err)
	}
	if n, err := u.ic.Apply(ctx, u.target("create")); err != nil || n.Joined != 2 {
		t.Fatalf("%+v %v", n, err)
	}
}
