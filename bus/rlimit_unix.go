//go:build unix

package bus

import "syscall"

// openFileLimit raises the soft limit of open files to the hard limit (the
// Go runtime does so at start on most systems since Go 1.19; this makes
// sure) and returns the limit in force, or 0 when it cannot be read.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			rl = raised
		}
	}
	return uint64(rl.Cur)
}
