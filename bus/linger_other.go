//go:build !linux

package bus

import "time"

// sleepPrecise sleeps d. Only the poll path lingers, and it is Linux's.
func sleepPrecise(d time.Duration) { time.Sleep(d) }
