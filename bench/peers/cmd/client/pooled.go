package main

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// Pooled latency: the percentiles of a scenario and target over every
// delivery of all its runs together. A run's own p99.9 rests on its slowest
// thousandth, which a few stalls of a shared machine move by a factor of
// several from run to run; pooled, it rests on every run's deliveries.
// Keeping millions of samples per run for that would cost more memory than
// the runs are worth, so the pool counts them in log-linear buckets.

// poolBits is the precision of a pool: 2^poolBits buckets per power of two
// above 2^(poolBits+1) ns, so a figure is at most 0.1 % above the exact one.
const poolBits = 10

// histogram counts nanosecond values by bucket (poolKey).
type histogram struct {
	counts map[uint64]uint64
	n      uint64
	max    int64
}

// poolKey is v's bucket: v itself below 2^(poolBits+1), else the shift s
// that leaves poolBits+1 significant bits and those bits, so that keys are
// ordered as their values.
func poolKey(v int64) uint64 {
	v = max(v, 0)
	s := bits.Len64(uint64(v)) - poolBits - 1
	if s <= 0 {
		return uint64(v)
	}
	return uint64(s)<<(poolBits+1) | uint64(v>>s)
}

// poolTop is the largest value of bucket k.
func poolTop(k uint64) int64 {
	s := k >> (poolBits + 1)
	if s == 0 {
		return int64(k)
	}
	m := int64(k & (1<<(poolBits+1) - 1))
	return (m+1)<<s - 1
}

func (h *histogram) add(vs []int64) {
	if h.counts == nil {
		h.counts = map[uint64]uint64{}
	}
	for _, v := range vs {
		h.counts[poolKey(v)]++
		h.max = max(h.max, v)
	}
	h.n += uint64(len(vs))
}

// rank is the nearest-rank q-percentile in ms: the top of the bucket of the
// ⌈q·n⌉-th smallest value, never above the largest value.
func (h *histogram) rank(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	want := uint64(max(math.Ceil(q*float64(h.n)), 1))
	keys := make([]uint64, 0, len(h.counts))
	for k := range h.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := uint64(0)
	for _, k := range keys {
		if seen += h.counts[k]; seen >= want {
			return float64(min(poolTop(k), h.max)) / 1e6
		}
	}
	return float64(h.max) / 1e6
}

// latencyPool is one scenario and target's pool: the latency from the due
// time and from the send.
type latencyPool struct {
	latency, fromSend histogram
	runs              int
}

func (p *latencyPool) add(latency, fromSend []int64) {
	p.latency.add(latency)
	p.fromSend.add(fromSend)
	p.runs++
}

// pooledColumns are the figures of a pool, in table order.
var pooledColumns = []struct{ key, title string }{
	{"delivered", "deliveries"}, {"p99_ms", "p99 ms"}, {"p999_ms", "p99.9 ms"}, {"p9999_ms", "p99.99 ms"}, {"max_ms", "max ms"},
	{"from_send_p99_ms", "p99 from send ms"}, {"from_send_p999_ms", "p99.9 from send ms"},
}

func (p *latencyPool) figures() map[string]float64 {
	return map[string]float64{
		"delivered": float64(p.latency.n), "runs": float64(p.runs),
		"p99_ms": p.latency.rank(0.99), "p999_ms": p.latency.rank(0.999), "p9999_ms": p.latency.rank(0.9999),
		"max_ms":           float64(p.latency.max) / 1e6,
		"from_send_p99_ms": p.fromSend.rank(0.99), "from_send_p999_ms": p.fromSend.rank(0.999),
	}
}

// writePooled writes the pooled rows as a markdown table.
func writePooled(out io.Writer, rows []steadyRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprint(out, "\nlatency over every delivery of all runs together (pooled: log-linear buckets, at most 0.1 % high)\n\n| scenario | target | runs |")
	for _, c := range pooledColumns {
		fmt.Fprintf(out, " %s |", c.title)
	}
	fmt.Fprint(out, "\n|---|---|---:|")
	for range pooledColumns {
		fmt.Fprint(out, "---:|")
	}
	fmt.Fprintln(out)
	for _, row := range rows {
		fmt.Fprintf(out, "| %s | %s | %.0f |", row.Scenario, row.Target, row.Figures["runs"])
		for _, c := range pooledColumns {
			v := row.Figures[c.key]
			if c.key == "delivered" {
				fmt.Fprintf(out, " %.0f |", v)
			} else {
				fmt.Fprintf(out, " %s |", strconv.FormatFloat(v, 'g', 3, 64))
			}
		}
		fmt.Fprintln(out)
	}
}
