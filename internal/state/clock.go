package state

import "time"

var clockStart = time.Now()

// monoClock is the time since the process started, on Go's monotonic clock.
func monoClock() time.Duration { return time.Since(clockStart) }
