package stats

import (
	"os"
	"testing"
	"time"
)

func TestReadCPUAndCPUSince(t *testing.T) {
	pid := os.Getpid()
	before, err := ReadCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	used := burnCPU(t, 30*time.Millisecond)
	after, err := ReadCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	d := CPUSince(before, after)
	if d < 15*time.Millisecond || d > used+10*time.Second {
		t.Errorf("CPU time over a busy loop that getrusage says used %v: %v", used, d)
	}
	if _, err := ReadCPU(-1); err == nil {
		t.Error("no error for pid -1")
	}
}

func TestCPUSinceFallsBackToTicks(t *testing.T) {
	tick := time.Second / time.Duration(ClockTicks())
	a := CPUSample{Ticks: 10 * tick, Threads: 95 * tick, precise: true}
	// A thread exited: the per-thread sum went down; the tick total is
	// the figure to trust.
	b := CPUSample{Ticks: 20 * tick, Threads: 90 * tick, precise: true}
	if got := CPUSince(a, b); got != 10*tick {
		t.Errorf("got %v, want %v", got, 10*tick)
	}
	// Both agree within two ticks: the precise figure wins.
	c := CPUSample{Ticks: 20 * tick, Threads: 95*tick + 9*tick + tick/2, precise: true}
	if got := CPUSince(a, c); got != 9*tick+tick/2 {
		t.Errorf("got %v, want %v", got, 9*tick+tick/2)
	}
	// Without schedstat: ticks.
	if got := CPUSince(CPUSample{Ticks: tick}, CPUSample{Ticks: 3 * tick}); got != 2*tick {
		t.Errorf("got %v", got)
	}
}

func TestThreadsCPUFromFakeProc(t *testing.T) {
	dir := t.TempDir()
	for i, line := range []string{"1000 5 7\n", "2500 1 1\n"} {
		p := dir + "/42/task/" + string(rune('1'+i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p+"/schedstat", []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, ok := threadsCPU(dir, 42)
	if !ok || d != 3500 {
		t.Errorf("got %v %v, want 3.5µs", d, ok)
	}
	if _, ok := threadsCPU(dir, 43); ok {
		t.Error("ok for a missing pid")
	}
}
