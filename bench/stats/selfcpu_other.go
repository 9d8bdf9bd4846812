//go:build !unix && !windows

package stats

import (
	"errors"
	"runtime"
	"time"
)

// SelfCPU fails where the process's CPU time cannot be read (plan9, js, wasip1): the reports
// then show the client's CPU as unknown.
func SelfCPU() (time.Duration, error) {
	return 0, errors.New("stats: no CPU time of this process on " + runtime.GOOS)
}
