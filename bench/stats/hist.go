package stats

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations in log-linear buckets, as HdrHistogram does:
// values below 2^HistogramBits nanoseconds each have a bucket of their own,
// and every power of two above is split into 2^HistogramBits equal buckets.
// A recorded value is therefore known to within 1/2^HistogramBits of itself
// (0.78 %), from a nanosecond to the longest time.Duration, in a fixed 57 KiB
// of counters, whatever the number of values: a steady run records millions
// of deliveries, and keeping each one to sort at the end, as Samples does,
// would cost more memory than the run is worth.
//
// Percentile is the nearest-rank percentile (the ⌈q·n⌉-th smallest value),
// reported as the highest value of its bucket, clamped to the largest value
// recorded: never below the exact figure, and at most 0.78 % above it. Min,
// Max and Mean are exact.
//
// Record does not allocate once the histogram exists. A Histogram is not safe
// for concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	counts   []uint64 // histBuckets, allocated on first use
	n        uint64
	min, max int64
	sum      float64
}

// HistogramBits is the number of bits of precision of a Histogram: 2^7 = 128
// buckets per power of two.
const HistogramBits = 7

const (
	histSub     = 1 << HistogramBits
	histBuckets = (64 - HistogramBits) * histSub // index of math.MaxInt64, plus one
)

// NewHistogram returns an empty histogram with its counters allocated.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, histBuckets)}
}

// histIndex returns the bucket of v ≥ 0: v itself below 2·histSub (each such
// value is its own bucket), else s·histSub + v>>s, where s is how far v must
// be shifted right to leave HistogramBits+1 significant bits.
func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	s := bits.Len64(uint64(v)) - HistogramBits - 1
	return s*histSub + int(v>>s)
}

// histRange returns the smallest and largest value of bucket i.
func histRange(i int) (lo, hi int64) {
	if i < 2*histSub {
		return int64(i), int64(i)
	}
	s := i/histSub - 1
	m := int64(i - s*histSub)                // in [histSub, 2·histSub)
	return m << s, int64(uint64(m+1)<<s - 1) // unsigned: the last bucket ends at 2^63 − 1
}

// Record counts one value; a negative value counts as 0.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value counted by o.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return int64(h.n) }

// Min and Max are the smallest and largest value recorded (0 when none).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the mean of the values recorded (0 when none).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Percentile returns the nearest-rank q-quantile (0 ≤ q ≤ 1) of the values
// recorded, to within the histogram's precision: see Histogram. q ≤ 0 is the
// minimum, q ≥ 1 the maximum; 0 when nothing was recorded.
func (h *Histogram) Percentile(q float64) time.Duration {
	switch {
	case h.n == 0:
		return 0
	case q <= 0 || math.IsNaN(q):
		return time.Duration(h.min)
	case q >= 1:
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := histRange(i)
			return time.Duration(min(max(hi, h.min), h.max))
		}
	}
	return time.Duration(h.max) // not reached: the counts add up to n
}

// Reset forgets every value and keeps the counters' storage.
func (h *Histogram) Reset() {
	clear(h.counts)
	*h = Histogram{counts: h.counts}
}
