//go:build !linux

package bench

import "time"

// Pause sleeps for d (see pace_linux.go).
func Pause(d time.Duration) { time.Sleep(d) }
