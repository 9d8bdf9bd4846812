package stats

import "testing"

func TestStreams(t *testing.T) {
	type obs struct {
		from int
		seq  uint64
	}
	tests := []struct {
		name      string
		expected  []int
		sent      []int
		in        []obs
		wantFirst int // Observe calls that returned true
		want      StreamTotals
		lost      int
	}{
		{name: "interleaved senders are in order", expected: []int{3, 3}, sent: []int{3, 3},
			in:        []obs{{0, 0}, {1, 0}, {1, 1}, {0, 1}, {0, 2}, {1, 2}},
			wantFirst: 6, want: StreamTotals{Distinct: 6}},
		{name: "loss is per sender", expected: []int{3, 3}, sent: []int{3, 3},
			in:        []obs{{0, 0}, {0, 2}, {1, 0}, {1, 1}, {1, 2}},
			wantFirst: 5, want: StreamTotals{Distinct: 5}, lost: 1},
		{name: "reorder within one sender", expected: []int{4, 2}, sent: []int{4, 2},
			in:        []obs{{0, 0}, {0, 2}, {1, 1}, {0, 1}, {1, 0}, {0, 3}},
			wantFirst: 6, want: StreamTotals{Distinct: 6, OutOfOrder: 2}},
		{name: "duplicates", expected: []int{2, 2}, sent: []int{2, 2},
			in:        []obs{{0, 0}, {0, 0}, {1, 0}, {0, 1}, {1, 1}, {1, 0}},
			wantFirst: 4, want: StreamTotals{Distinct: 4, Duplicates: 2}},
		{name: "strangers and numbers beyond the plan", expected: []int{2}, sent: []int{2},
			in:        []obs{{0, 0}, {5, 0}, {-1, 0}, {0, 7}, {0, 1}},
			wantFirst: 2, want: StreamTotals{Distinct: 2, Unexpected: 3}},
		{name: "a sender that stopped early loses nothing it did not send", expected: []int{5, 5}, sent: []int{2, 5},
			in:        []obs{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}},
			wantFirst: 7, want: StreamTotals{Distinct: 7}, lost: 0},
		{name: "short sent list", expected: []int{2, 2}, sent: []int{2},
			in:        []obs{{0, 0}},
			wantFirst: 1, want: StreamTotals{Distinct: 1}, lost: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStreams(tt.expected)
			first := 0
			for _, o := range tt.in {
				if s.Observe(o.from, o.seq) {
					first++
				}
			}
			if first != tt.wantFirst {
				t.Errorf("first deliveries %d, want %d", first, tt.wantFirst)
			}
			if got := s.Totals(); got != tt.want {
				t.Errorf("totals %+v, want %+v", got, tt.want)
			}
			if got := s.Lost(tt.sent); got != tt.lost {
				t.Errorf("lost %d, want %d", got, tt.lost)
			}
		})
	}
}

func TestStreamsObserveDoesNotAllocate(t *testing.T) {
	s := NewStreams([]int{1000, 1000, 1000})
	var i uint64
	if n := testing.AllocsPerRun(1000, func() { s.Observe(int(i%3), i/3); i++ }); n != 0 {
		t.Errorf("Observe allocates %v times", n)
	}
}
