package bus

import (
	"syscall"
	"time"
	"unsafe"
)

// sleepPrecise sleeps d in the kernel (nanosleep: d plus the timer slack),
// holding the goroutine's P. The runtime's timers wake a process that has
// nothing else to do after a millisecond at the earliest, twenty times
// streamLinger; and a system call the scheduler is told of (entersyscall)
// wakes the sysmon thread, which takes the P away after 20 µs and hands it
// on, more work than the batching saves. Other Ps run on meanwhile; on a
// single P, other clients' readers wait for the sleep at most.
func sleepPrecise(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0) // EINTR: a shorter linger
}
