package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactRank is the reference a Histogram is checked against: the nearest-rank
// q-quantile of sorted, the ⌈q·n⌉-th smallest value.
func exactRank(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func TestHistogramAgainstExactPercentiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sets := map[string][]time.Duration{}
	// Latency-like: log-normal around 1 ms with a long tail.
	var lognormal []time.Duration
	for range 200_000 {
		lognormal = append(lognormal, time.Duration(math.Exp(rng.NormFloat64()*1.2+math.Log(1e6))))
	}
	sets["lognormal"] = lognormal
	// Uniform over nine decades, a few huge values, exact small ones.
	var wide []time.Duration
	for range 50_000 {
		wide = append(wide, time.Duration(math.Pow(10, rng.Float64()*9)))
	}
	wide = append(wide, time.Hour, 100*time.Hour, math.MaxInt64)
	sets["wide"] = wide
	var small []time.Duration
	for range 10_000 {
		small = append(small, time.Duration(rng.IntN(300)))
	}
	sets["small"] = small
	sets["one"] = []time.Duration{1234567}
	sets["two"] = []time.Duration{5, 3_000_000_000}

	qs := []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1}
	for name, vals := range sets {
		t.Run(name, func(t *testing.T) {
			h := NewHistogram()
			for _, v := range vals {
				h.Record(v)
			}
			sorted := slices.Clone(vals)
			slices.Sort(sorted)
			if h.Count() != int64(len(vals)) || h.Min() != sorted[0] || h.Max() != sorted[len(sorted)-1] {
				t.Fatalf("count %d min %v max %v; want %d %v %v", h.Count(), h.Min(), h.Max(), len(vals), sorted[0], sorted[len(sorted)-1])
			}
			for _, q := range qs {
				want := exactRank(sorted, q)
				got := h.Percentile(q)
				// Never below the exact figure, and at most 1/2^HistogramBits above.
				if limit := float64(want) * (1 + 1.0/histSub); got < want || float64(got) > limit {
					t.Errorf("q %v: got %v, exact %v (allowed up to %.0f ns)", q, got, want, limit)
				}
				if want < 2*histSub && got != want {
					t.Errorf("q %v: got %v, want exactly %v below %d ns", q, got, want, 2*histSub)
				}
			}
			if got := h.Percentile(0); got != sorted[0] {
				t.Errorf("q 0: %v, want the minimum %v", got, sorted[0])
			}
			var sum float64
			for _, v := range vals {
				sum += float64(v)
			}
			if mean := sum / float64(len(vals)); math.Abs(float64(h.Mean())-mean) > mean*1e-9+1 {
				t.Errorf("mean %v, want %v", h.Mean(), time.Duration(mean))
			}
		})
	}
}

// TestHistogramBuckets checks the bucket layout itself: every value falls in
// a bucket whose range holds it, buckets are contiguous and in order, and each
// is narrower than 1/2^HistogramBits of its lowest value.
func TestHistogramBuckets(t *testing.T) {
	prevHi := int64(-1)
	for i := range histBuckets {
		lo, hi := histRange(i)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d: [%d, %d] after %d", i, lo, hi, prevHi)
		}
		if lo >= 2*histSub && float64(hi-lo+1) > float64(lo)/histSub {
			t.Fatalf("bucket %d: [%d, %d] wider than 1/%d of %d", i, lo, hi, histSub, lo)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d: index of %d is %d, of %d is %d", i, lo, histIndex(lo), hi, histIndex(hi))
		}
		prevHi = hi
	}
	if prevHi != math.MaxInt64 {
		t.Errorf("the last bucket ends at %d, not MaxInt64", prevHi)
	}
}

func TestHistogramMergeResetNegative(t *testing.T) {
	var a, b Histogram // the zero value works
	all := NewHistogram()
	for i := range 1000 {
		d := time.Duration(i * i * 1000)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	a.Merge(&b)
	a.Merge(nil)
	a.Merge(NewHistogram())
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
		if a.Percentile(q) != all.Percentile(q) {
			t.Errorf("merged q %v: %v, recorded together %v", q, a.Percentile(q), all.Percentile(q))
		}
	}
	if a.Count() != 1000 || a.Mean() != all.Mean() || a.Min() != 0 {
		t.Errorf("merged: count %d mean %v min %v", a.Count(), a.Mean(), a.Min())
	}
	a.Reset()
	if a.Count() != 0 || a.Percentile(0.5) != 0 || a.Max() != 0 || a.Mean() != 0 {
		t.Errorf("after Reset: count %d p50 %v max %v", a.Count(), a.Percentile(0.5), a.Max())
	}
	a.Record(-5 * time.Millisecond) // a clock step: counted as 0
	if a.Count() != 1 || a.Max() != 0 || a.Percentile(1) != 0 {
		t.Errorf("negative: count %d max %v", a.Count(), a.Max())
	}
	var empty Histogram
	if empty.Percentile(0.99) != 0 || empty.Mean() != 0 {
		t.Error("an empty histogram has a percentile")
	}
}

func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	h := NewHistogram()
	d := time.Duration(1)
	if n := testing.AllocsPerRun(1000, func() { h.Record(d); d = d*3 + 7 }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}
