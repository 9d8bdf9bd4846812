package ws

import (
	"sync/atomic"
)

// A Budget bounds the bytes that all the connections sharing it may hold
// for messages they are receiving: the payload collected so far of each
// message being read whole (ReadMessage, ReadMessageInto, NextMessage) and
// the compressed bytes each Protocol buffers until a compressed message's
// last frame (RFC 7692 §6.1). Share one Budget through AcceptOptions.Budget
// (or DialOptions.Budget, Config.Budget) to bound a whole server: without
// one, n connections may each hold up to the message size limit, twice
// over for a compressed message.
//
// A message longer than BudgetFree is charged whole as its bytes arrive,
// and released when done with: a Protocol releases the compressed bytes
// when their inflation ends, a Conn a message's payload at its next read
// call, or when it is closed or fails. A message that would take the Budget
// over its limit fails its connection at once with 1013 Try Again Later
// (the server is overloaded, not the sender at fault, unlike 1009), and
// Refused counts it.
// A Budget is safe for concurrent use. A nil *Budget is unlimited.
type Budget struct {
	limit   int64
	free    int64 // BudgetFree; tests lower it
	used    atomic.Int64
	peak    atomic.Int64
	charged atomic.Int64
	refused atomic.Uint64

	// OnDrained: the hook, and charged at its last call.
	drained atomic.Pointer[drainHook]
	mark    atomic.Int64
}

type drainHook struct {
	high, low int64
	f         func(charged int64)
}

// BudgetFree is the part of each message a Budget does not count: messages
// up to this size are read without touching the shared counter (the hot
// path stays free of contended atomics), and what they hold is bounded per
// connection like the read buffer.
const BudgetFree = 64 << 10

// NewBudget returns a Budget of limit bytes; limit <= 0 means unlimited (the
// Budget still counts).
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, free: BudgetFree}
}

// Limit returns the limit in bytes, 0 when unlimited.
func (b *Budget) Limit() int64 {
	if b == nil || b.limit < 0 {
		return 0
	}
	return b.limit
}

// InUse returns the bytes held now.
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Charged returns the bytes charged since NewBudget: a counter that only
// grows, so that an unchanged value over an interval means that no message
// longer than BudgetFree started or grew during it.
func (b *Budget) Charged() int64 {
	if b == nil {
		return 0
	}
	return b.charged.Load()
}

// Refused returns how many messages were refused because the Budget was
// exhausted: each one closed its connection with 1013.
func (b *Budget) Refused() uint64 {
	if b == nil {
		return 0
	}
	return b.refused.Load()
}

// acquire takes n bytes, or returns false (and counts a refusal) when that
// would take the Budget over its limit.
func (b *Budget) acquire(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		cur := b.used.Load()
		next := cur + n
		if b.limit > 0 && next > b.limit {
			b.refused.Add(1)
			return false
		}
		if b.used.CompareAndSwap(cur, next) {
			b.charged.Add(n)
			for {
				p := b.peak.Load()
				if next <= p || b.peak.CompareAndSwap(p, next) {
					return true
				}
			}
		}
	}
}

func (b *Budget) release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	used := b.used.Add(-n)
	if d := b.drained.Load(); d != nil && used <= d.low {
		c, m := b.charged.Load(), b.mark.Load()
		if c-m >= d.high && b.mark.CompareAndSwap(m, c) {
			d.f(c - m)
		}
	}
}

// OnDrained makes the Budget call f each time the bytes held fall to low or
// below after at least high bytes were charged since the previous call (or
// since OnDrained): a burst of large messages may be over, and f gets the
// bytes charged during it. f runs on the goroutine that gave the bytes back
// (a reader, or Close), once however many release at the same moment; it
// must not block. A server can use it to hand the burst's memory back to
// the operating system. A later call replaces the hook; f nil removes it.
func (b *Budget) OnDrained(high, low int64, f func(charged int64)) {
	if f == nil {
		b.drained.Store(nil)
		return
	}
	b.mark.Store(b.charged.Load())
	b.drained.Store(&drainHook{high: high, low: low, f: f})
}

// errBusy fails a connection whose message would exceed the Budget.
var errBusy = protoErr(StatusTryAgainLater, "server busy: in-flight message budget exhausted, try again later")

// charge is what one message holds of a Budget: held bytes charged so far.
// It is used by one goroutine (the reader), except release, which Close may
// call from another: held is atomic for that.
type charge struct {
	b    *Budget
	held atomic.Int64
}

// grow charges the message up to size bytes in all (the part beyond
// BudgetFree), and reports false when the Budget refuses.
func (c *charge) grow(size int) bool {
	if c.b == nil || int64(size) <= c.b.free {
		return true
	}
	want := int64(size) - c.held.Load()
	if want <= 0 {
		return true
	}
	if !c.b.acquire(want) {
		return false
	}
	c.held.Add(want)
	return true
}

// shrink gives back what the message holds beyond size bytes.
func (c *charge) shrink(size int) {
	if c.b == nil {
		return
	}
	keep := int64(size)
	if keep <= c.b.free {
		keep = 0
	}
	for {
		h := c.held.Load()
		if h <= keep {
			return
		}
		if c.held.CompareAndSwap(h, keep) {
			c.b.release(h - keep)
			return
		}
	}
}

// release gives back what the message holds.
func (c *charge) release() {
	if c.b == nil {
		return
	}
	if n := c.held.Swap(0); n > 0 {
		c.b.release(n)
	}
}
