package bus

import (
	"runtime"
	"slices"
)

// wakerState is the hub's state for the waker (under hub.mu): whether it runs,
// and its spare list.
type wakerState struct {
	waking  bool
	wakeBuf []*follower
}

// Waking the followers that sleep at the head of the log when a frame is
// published: a few with a wake channel by the publisher itself, sessions
// and the rest by one waker goroutine that writes their batches itself when
// their sockets take them at once.

// inlineWakes is how many sleepers with a wake channel publish wakes
// itself; more are woken by a waker goroutine (wakeSleepers), and so are
// sessions, always.
const inlineWakes = 16

// signal gives f its wake-up token, once taken out of the sleepers (a token
// that finds it awake makes it fetch once more, at worst in vain), and
// reports whether the waker must come back to f (owner.wake, wakeHow).
func (f *follower) signal(how wakeHow) bool {
	if f.owner != nil {
		return f.owner.wake(how)
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return false
}

// wakerRounds is how many times in a row the waker serves one follower
// (wakeAgain: a session's batch written by the waker) before handing it
// on (wakeHandOff: its own writer goroutine).
const wakerRounds = 4

// wakeSleepers is the waker: it wakes, outside the lock, every follower
// that sleeps at a cursor the log has passed, as long as there are such,
// then ends. Followers that went to sleep at the head stay asleep: the next
// publish wakes them (or a waker, when it comes while one runs). A
// follower may ask to be served again (a session whose batch the waker
// wrote, in case more came meanwhile): the waker comes back to it in its
// next round, with the newly due sleepers, up to wakerRounds times. So
// with many sessions one goroutine writes to all that take their batches
// at once, one batch each in turn, instead of one goroutine each.
func (h *hub) wakeSleepers() {
	type pending struct {
		f      *follower
		rounds int
	}
	var again, next []pending
	for {
		h.mu.Lock()
		head := h.head.Load()
		due := h.wakeBuf[:0]
		h.wakeBuf = nil
		keep := h.sleepers[:0]
		for _, f := range h.sleepers {
			if f.sleepAt < head {
				f.sleepIdx = -1
				due = append(due, f)
			} else {
				f.sleepIdx = int32(len(keep))
				keep = append(keep, f)
			}
		}
		clear(h.sleepers[len(keep):])
		h.sleepers = keep
		if len(due) == 0 && len(again) == 0 {
			h.waking = false
			h.wakeBuf = due
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		serve := due
		if len(due) > wakerShare && runtime.GOMAXPROCS(0) > 1 {
			// More than one waker's share, and more than one P to write
			// with: helpers take the rest.
			for k := wakerShare; k < len(due); k += wakerShare {
				go serveWoken(slices.Clone(due[k:min(k+wakerShare, len(due))]))
			}
			serve = due[:wakerShare]
		}
		next = next[:0]
		for _, f := range serve {
			if f.signal(wakeInline) {
				next = append(next, pending{f, 1})
			}
		}
		for _, p := range again {
			switch {
			case p.rounds >= wakerRounds:
				p.f.signal(wakeHandOff)
			case p.f.signal(wakeAgain):
				next = append(next, pending{p.f, p.rounds + 1})
			}
		}
		clear(due)
		clear(again)
		again, next = next, again
		h.mu.Lock()
		if h.wakeBuf == nil {
			h.wakeBuf = due
		}
		h.mu.Unlock()
	}
}

// wakerShare is how many woken followers one waker serves at a time when
// more than one P can run: a helper (serveWoken) takes each further share.
const wakerShare = 1024

// serveWoken is a helper of the waker: it wakes fs, taken out of the
// sleepers, and serves those that ask for it again, as the waker does.
func serveWoken(fs []*follower) {
	n := 0
	for _, f := range fs {
		if f.signal(wakeInline) {
			fs[n] = f
			n++
		}
	}
	for rounds := 1; n > 0; rounds++ {
		fs, n = fs[:n], 0
		for _, f := range fs {
			if rounds >= wakerRounds {
				f.signal(wakeHandOff)
			} else if f.signal(wakeAgain) {
				fs[n] = f
				n++
			}
		}
		clear(fs[n:])
	}
}
