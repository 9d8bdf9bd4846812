//go:build unix

package stats

import (
	"syscall"
	"time"
)

// SelfCPU returns the CPU time (user + system) this process has used so far,
// from getrusage(RUSAGE_SELF), in microseconds resolution.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
