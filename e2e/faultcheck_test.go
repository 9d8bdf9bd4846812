package e2e

import (
	"sort"
	"strconv"
	"testing"
)

// check goes over what every receiver of the fault run got (see
// TestClusterFaults). relaxed is, per node, the frames its current process
// delivered outside the stream's order.
func (fc *faultCluster) check(relaxed []float64) {
	t := fc.t
	t.Helper()
	for _, r := range fc.receivers {
		frames := r.frames()
		seen := make(map[string]bool, len(frames))
		first, last := map[string]int{}, map[string]int{}
		bad := 0
		for _, f := range frames {
			k := f.from + "#" + strconv.Itoa(f.i)
			if seen[k] {
				t.Errorf("%s got frame %d of %s twice", r.name, f.i, f.from)
				bad++
			}
			seen[k] = true
			if prev, ok := last[f.from]; ok && f.i != prev+1 {
				if f.i <= prev {
					t.Errorf("%s got frame %d of %s after frame %d: the sender's order is broken", r.name, f.i, f.from, prev)
				} else {
					t.Errorf("%s got frame %d of %s after frame %d: %d frames missing", r.name, f.i, f.from, prev, f.i-prev-1)
				}
				bad++
			}
			if _, ok := first[f.from]; !ok {
				first[f.from] = f.i
			}
			last[f.from] = f.i
			if bad > 10 {
				t.Fatalf("%s: giving up on its frames", r.name)
			}
		}
		if !r.live() {
			continue // its node was killed: what it got is checked above
		}
		for _, s := range fc.senders {
			from, to := expect(r, s)
			if from > to {
				continue
			}
			f, ok := first[s.name]
			switch {
			case !ok:
				t.Errorf("%s got none of frames %d-%d of %s", r.name, from, to, s.name)
			case f > from:
				t.Errorf("%s got %s's frames from %d on, but it was connected when frame %d was sent", r.name, s.name, f, from)
			case last[s.name] < to:
				t.Errorf("%s got %s's frames up to %d, want up to %d", r.name, s.name, last[s.name], to)
			}
		}
	}
	if fc.order != "total" {
		return
	}
	var live []*fReceiver
	for _, r := range fc.receivers {
		if r.live() {
			live = append(live, r)
		}
	}
	for i, a := range live {
		for _, b := range live[i+1:] {
			x, y := commonOrder(a.frames(), b.frames())
			diff := len(x) - lcs(x, y)
			if allowed := relaxed[a.node] + relaxed[b.node]; float64(diff) > allowed {
				t.Errorf("%s and %s saw %d common frames in orders that differ by %d frames, more than their nodes delivered outside the stream's order (%v)",
					a.name, b.name, len(x), diff, allowed)
			}
		}
	}
}

// commonOrder returns the frames both a and b got, each in its own order.
func commonOrder(a, b []rFrame) (x, y []string) {
	key := func(f rFrame) string { return f.from + "#" + strconv.Itoa(f.i) }
	inA := make(map[string]bool, len(a))
	for _, f := range a {
		inA[key(f)] = true
	}
	inB := make(map[string]bool, len(b))
	for _, f := range b {
		if k := key(f); inA[k] {
			inB[k] = true
			y = append(y, k)
		}
	}
	for _, f := range a {
		if k := key(f); inB[k] {
			x = append(x, k)
		}
	}
	return x, y
}

// lcs returns the length of the longest common subsequence of x and y, two
// orders of the same distinct items: the longest increasing run of y's
// items' positions in x (patience sorting).
func lcs(x, y []string) int {
	pos := make(map[string]int, len(x))
	for i, k := range x {
		pos[k] = i
	}
	var tails []int
	for _, k := range y {
		p := pos[k]
		i := sort.SearchInts(tails, p)
		if i == len(tails) {
			tails = append(tails, p)
		} else {
			tails[i] = p
		}
	}
	return len(tails)
}

func TestLCS(t *testing.T) {
	for _, c := range []struct {
		x, y []string
		want int
	}{
		{[]string{"a", "b", "c", "d"}, []string{"a", "b", "c", "d"}, 4},
		{[]string{"a", "b", "c", "d"}, []string{"b", "a", "c", "d"}, 3},
		{[]string{"a", "b", "c", "d", "e"}, []string{"d", "e", "a", "b", "c"}, 3},
		{nil, nil, 0},
	} {
		if got := lcs(c.x, c.y); got != c.want {
			t.Errorf("lcs(%v, %v) = %d, want %d", c.x, c.y, got, c.want)
		}
	}
}
