package backoff

import (
	"testing"
	"time"
)

// The cases are the waits each retrying part produced before it used this
// package, with its own base and cap: the substrate journal (5 s to 5 min
// after a transient failure, 5 min to 6 h after a refusal), the outbox and
// webhook deliveries (2 s to 5 min), the repository poll (5 s to 5 min), a
// campaign for the leadership on etcd (1 s to 30 s) and the node daemon
// (1 s to 60 s, drawn in the upper half).
func TestWait(t *testing.T) {
	const (
		s = time.Second
		m = time.Minute
		h = time.Hour
	)
	low := func(time.Duration) time.Duration { return 0 }
	high := func(n time.Duration) time.Duration { return n - 1 }
	for _, c := range []struct {
		name              string
		attempt           int
		base, limit, want time.Duration
		draw              Draw
	}{
		{"before the first failure is the first", 0, 5 * s, 5 * m, 5 * s, nil},
		{"a negative count is the first", -3, 5 * s, 5 * m, 5 * s, nil},
		{"journal retry 1", 1, 5 * s, 5 * m, 5 * s, nil},
		{"journal retry 2", 2, 5 * s, 5 * m, 10 * s, nil},
		{"journal retry 3", 3, 5 * s, 5 * m, 20 * s, nil},
		{"journal retry 6", 6, 5 * s, 5 * m, 160 * s, nil},
		{"journal retry 7 is capped", 7, 5 * s, 5 * m, 5 * m, nil},
		{"journal retry 100", 100, 5 * s, 5 * m, 5 * m, nil},
		{"journal refusal 1", 1, 5 * m, 6 * h, 5 * m, nil},
		{"journal refusal 4", 4, 5 * m, 6 * h, 40 * m, nil},
		{"journal refusal 7", 7, 5 * m, 6 * h, 320 * m, nil},
		{"journal refusal 8 is capped", 8, 5 * m, 6 * h, 6 * h, nil},
		{"outbox 1", 1, 2 * s, 5 * m, 2 * s, nil},
		{"outbox 8", 8, 2 * s, 5 * m, 256 * s, nil},
		{"outbox 9 is capped", 9, 2 * s, 5 * m, 5 * m, nil},
		{"outbox 20", 20, 2 * s, 5 * m, 5 * m, nil},
		{"campaign 1", 1, s, 30 * s, s, nil},
		{"campaign 5", 5, s, 30 * s, 16 * s, nil},
		{"campaign 6 is capped", 6, s, 30 * s, 30 * s, nil},
		{"a huge count does not overflow", 1 << 40, 2 * s, 5 * m, 5 * m, nil},
		{"base above the cap is the cap", 1, 10 * m, 5 * m, 5 * m, nil},
		{"base equal to the cap", 3, 5 * m, 5 * m, 5 * m, nil},
		{"no base waits nothing", 5, 0, 5 * m, 0, nil},
		{"daemon 1, low draw", 1, s, 60 * s, s / 2, low},
		{"daemon 1, high draw", 1, s, 60 * s, s, high},
		{"daemon 2, low draw", 2, s, 60 * s, s, low},
		{"daemon 2, high draw", 2, s, 60 * s, 2 * s, high},
		{"daemon 6, low draw", 6, s, 60 * s, 16 * s, low},
		{"daemon 6, high draw", 6, s, 60 * s, 32 * s, high},
		{"daemon 7 is capped, low draw", 7, s, 60 * s, 30 * s, low},
		{"daemon 7 is capped, high draw", 7, s, 60 * s, 60 * s, high},
		{"an odd wait's high draw", 1, 3, 60 * s, 2, high},
		{"a zero wait with a draw", 1, 0, 60 * s, 0, high},
	} {
		if got := Wait(c.attempt, c.base, c.limit, c.draw); got != c.want {
			t.Errorf("%s: Wait(%d, %v, %v) = %v, want %v", c.name, c.attempt, c.base, c.limit, got, c.want)
		}
	}
}

// TestRandomStaysInTheUpperHalf draws many waits and checks each lies in
// [w/2, w].
func TestRandomStaysInTheUpperHalf(t *testing.T) {
	for attempt := 1; attempt <= 8; attempt++ {
		w := Wait(attempt, time.Second, time.Minute, nil)
		for range 200 {
			got := Wait(attempt, time.Second, time.Minute, Random)
			if got < w/2 || got > w {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, got, w/2, w)
			}
		}
	}
}
