// Package stats collects and summarises what the ovbus benchmarks measure:
// latency samples, percentiles, drops, delivery order, rates, the CPU time of
// the process under test and a summary over repeated runs.
//
// The definitions follow the upstream OVOS message-bus benchmark
// (ovos-messagebus benchmark/run_benchmark.py) so that figures can be set side
// by side with the published ones:
//
//   - a percentile q indexes the ascending sorted samples at int(q·n), clamped
//     to the last sample (Percentile);
//   - the median is the middle sample, or the mean of the two middle samples
//     when n is even, as Python's statistics.median (Median);
//   - dropped = expected − received (Drops);
//   - throughput = (expected − dropped) / time from the first send until every
//     subscriber finished (Throughput).
//
// A steady run records millions of deliveries: Histogram keeps them in
// log-linear buckets (HdrHistogram's layout) and gives nearest-rank
// percentiles to within 0.8 %; Streams checks the order of several senders'
// frames on one receiver.
//
// Recording is allocation free once a Samples or an Order has been created
// with the right capacity, so a receiver can record every delivery on its hot
// path. None of the types is safe for concurrent use: give each receiving
// goroutine its own and merge them at the end.
package stats
