package stats

import "time"

// Drops returns expected − received, the upstream benchmark's "dropped". It
// is never negative: deliveries beyond the expected count (duplicates,
// strays) are reported by Order, not hidden in a negative drop count.
func Drops(expected, received int) int {
	if received >= expected {
		return 0
	}
	return expected - received
}

// Rate returns n events per second over d, or 0 when d is not positive.
func Rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Throughput is the upstream benchmark's figure: deliveries per second,
// (expected − dropped) / elapsed, where elapsed runs from the first send until
// every subscriber has finished.
func Throughput(expected, dropped int, elapsed time.Duration) float64 {
	return Rate(expected-dropped, elapsed)
}

// Order checks the sequence numbers one subscriber receives from one sender,
// which numbers its messages 0, 1, …, expected−1.
//
// Observe does not allocate. An Order is not safe for concurrent use: keep
// one per subscriber (and per sender when there are several).
type Order struct {
	seen []uint64 // bitset of sequence numbers received, len (expected+63)/64
	exp  uint64
	max  uint64
	any  bool

	Received   int // every Observe call
	Distinct   int // sequence numbers in [0, expected) seen at least once
	OutOfOrder int // arrived after a higher sequence number (duplicates excluded)
	Duplicates int // sequence numbers in range seen more than once
	Unexpected int // sequence numbers outside [0, expected)
}

// NewOrder returns an Order for a sender that sends expected messages.
func NewOrder(expected int) *Order {
	if expected < 0 {
		expected = 0
	}
	return &Order{seen: make([]uint64, (expected+63)/64), exp: uint64(expected)}
}

// Observe records the delivery of the message numbered seq.
func (o *Order) Observe(seq uint64) {
	o.Received++
	if seq >= o.exp {
		o.Unexpected++
		return
	}
	w, bit := seq/64, uint64(1)<<(seq%64)
	if o.seen[w]&bit != 0 {
		o.Duplicates++
		return
	}
	o.seen[w] |= bit
	o.Distinct++
	if o.any && seq < o.max {
		o.OutOfOrder++
	}
	if !o.any || seq > o.max {
		o.max, o.any = seq, true
	}
}

// Missing returns how many of the expected sequence numbers were never seen.
func (o *Order) Missing() int { return int(o.exp) - o.Distinct }

// InOrder reports whether every expected message arrived exactly once, in
// order, and nothing else arrived.
func (o *Order) InOrder() bool {
	return o.OutOfOrder == 0 && o.Duplicates == 0 && o.Unexpected == 0 && o.Missing() == 0
}

// Reset forgets every observation and keeps the storage.
func (o *Order) Reset() {
	clear(o.seen)
	*o = Order{seen: o.seen, exp: o.exp}
}
