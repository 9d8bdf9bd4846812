package stats

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tail := " S 1 2 3 0 -1 4194560 100 0 0 0 %s 0 0 20 0 4 0 12345 1000000 200 18446744073709551615\n"
	line := func(comm, ut, st string) []byte {
		return []byte("4242 (" + comm + ")" + fmt.Sprintf(tail, ut+" "+st))
	}
	tests := []struct {
		name    string
		in      []byte
		want    ProcStat
		wantErr bool
	}{
		{name: "plain", in: line("ovbus", "250", "75"), want: ProcStat{UTime: 250, STime: 75}},
		{name: "comm with spaces", in: line("Web Content", "1", "2"), want: ProcStat{UTime: 1, STime: 2}},
		{name: "comm with parens", in: line("a) S 9 9 (b", "10", "20"), want: ProcStat{UTime: 10, STime: 20}},
		{name: "big", in: line("x", "18446744073709551615", "0"), want: ProcStat{UTime: 1<<64 - 1}},
		{name: "no paren", in: []byte("4242 ovbus S 1 2 3"), wantErr: true},
		{name: "short", in: []byte("4242 (ovbus) S 1 2 3"), wantErr: true},
		{name: "not a number", in: line("x", "ten", "0"), wantErr: true},
		{name: "empty", in: nil, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcStat(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTicksToDuration(t *testing.T) {
	tests := []struct {
		n     uint64
		ticks int64
		want  time.Duration
	}{
		{n: 0, ticks: 100, want: 0},
		{n: 1, ticks: 100, want: 10 * time.Millisecond},
		{n: 250, ticks: 100, want: 2500 * time.Millisecond},
		{n: 3, ticks: 1000, want: 3 * time.Millisecond},
		{n: 1, ticks: 300, want: time.Second / 300},
		{n: 7, ticks: 0, want: 70 * time.Millisecond}, // unknown unit: 100 Hz
		{n: 100 * 86400 * 365, ticks: 100, want: 365 * 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := TicksToDuration(tt.n, tt.ticks); got != tt.want {
			t.Errorf("TicksToDuration(%d, %d) = %v, want %v", tt.n, tt.ticks, got, tt.want)
		}
	}
	if got := (ProcStat{UTime: 30, STime: 20}).CPU(100); got != 500*time.Millisecond {
		t.Errorf("CPU = %v, want 500ms", got)
	}
}

func TestClockTicks(t *testing.T) {
	if n := ClockTicks(); n <= 0 || n > 10000 {
		t.Errorf("ClockTicks = %d", n)
	}
}

// burn spins for d of wall time; on a loaded machine it gets less CPU.
func burn(d time.Duration) (x uint64) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 10000 {
			x += uint64(i) * x
		}
	}
	return x
}

// burnCPU keeps this goroutine busy until getrusage says the process has used at least d of CPU
// time, however long a loaded machine takes to give it that (a wall-clock loop gets a few
// milliseconds of CPU beside busy loops), and returns what it used. A minute without it is a
// measurement that is stuck.
func burnCPU(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	s0, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	for give := time.Now().Add(time.Minute); ; {
		_ = burn(5 * time.Millisecond)
		s, err := SelfCPU()
		if err != nil {
			t.Fatal(err)
		}
		if s-s0 >= d {
			return s - s0
		}
		if time.Now().After(give) {
			t.Fatalf("getrusage: %v of CPU time after a minute of busy loop", s-s0)
		}
	}
}

func TestSelfAndProcessCPU(t *testing.T) {
	s0, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	p0, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	burnCPU(t, 150*time.Millisecond)
	s1, _ := SelfCPU()
	p1, _ := ProcessCPU(os.Getpid())
	if s1-s0 < 20*time.Millisecond {
		t.Errorf("SelfCPU grew by %v over a 150 ms busy loop", s1-s0)
	}
	if p1 < p0 || p1-p0 < 20*time.Millisecond {
		t.Errorf("ProcessCPU went from %v to %v over a 150 ms busy loop", p0, p1)
	}
	// Both count the same process: within a few ticks of each other.
	if diff := (s1 - p1).Abs(); diff > 200*time.Millisecond {
		t.Errorf("SelfCPU %v and ProcessCPU %v disagree", s1, p1)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("ProcessCPU(-1) did not fail")
	}
}
