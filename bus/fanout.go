package bus

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// The fan-out engine.
//
// Every relayed frame is encoded once (a ws.PreparedMessage) and appended to
// one shared log under one mutex, which gives every message a sequence number
// and so one total order. Each receiver (a session's writer goroutine, the
// in-process dispatcher, a public Follower) is a follower (follow.go): it
// reads the log at its own cursor, without locks, taking as many frames at a
// time as there are (up to a batch limit); a session writes them in one
// system call.
//
// The log keeps the frames in [tail, head). The publisher releases old
// entries as soon as every follower has fetched them, and never keeps more
// than the queue bounds (MaxQueueMessages, MaxQueueBytes): a follower whose
// cursor falls below the tail was further behind than the bounds allow, finds
// its next entry gone and is closed as a slow consumer. So memory is bounded
// by the bounds whatever the clients do, and the publisher never waits for
// anyone: per message it does O(1) work plus one wake-up per sleeping
// follower, and once in a while a scan of the followers' cursors to release
// what everybody has fetched.

// entry is one message of the log. It is immutable once published.
type entry struct {
	seq    uint64
	end    int64 // cumulative bytes of the log through this entry
	size   int64 // bytes of the plain frame
	born   int64 // publish time, nanoseconds since the hub's epoch
	pm     *ws.PreparedMessage
	mtype  string // the message type, set only when receive permissions need it
	origin string // Frame.Origin: "" unless published by Publish
	// to is the id of the one session the entry is for (a notice about its
	// own frame, see tell), 0 for everyone. Followers and in-process
	// handlers skip such entries.
	to uint64
}

// ring holds the log's entries, indexed by sequence number modulo its size.
type ring struct {
	mask  uint64
	slots []atomic.Pointer[entry]
}

func newRing(minCap int) *ring {
	n := uint64(1) << bits.Len64(uint64(minCap)) // a power of two > minCap
	if n < 64 {
		n = 64
	}
	return &ring{mask: n - 1, slots: make([]atomic.Pointer[entry], n)}
}

// Release heuristics: the followers' cursors are scanned after this many
// messages or bytes since the last scan, so the log normally holds only what
// some follower has not fetched yet, plus at most this much.
const (
	scanEveryMessages = 1024
	scanEveryBytes    = 1 << 20
)

type hub struct {
	epoch time.Time

	head  atomic.Uint64 // next sequence number
	tail  atomic.Uint64 // oldest kept sequence number
	bytes atomic.Int64  // cumulative bytes published (stored under mu)
	ring  atomic.Pointer[ring]

	mu        sync.Mutex
	tailBytes int64 // cumulative bytes before tail
	maxMsgs   uint64
	maxBytes  int64
	followers []*follower
	sleepers  []*follower
	minCursor uint64 // last scanned minimum cursor (never above the real one)
	scanHead  uint64 // head at the last scan
	scanBytes int64  // bytes at the last scan
}

func newHub(maxMsgs int, maxBytes int64) *hub {
	h := &hub{epoch: time.Now(), maxMsgs: uint64(maxMsgs), maxBytes: maxBytes}
	h.ring.Store(newRing(maxMsgs + 1))
	return h
}

func (h *hub) now() int64 { return int64(time.Since(h.epoch)) }

// setLimits changes the queue bounds. A ring too small for the new message
// bound is replaced by a larger copy; followers that read the old one notice
// and switch (see fetch).
func (h *hub) setLimits(maxMsgs int, maxBytes int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxMsgs, h.maxBytes = uint64(maxMsgs), maxBytes
	r := h.ring.Load()
	if uint64(maxMsgs) < uint64(len(r.slots)) {
		h.trim(h.head.Load())
		return
	}
	nr := newRing(maxMsgs + 1)
	for s, head := h.tail.Load(), h.head.Load(); s < head; s++ {
		nr.slots[s&nr.mask].Store(r.slots[s&r.mask].Load())
	}
	h.ring.Store(nr)
}

// publish appends e to the log and wakes the sleeping followers.
func (h *hub) publish(e *entry) {
	h.mu.Lock()
	seq := h.head.Load()
	e.seq = seq
	total := h.bytes.Load() + e.size
	e.end = total
	h.bytes.Store(total)
	r := h.ring.Load()
	r.slots[seq&r.mask].Store(e)
	h.head.Store(seq + 1)
	h.trim(seq + 1)
	for i, f := range h.sleepers {
		select {
		case f.wake <- struct{}{}:
		default:
		}
		h.sleepers[i] = nil
	}
	h.sleepers = h.sleepers[:0]
	h.mu.Unlock()
}

// trim releases entries nobody needs and entries beyond the bounds, always
// keeping the newest. The caller holds mu.
func (h *hub) trim(head uint64) {
	total := h.bytes.Load()
	if head-h.scanHead >= scanEveryMessages || total-h.scanBytes >= scanEveryBytes {
		m := head
		for _, f := range h.followers {
			if c := f.cursor.Load(); c < m {
				m = c
			}
		}
		h.minCursor, h.scanHead, h.scanBytes = m, head, total
	}
	tail := h.tail.Load()
	if tail+1 >= head {
		return
	}
	r := h.ring.Load()
	start := tail
	for tail+1 < head {
		if tail >= h.minCursor && head-tail <= h.maxMsgs && total-h.tailBytes <= h.maxBytes {
			break
		}
		slot := &r.slots[tail&r.mask]
		h.tailBytes = slot.Load().end
		slot.Store(nil)
		tail++
	}
	if tail != start {
		h.tail.Store(tail)
	}
}

// join makes f follow the log from its head: it receives every message
// published after join returns.
func (h *hub) join(f *follower) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.cursor.Store(h.head.Load())
	f.fetched.Store(h.bytes.Load())
	f.idx = len(h.followers)
	h.followers = append(h.followers, f)
}

// leave stops f from holding entries in the log.
func (h *hub) leave(f *follower) {
	h.mu.Lock()
	if f.idx >= 0 && f.idx < len(h.followers) && h.followers[f.idx] == f {
		last := len(h.followers) - 1
		h.followers[f.idx] = h.followers[last]
		h.followers[f.idx].idx = f.idx
		h.followers[last] = nil
		h.followers = h.followers[:last]
		f.idx = -1
	}
	h.mu.Unlock()
}

// fetch appends to dst the entries from cursor on, at most maxN of them and
// stopping once maxBytes are reached. lagged reports that the entry at some
// sequence number was already released: the follower is further behind than
// the bounds allow.
func (h *hub) fetch(cursor uint64, dst []*entry, maxN int, maxBytes int64) (_ []*entry, lagged bool) {
	head := h.head.Load()
	if cursor >= head {
		return dst, false
	}
	r := h.ring.Load()
	var n int64
	for s := cursor; s < head && len(dst) < maxN && n < maxBytes; {
		e := r.slots[s&r.mask].Load()
		if e == nil || e.seq != s {
			if r2 := h.ring.Load(); r2 != r { // the ring grew: read the new one
				r = r2
				continue
			}
			return dst, true
		}
		dst = append(dst, e)
		n += e.size
		s++
	}
	return dst, false
}

// sleep registers f to be woken by the next publish, unless a message
// arrived after cursor already. It reports whether f must wait for the token.
func (h *hub) sleep(f *follower, cursor uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.head.Load() != cursor {
		return false
	}
	h.sleepers = append(h.sleepers, f)
	return true
}

// retained returns how many messages and bytes the log keeps.
func (h *hub) retained() (msgs uint64, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.head.Load() - h.tail.Load(), h.bytes.Load() - h.tailBytes
}
