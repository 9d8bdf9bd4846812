package bench

import (
	"syscall"
	"time"
)

// Pause sleeps for d in nanosleep(2), on a thread of its own, rather than on
// a Go timer: an otherwise idle Go program learns of its timers when the
// runtime's netpoller wakes from epoll_wait, whose timeout is in whole
// milliseconds (golang/go#53824), so a sender paced by time.Sleep sends up to
// a millisecond late, and the senders whose frames fall due within the same
// millisecond send them together. A steady schedule of 2 000 frames/s would
// reach the bus as bursts of two.
func Pause(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
