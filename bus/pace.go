package bus

import (
	"sync/atomic"
	"time"
)

// pacing is the hub's state for pacing the senders (pace).
type pacing struct {
	// The lags beyond which a session is far behind.
	paceBytes  atomic.Int64
	paceMsgs   atomic.Uint64
	stallAfter atomic.Int64 // ns; 0: no stall cut
	tailBytesA atomic.Int64 // tailBytes, for pace's lock-free look
	// freshFor and rate are paceFresh and paceRate (ns, bytes per second),
	// per hub so that a test can widen them: how long a starved client may
	// go unscheduled and still count as draining is the machine's business,
	// not the test's.
	freshFor atomic.Int64
	rate     atomic.Int64
}

// setPace sets the lag beyond which a session is far behind (see pace):
// half the bounds, less a little for frame headers, so that a sender that
// was let through just under it with one more message of up to half a
// bound (max_queue_bytes is at least max_msg_size, by default twice it)
// stays within the bound.
func (h *hub) setPace(maxMsgs int, maxBytes int64) {
	h.paceMsgs.Store(uint64(maxMsgs)/2 - uint64(maxMsgs)/64)
	h.paceBytes.Store(maxBytes/2 - maxBytes/64)
	// Scan at least every eighth of a bound, so that what the log keeps
	// past the slowest follower does not look like a lag to pace.
	h.scanMsgs = uint64(min(scanEveryMessages, max(maxMsgs/8, 1)))
	h.scanEvery = min(scanEveryBytes, max(maxBytes/8, 1))
}

// Pacing. The publisher never waits, but a sender's reader may. A client
// that reads as fast as it can still falls behind a sender that writes
// faster than the bus can copy to everyone, and with small bounds would be
// cut like a stalled one. So, after relaying a frame, a socket sender's
// reader checks whether the log is more than half a bound long (a few
// atomic loads); only then does it look at the followers (pressured) and
// wait, in paceStep sleeps, while some session is that far behind and
// still draining (its cursor moved within paceFresh): at most paceMin per
// frame, or the frame's size at paceRate when that is longer, so a client
// draining at paceRate keeps up with any sender, and a slower one cannot
// hold the senders below that. TCP then slows the sender to what the
// clients take. A session that far behind whose cursor has not moved for
// stallAfter (a tenth of write_timeout) is cut there and then, rather than
// pinning its kernel buffer and its part of the log until write_timeout.
// So a client that reads nothing slows the senders for at most paceFresh,
// once.
const (
	paceFresh = 100 * time.Millisecond
	paceStep  = 200 * time.Microsecond
	paceMin   = 2 * time.Millisecond
	paceRate  = 16 << 20 // bytes per second
)

// pace is called by a socket sender's reader after it relayed a frame of
// size bytes.
func (h *hub) pace(size int) {
	if h.head.Load()-h.tail.Load() <= h.paceMsgs.Load() &&
		h.bytes.Load()-h.tailBytesA.Load()+h.extra.Load() <= h.paceBytes.Load() {
		return
	}
	h.letGo() // nothing held back while the sender waits
	limit := max(paceMin, time.Duration(int64(size)*int64(time.Second)/h.rate.Load()))
	for waited := time.Duration(0); waited < limit; waited += paceStep {
		cut, busy := h.pressured()
		h.notifyCut(cut)
		if !busy {
			return
		}
		time.Sleep(paceStep)
	}
}

// pressured reports whether a session more than half a bound behind is
// still draining, and cuts those that are that far behind and
// made no progress for stallAfter.
func (h *hub) pressured() (cut []*follower, busy bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now, head, total := h.now(), h.head.Load(), h.bytes.Load()
	pm, pb, stall, fresh := h.paceMsgs.Load(), h.paceBytes.Load(), h.stallAfter.Load(), h.freshFor.Load()
	extra := h.extra.Load() // the compressed copies count against the bound too
	for i := 0; i < len(h.followers); {
		f := h.followers[i]
		if c := f.cursor.Load(); f.paces && (head-c > pm || total-f.fetched.Load()+extra > pb) {
			if c != f.seenCursor || f.seenAt == 0 {
				f.seenCursor, f.seenAt = c, now
			}
			idle := now - f.seenAt
			if stall > 0 && idle > stall && f.cuts {
				h.removeAt(i)
				f.stalled.Store(true)
				f.cut.Store(true)
				cut = append(cut, f)
				continue
			}
			if idle < fresh {
				busy = true
			}
		}
		i++
	}
	return cut, busy
}
