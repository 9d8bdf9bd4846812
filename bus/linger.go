package bus

import (
	"runtime"
	"time"
)

// Lingering: a client that sends frames back to back is read in batches,
// not frame by frame, on the poll path.
//
// The poller runs a socket's reader as soon as bytes arrive. When the bus
// is quicker than a client that streams frames, every few frames wake it:
// the reader relays those few, every receiver gets a write of them, and
// the bus sleeps again until the next frame wakes it (on a virtual
// machine each such wake costs the sender an interprocessor interrupt,
// which slows it down, which keeps the bus that quick). Reading the same
// frames a few hundred at a time and writing each receiver a few large
// batches costs the bus a fraction of the CPU per delivery. Which of the
// two a burst met was chance; lingering makes it the second.
//
// A reader that relayed frames and found the socket empty, when that
// socket's reader had armed it in this tick of the hub's clock or the one
// before (streamTickShift: 65.5 to 131 µs before, at most), writes
// what it relayed (each receiver one batch, on this goroutine), lets its
// cork go, and sleeps streamLinger before it reads again, the socket not
// armed: frames that arrive meanwhile wake nobody, and the next read takes
// them together. It lingers again while a sleep brings frames, and arms
// the socket after one that brought none. A lone frame, or frames further
// apart than that, are relayed and written at once as before; a frame
// that arrives while a reader lingers waits streamLinger at most (plus the
// kernel's timer slack, 50 µs by default), and so, on a single P, do other
// clients' readers (sleepPrecise).
const streamLinger = 50 * time.Microsecond

// streamTickShift is the resolution of session.armedAt: hub.now() in
// ticks of 2¹⁶ ns, 16 bits of them (the session has two bytes for it).
// They wrap every 4.3 s: a frame that comes a multiple of that after the
// socket was armed lingers once in vain.
const streamTickShift = 16

// streamTick is the hub's clock in armedAt's ticks.
func (h *hub) streamTick() uint16 { return uint16(h.now() >> streamTickShift) }

// streaming reports whether c's socket was armed in this tick or the one
// before (h.streamTicks).
func (c *session) streaming() bool {
	h := c.s.hub
	return streamingSince(c.armedAt, h.streamTick(), h.streamTicks)
}

// streamingSince reports whether tick now is at most ticks after armed,
// across the wrap.
func streamingSince(armed, now, ticks uint16) bool { return now-armed <= ticks }

// linger writes what c's reader relayed and sleeps streamLinger with its
// cork let go, so that publishes meanwhile wake their receivers at once.
// It yields first: a reader that lingers in a long stream never returns
// to the poller, and on a single P the writers its wakes started (sockets
// that took less than their batch) and other clients' readers would wait
// for the scheduler to preempt it.
func (c *session) linger() {
	h := c.s.hub
	h.lingers.Add(1)
	h.flushHeld()
	h.uncork()
	runtime.Gosched()
	sleepPrecise(streamLinger)
	h.cork()
}
