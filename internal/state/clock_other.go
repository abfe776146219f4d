//go:build !linux

package state

import "time"

// bootClock is the monotonic clock where there is no CLOCK_BOOTTIME.
func bootClock() time.Duration { return monoClock() }
