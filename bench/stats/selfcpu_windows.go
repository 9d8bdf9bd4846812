package stats

import (
	"syscall"
	"time"
)

// SelfCPU returns the CPU time (user + system) this process has used so far,
// from GetProcessTimes, in units of 100 ns.
func SelfCPU() (time.Duration, error) {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		return 0, err
	}
	var created, exited, kernel, user syscall.Filetime
	if err := syscall.GetProcessTimes(h, &created, &exited, &kernel, &user); err != nil {
		return 0, err
	}
	hundreds := func(f syscall.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
	return time.Duration(hundreds(kernel)+hundreds(user)) * 100, nil
}
