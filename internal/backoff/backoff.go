// Package backoff is the wait between failed attempts that every retrying
// part of fleet-agent uses: capped exponential growth, optionally drawn at
// random in its upper half. It is a pure function of the attempt; where the
// attempt count lives (a journal operation, an outbox record, a counter in
// memory) stays with its owner, so a restart that keeps the count keeps the
// wait.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Draw returns a duration in [0, n) for n > 0. Random draws from the
// process's random source; a test passes a fixed one.
type Draw func(n time.Duration) time.Duration

// Random is Draw from math/rand/v2.
func Random(n time.Duration) time.Duration { return rand.N(n) }

// Wait is the wait after the attempt-th failure in a row (counted from 1;
// below 1 counts as 1): base doubled for each failure after the first, at
// most limit. With draw, the wait is drawn in its upper half, [w/2, w], so
// that clients that failed together do not all come back together; without
// it (nil) the wait is exact, for waits a person reads back or a test
// counts on.
func Wait(attempt int, base, limit time.Duration, draw Draw) time.Duration {
	w := grow(attempt, base, limit)
	if draw == nil {
		return w
	}
	return w/2 + draw(w/2+1)
}

// grow doubles base attempt-1 times, stopping once it reaches limit, so it
// never overflows however large attempt is.
func grow(attempt int, base, limit time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	w := base
	for i := 1; i < attempt && w < limit; i++ {
		w *= 2
	}
	return min(w, limit)
}
