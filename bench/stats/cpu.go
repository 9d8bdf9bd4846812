package stats

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultClockTicks is the USER_HZ that Linux reports /proc times in on every
// mainstream architecture; ClockTicks falls back to it.
const DefaultClockTicks = 100

var clockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return DefaultClockTicks
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return DefaultClockTicks
	}
	return n
})

// ClockTicks returns the unit of the times in /proc/<pid>/stat, in ticks per
// second: sysconf(_SC_CLK_TCK), read once by running `getconf CLK_TCK`, or
// DefaultClockTicks (100) when getconf is not available. Go has no sysconf
// without cgo; the value is fixed by the kernel ABI (USER_HZ), so asking once
// per process is enough.
func ClockTicks() int64 { return clockTicks() }

// ProcStat holds the CPU fields of /proc/<pid>/stat, in clock ticks.
type ProcStat struct {
	UTime, STime uint64 // fields 14 and 15 (proc(5)): user and system time
}

// ParseProcStat parses the contents of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may itself contain spaces and parentheses,
// so fields are counted from the last ')'.
func ParseProcStat(b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("stats: malformed proc stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return ProcStat{}, fmt.Errorf("stats: malformed proc stat: %d fields after the command name", len(f))
	}
	u, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("stats: proc stat utime: %w", err)
	}
	s, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("stats: proc stat stime: %w", err)
	}
	return ProcStat{UTime: u, STime: s}, nil
}

// CPU returns user + system time, converted with ticks per second.
func (p ProcStat) CPU(ticks int64) time.Duration {
	return TicksToDuration(p.UTime+p.STime, ticks)
}

// TicksToDuration converts clock ticks to a duration.
func TicksToDuration(n uint64, ticks int64) time.Duration {
	if ticks <= 0 {
		ticks = DefaultClockTicks
	}
	sec := n / uint64(ticks)
	rem := n % uint64(ticks)
	return time.Duration(sec)*time.Second + time.Duration(rem)*time.Second/time.Duration(ticks)
}

// ProcessCPU returns the CPU time (user + system, all threads, not children)
// that process pid has used so far, from /proc/<pid>/stat. Its resolution is
// one clock tick (10 ms at 100 Hz): measure differences over runs that last
// at least a second or so.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	st, err := ParseProcStat(b)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return st.CPU(ClockTicks()), nil
}
