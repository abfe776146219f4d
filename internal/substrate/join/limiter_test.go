package join

import (
	"testing"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
)

// TestLimiterArithmetic: a bucket's attempts as the listener spends them. A
// refused take says when the next attempt comes; a success gives its
// attempt back, never past the burst; a connection that fails with less
// than a whole attempt left empties the bucket instead of borrowing.
func TestLimiterArithmetic(t *testing.T) {
	clk := clock.NewFake(t0)
	lim := newLimiter(clk, Limits{FailureBurst: 2, FailureEvery: time.Second, MaxSources: 8})
	const src = "192.0.2.1"
	b, ok, _ := lim.take(src)
	if !ok {
		t.Fatal("the first take was refused")
	}
	lim.give(b)
	lim.give(b) // already full: nothing more
	for i, want := range []bool{true, true, false} {
		if _, ok, wait := lim.take(src); ok != want || (!ok && wait != time.Second) {
			t.Fatalf("take %d: %v (wait %v)", i+1, ok, wait)
		}
	}
	clk.Advance(500 * time.Millisecond)
	if _, ok, wait := lim.take(src); ok || wait != 500*time.Millisecond {
		t.Fatalf("half an attempt back: %v (wait %v)", ok, wait)
	}
	lim.fail(src) // half an attempt: spent, and no more
	clk.Advance(999 * time.Millisecond)
	if lim.allows(src) {
		t.Fatal("a failure with half an attempt left spent less than it")
	}
	clk.Advance(time.Millisecond)
	if !lim.allows(src) {
		t.Fatal("a failure with half an attempt left spent more than it")
	}
	lim.fail(src)
	if lim.allows(src) {
		t.Fatal("a failure spent nothing")
	}
}
