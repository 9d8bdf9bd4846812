package stats

// This file is owned by the bench runner (package bench); it adds what the
// runner needs on top of cpu.go.

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// CPUSample is one reading of a process's CPU time, for differences over a
// run. Ticks is the /proc/<pid>/stat total (user + system, every thread that
// ever ran, 10 ms resolution); Threads is the sum of the live threads'
// on-CPU time from /proc/<pid>/task/*/schedstat (nanosecond resolution, but
// blind to threads that exit between two readings).
type CPUSample struct {
	Ticks   time.Duration
	Threads time.Duration
	precise bool
}

// ReadCPU samples the CPU time of process pid.
func ReadCPU(pid int) (CPUSample, error) {
	ticks, err := ProcessCPU(pid)
	if err != nil {
		return CPUSample{}, err
	}
	s := CPUSample{Ticks: ticks}
	s.Threads, s.precise = threadsCPU("/proc", pid)
	return s, nil
}

// CPUSince returns the CPU time used between two samples of one process: the
// precise per-thread figure, unless threads exited meanwhile (the per-thread
// sum then falls short of the tick count by more than two ticks) or schedstat
// is unavailable, in which case the tick-resolution figure.
func CPUSince(before, after CPUSample) time.Duration {
	ticks := after.Ticks - before.Ticks
	if !before.precise || !after.precise {
		return ticks
	}
	fine := after.Threads - before.Threads
	tick := time.Second / time.Duration(ClockTicks())
	if fine < 0 || ticks-fine > 2*tick {
		return ticks
	}
	return fine
}

// threadsCPU sums the first field of proc/pid/task/*/schedstat (time spent
// on the CPU, in nanoseconds).
func threadsCPU(proc string, pid int) (time.Duration, bool) {
	dir := filepath.Join(proc, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	var sum int64
	var buf [128]byte
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		n, _ := f.Read(buf[:])
		f.Close()
		b := buf[:n]
		if i := bytes.IndexByte(b, ' '); i > 0 {
			b = b[:i]
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return time.Duration(sum), true
}
