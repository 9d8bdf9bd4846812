//go:build !unix

package bus

import "time"

// processCPU returns 0: the benchmarks report no CPU time here.
func processCPU() time.Duration { return 0 }
