package state

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME: it counts the time the machine was
// suspended (a VM paused by its hypervisor, a laptop's sleep), which the
// monotonic clock does not, so a hold measured on it ends during a
// suspend as etcd's lease does.
func bootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return monoClock()
	}
	return time.Duration(ts.Nano())
}
