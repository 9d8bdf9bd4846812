package stats

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	seq := func(n int) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(i)
		}
		return s
	}
	tests := []struct {
		name   string
		sorted []int64
		q      float64
		want   int64
	}{
		{name: "empty", sorted: nil, q: 0.5, want: 0},
		{name: "one p99", sorted: []int64{7}, q: 0.99, want: 7},
		{name: "ten p95 is index 9", sorted: seq(10), q: 0.95, want: 9},
		{name: "ten p50 is index 5", sorted: seq(10), q: 0.5, want: 5},
		{name: "hundred p95", sorted: seq(100), q: 0.95, want: 95},
		{name: "hundred p99", sorted: seq(100), q: 0.99, want: 99},
		{name: "thousand p99", sorted: seq(1000), q: 0.99, want: 990},
		{name: "q=1 clamped", sorted: seq(10), q: 1, want: 9},
		{name: "q>1 clamped", sorted: seq(10), q: 2, want: 9},
		{name: "q=0", sorted: seq(10), q: 0, want: 0},
		{name: "q<0 clamped", sorted: seq(10), q: -1, want: 0},
		{name: "truncates, no rounding", sorted: seq(7), q: 0.99, want: 6},   // int(6.93)
		{name: "truncates below", sorted: seq(19), q: 0.95, want: 18},        // int(18.05)
		{name: "truncates p95 of 30", sorted: seq(30), q: 0.95, want: 28},    // int(28.5)
		{name: "p99 of 150 index 148", sorted: seq(150), q: 0.99, want: 148}, // int(148.5)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.q); got != tt.want {
				t.Errorf("Percentile(n=%d, %v) = %d, want %d", len(tt.sorted), tt.q, got, tt.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		name   string
		sorted []float64
		want   float64
	}{
		{name: "empty", sorted: nil, want: 0},
		{name: "one", sorted: []float64{3}, want: 3},
		{name: "odd", sorted: []float64{1, 2, 9}, want: 2},
		{name: "even is mean of middle two", sorted: []float64{1, 2, 4, 9}, want: 3},
		{name: "two", sorted: []float64{1, 2}, want: 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Median(tt.sorted); got != tt.want {
				t.Errorf("Median(%v) = %v, want %v", tt.sorted, got, tt.want)
			}
		})
	}
	// Durations: the mean of the middle two, truncated to the nanosecond.
	if got := Median([]time.Duration{time.Millisecond, 2 * time.Millisecond}); got != 1500*time.Microsecond {
		t.Errorf("Median(1ms, 2ms) = %v, want 1.5ms", got)
	}
	// No overflow near the top of the range.
	big := time.Duration(1<<62) + time.Duration(1<<61)
	if got := Median([]time.Duration{big, big}); got != big {
		t.Errorf("Median(big, big) = %v, want %v", got, big)
	}
}

func TestSummarize(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		d := make([]time.Duration, len(xs))
		for i, x := range xs {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Summary
	}{
		{name: "empty", in: nil, want: Summary{}},
		{name: "one", in: ms(4), want: Summary{N: 1, Min: 4 * time.Millisecond, Median: 4 * time.Millisecond,
			P95: 4 * time.Millisecond, P99: 4 * time.Millisecond, Max: 4 * time.Millisecond}},
		{name: "unsorted ten", in: ms(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), want: Summary{N: 10,
			Min: 1 * time.Millisecond, Median: 5500 * time.Microsecond,
			P95: 10 * time.Millisecond, P99: 10 * time.Millisecond, Max: 10 * time.Millisecond}},
		{name: "outliers", in: ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 50), want: Summary{N: 20,
			Min: time.Millisecond, Median: time.Millisecond,
			P95: 50 * time.Millisecond, P99: 50 * time.Millisecond, Max: 50 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.in); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSamples(t *testing.T) {
	a, b := NewSamples(4), NewSamples(4)
	for _, d := range []time.Duration{3, 1} {
		a.Add(d)
	}
	for _, d := range []time.Duration{4, 2} {
		b.Add(d)
	}
	a.Merge(b)
	if a.Len() != 4 {
		t.Fatalf("Len = %d, want 4", a.Len())
	}
	s := a.Summary()
	if want := (Summary{N: 4, Min: 1, Median: 2, P95: 4, P99: 4, Max: 4}); s != want {
		t.Errorf("Summary = %+v, want %+v", s, want)
	}
	a.Reset()
	if a.Len() != 0 || cap(a.Values()) < 4 {
		t.Errorf("Reset: len %d cap %d", a.Len(), cap(a.Values()))
	}
	if NewSamples(-1).Len() != 0 {
		t.Error("negative capacity")
	}
}

func TestSamplesAddDoesNotAllocate(t *testing.T) {
	s := NewSamples(1000)
	allocs := testing.AllocsPerRun(900, func() { s.Add(time.Microsecond) })
	if allocs != 0 {
		t.Errorf("Add allocates %v times per sample", allocs)
	}
}

func BenchmarkSamplesAdd(b *testing.B) {
	s := NewSamples(b.N)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Add(time.Duration(i))
	}
}
