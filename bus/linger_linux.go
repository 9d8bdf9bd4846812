package bus

import (
	"syscall"
	"time"
)

// sleepPrecise sleeps d in the kernel (nanosleep: d plus the timer slack):
// the runtime's timers wake a process that has nothing else to do after a
// millisecond at the earliest, twenty times streamLinger.
func sleepPrecise(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil) // EINTR: a shorter linger, harmless
}
