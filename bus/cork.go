package bus

import (
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/bus/internal/workers"
)

// Corking: the frames the readers of one round of the poller publish leave
// in one write per receiver.
//
// The frames of several clients often arrive together (one utterance sets
// off a cascade of messages from several services); woken for each, every
// receiver would be written once per frame. Instead, a reader on the poll
// path holds a cork from the moment the poller claims it (every reader of
// one wake-up is claimed before any starts: netpoll.RoundReader) until it
// returns; while any cork is held a publish marks the wake due instead of
// waking the sleepers, and the reader that lets go of the last cork wakes
// them and writes their batches itself (as uWebSockets corks its sockets).
//
// A reader may wait (a pong to a full socket, a closing handshake, pacing),
// so a due wake is also done by a timer after corkBound, and a reader that
// has relayed corkFrames frames since it last let go (a flooding sender)
// lets the due wake go and reads on. Publishes of in-process senders and
// of portable-path readers are held by a round in progress, so by
// corkBound at most.
const (
	corkBound  = 500 * time.Microsecond
	corkFrames = 64
)

// corking is the hub's state for corks: how many are held, and (under
// hub.mu) whether a wake is due and the timer that does it after
// corkBound.
type corking struct {
	corks   atomic.Int32
	wakeDue bool
	dueAt   *time.Timer
	corkFor time.Duration // corkBound; a test's own
	lingers atomic.Uint64 // readers' lingers (linger.go), for the metrics
	// streamTicks is how many ticks after its socket was armed a reader
	// counts as streaming (linger.go): 1, or a test's own.
	streamTicks uint16
}

// cork holds the wakes of what is published until uncork.
func (h *hub) cork() { h.corks.Add(1) }

// uncork lets a cork go; the last one does the due wake, on this
// goroutine.
func (h *hub) uncork() {
	if h.corks.Add(-1) == 0 && h.takeDueWake(false) {
		h.wakeSleepers()
	}
}

// letGo does the due wake now, corks held or not, on a waker goroutine:
// for a reader that goes on reading.
func (h *hub) letGo() {
	if h.takeDueWake(true) {
		workers.Start((*wakerTask)(h))
	}
}

// flushHeld does the due wake now, corks held or not, on this goroutine:
// for a reader about to wait (linger).
func (h *hub) flushHeld() {
	if h.takeDueWake(true) {
		h.wakeSleepers()
	}
}

// holdWake marks the wake of a publish due while a cork is held; the
// caller holds mu.
func (h *hub) holdWake() {
	if h.wakeDue {
		return
	}
	h.wakeDue = true
	if h.dueAt == nil {
		h.dueAt = time.AfterFunc(h.corkFor, h.letGo)
	} else {
		h.dueAt.Reset(h.corkFor)
	}
}

// takeDueWake takes the due wake (when no cork is held, or anyway) and
// reports whether the caller must run the waker: it is then marked
// running.
func (h *hub) takeDueWake(anyway bool) (runWaker bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.wakeDue || !anyway && h.corks.Load() != 0 {
		return false
	}
	h.wakeDue = false
	h.dueAt.Stop()
	if len(h.sleepers) == 0 || h.waking {
		return false // a running waker takes what is due in its next round
	}
	h.waking = true
	return true
}
