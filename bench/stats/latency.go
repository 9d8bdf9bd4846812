package stats

import (
	"slices"
	"time"
)

// Samples collects latency samples in a slice allocated up front.
//
// Add does not allocate while Len() < the capacity given to NewSamples; past
// it the slice grows as append does. A Samples is not safe for concurrent use.
type Samples struct {
	d []time.Duration
}

// NewSamples returns a Samples with room for capacity samples.
func NewSamples(capacity int) *Samples {
	if capacity < 0 {
		capacity = 0
	}
	return &Samples{d: make([]time.Duration, 0, capacity)}
}

// Add records one sample.
func (s *Samples) Add(d time.Duration) { s.d = append(s.d, d) }

// Len reports the number of samples recorded.
func (s *Samples) Len() int { return len(s.d) }

// Reset forgets every sample and keeps the storage.
func (s *Samples) Reset() { s.d = s.d[:0] }

// Merge appends the samples of o.
func (s *Samples) Merge(o *Samples) { s.d = append(s.d, o.d...) }

// Values returns the recorded samples; the slice aliases the storage (Summary
// sorts it in place).
func (s *Samples) Values() []time.Duration { return s.d }

// Summary sorts the samples in place and summarises them.
func (s *Samples) Summary() Summary { return Summarize(s.d) }

// Summary is the latency line of a benchmark report.
type Summary struct {
	N                          int
	Min, Median, P95, P99, Max time.Duration
}

// Summarize sorts d in place (ascending) and returns its summary. The zero
// Summary is returned for no samples.
func Summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	slices.Sort(d)
	return Summary{
		N:      len(d),
		Min:    d[0],
		Median: Median(d),
		P95:    Percentile(d, 0.95),
		P99:    Percentile(d, 0.99),
		Max:    d[len(d)-1],
	}
}

// Percentile returns sorted[int(q·n)], the index clamped to [0, n-1], which is
// how the upstream benchmark computes p95 and p99 (no interpolation). sorted
// must be in ascending order; 0 is returned for an empty slice.
func Percentile[T ~int64 | ~float64](sorted []T, q float64) T {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(q * float64(n))
	if i < 0 {
		i = 0
	}
	if i > n-1 {
		i = n - 1
	}
	return sorted[i]
}

// Median returns the median of an ascending sorted slice the way Python's
// statistics.median does: the middle element, or the mean of the two middle
// elements when the length is even. 0 is returned for an empty slice.
func Median[T ~int64 | ~float64](sorted []T) T {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	a, b := sorted[n/2-1], sorted[n/2]
	return a + (b-a)/2 // no overflow for large durations
}
