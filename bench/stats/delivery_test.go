package stats

import (
	"testing"
	"time"
)

func TestDropsRateThroughput(t *testing.T) {
	tests := []struct {
		name               string
		expected, received int
		elapsed            time.Duration
		wantDrops          int
		wantThroughput     float64
	}{
		{name: "all delivered", expected: 1000, received: 1000, elapsed: time.Second, wantDrops: 0, wantThroughput: 1000},
		{name: "some dropped", expected: 1000, received: 900, elapsed: 500 * time.Millisecond, wantDrops: 100, wantThroughput: 1800},
		{name: "nothing", expected: 10, received: 0, elapsed: time.Second, wantDrops: 10, wantThroughput: 0},
		{name: "extra is not a negative drop", expected: 10, received: 12, elapsed: time.Second, wantDrops: 0, wantThroughput: 10},
		{name: "zero time", expected: 10, received: 10, elapsed: 0, wantDrops: 0, wantThroughput: 0},
		{name: "upstream 20x1000", expected: 20 * 1000, received: 20 * 1000, elapsed: 4 * time.Second, wantDrops: 0, wantThroughput: 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Drops(tt.expected, tt.received)
			if d != tt.wantDrops {
				t.Errorf("Drops = %d, want %d", d, tt.wantDrops)
			}
			if got := Throughput(tt.expected, d, tt.elapsed); got != tt.wantThroughput {
				t.Errorf("Throughput = %v, want %v", got, tt.wantThroughput)
			}
		})
	}
	if got := Rate(300, 1500*time.Millisecond); got != 200 {
		t.Errorf("Rate = %v, want 200", got)
	}
	if got := Rate(5, -time.Second); got != 0 {
		t.Errorf("Rate(negative) = %v, want 0", got)
	}
}

func TestOrder(t *testing.T) {
	type want struct{ received, distinct, outOfOrder, dups, unexpected, missing int }
	tests := []struct {
		name     string
		expected int
		seqs     []uint64
		want     want
		inOrder  bool
	}{
		{name: "in order", expected: 5, seqs: []uint64{0, 1, 2, 3, 4},
			want: want{5, 5, 0, 0, 0, 0}, inOrder: true},
		{name: "nothing", expected: 3, seqs: nil,
			want: want{0, 0, 0, 0, 0, 3}},
		{name: "nothing expected", expected: 0, seqs: nil, inOrder: true},
		{name: "gap is missing, not reordering", expected: 5, seqs: []uint64{0, 1, 3, 4},
			want: want{4, 4, 0, 0, 0, 1}},
		{name: "swap", expected: 4, seqs: []uint64{0, 2, 1, 3},
			want: want{4, 4, 1, 0, 0, 0}},
		{name: "late first", expected: 4, seqs: []uint64{1, 2, 3, 0},
			want: want{4, 4, 1, 0, 0, 0}},
		{name: "reversed", expected: 4, seqs: []uint64{3, 2, 1, 0},
			want: want{4, 4, 3, 0, 0, 0}},
		{name: "duplicate", expected: 3, seqs: []uint64{0, 1, 1, 2},
			want: want{4, 3, 0, 1, 0, 0}},
		{name: "old duplicate is a duplicate only", expected: 3, seqs: []uint64{0, 1, 2, 0},
			want: want{4, 3, 0, 1, 0, 0}},
		{name: "out of range", expected: 2, seqs: []uint64{0, 1, 2, 1 << 40},
			want: want{4, 2, 0, 0, 2, 0}},
		{name: "bit boundaries", expected: 130, seqs: []uint64{63, 64, 127, 128, 129},
			want: want{5, 5, 0, 0, 0, 125}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOrder(tt.expected)
			for _, s := range tt.seqs {
				o.Observe(s)
			}
			got := want{o.Received, o.Distinct, o.OutOfOrder, o.Duplicates, o.Unexpected, o.Missing()}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if o.InOrder() != tt.inOrder {
				t.Errorf("InOrder = %v, want %v", o.InOrder(), tt.inOrder)
			}
			o.Reset()
			if o.Received != 0 || o.Missing() != tt.expected {
				t.Errorf("after Reset: received %d missing %d", o.Received, o.Missing())
			}
			for i := range tt.expected {
				o.Observe(uint64(i))
			}
			if !o.InOrder() {
				t.Errorf("after Reset, an in-order run is not in order: %+v", o)
			}
		})
	}
}

func TestOrderObserveDoesNotAllocate(t *testing.T) {
	o := NewOrder(1000)
	var i uint64
	allocs := testing.AllocsPerRun(1000, func() { o.Observe(i); i++ })
	if allocs != 0 {
		t.Errorf("Observe allocates %v times", allocs)
	}
}

func TestSummarizeRepeats(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want Spread
	}{
		{name: "empty", in: nil, want: Spread{}},
		{name: "one", in: []float64{5}, want: Spread{N: 1, Median: 5, Min: 5, Max: 5}},
		{name: "three", in: []float64{70e3, 50e3, 60e3}, want: Spread{N: 3, Median: 60e3, Min: 50e3, Max: 70e3}},
		{name: "four", in: []float64{4, 1, 3, 2}, want: Spread{N: 4, Median: 2.5, Min: 1, Max: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := append([]float64(nil), tt.in...)
			if got := SummarizeRepeats(tt.in); got != tt.want {
				t.Errorf("SummarizeRepeats(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
			for i := range orig {
				if orig[i] != tt.in[i] {
					t.Fatalf("input modified: %v", tt.in)
				}
			}
		})
	}
}
