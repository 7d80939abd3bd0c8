// Package spin waits until a deadline more precisely than a Go timer does.
//
// On Linux a Go timer in an otherwise idle process fires up to about a
// millisecond late: the runtime's network poller sleeps in whole milliseconds
// and waits a full one for any remainder below that. Measured on the 2-core
// development machine: a 5.12 ms timer fired 1.05 ms late at the median, and
// a simulated engine whose requests take 5 ms then really takes 6. That
// lateness is a property of the simulation, not of what it simulates, so the
// bench's engines (mockworker with PreciseTimers, and the direct work
// queue's consumer) wait with this package instead: a timer to Window before
// the deadline, then yielding until it passes. It costs up to Window of CPU
// per wait, so it is for benchmarks, not for production paths.
package spin

import (
	"runtime"
	"time"
)

// Window is how long before a deadline waiting turns from a timer to
// yielding: more than a timer's lateness.
const Window = 1500 * time.Microsecond

// Until returns once deadline has passed.
func Until(deadline time.Time) {
	if d := time.Until(deadline) - Window; d > 0 {
		time.Sleep(d)
	}
	for time.Now().Before(deadline) {
		runtime.Gosched()
	}
}
