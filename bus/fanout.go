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
// its next entry gone and is closed as a slow consumer. The byte bound counts
// what the log really holds: the plain frames, plus the compressed copies the
// writers of deflate clients make of them (counted as they are made). So
// memory is bounded by the bounds whatever the clients do, and the publisher
// never waits for anyone: per message it does O(1) work plus one wake-up per
// sleeping follower, and once in a while a scan of the followers' cursors to
// release what everybody has fetched.
//
// When the bounds force the release of an entry that some followers still
// need, those followers are cut at once (cutBehind): taken out of the log and
// told through onCut, which for a session gives a write that is blocked on a
// client that reads nothing a tenth of write_timeout to finish, instead of
// all of it.

// entry is one message of the log. It is immutable once published.
type entry struct {
	seq    uint64
	end    int64 // cumulative bytes of the log through this entry
	size   int64 // bytes of the plain frame
	born   int64 // publish time, nanoseconds since the hub's epoch
	pm     *ws.PreparedMessage
	mtype  string // the message type, set only when receive permissions need it
	origin string // Frame.Origin: "" unless published by Publish

	// Compressed copies: which forms were counted (compressedFull,
	// compressedSmall), and their bytes in hub.extra; -1 once released.
	forms atomic.Uint32
	extra atomic.Int64

	// to is the id of the one session the entry is for (a notice about its
	// own frame, see tell), 0 for everyone. Followers and in-process
	// handlers skip such entries.
	to uint64
}

// The compressed forms of an entry (ws.PreparedMessage.FrameWindow).
const (
	compressedFull  = 1 << iota // 32 KiB window
	compressedSmall             // 256-byte window, for smaller negotiated windows
)

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
// messages or bytes since the last scan (or an eighth of the bounds, when
// less), so the log normally holds only what some follower has not fetched
// yet, plus at most this much.
const (
	scanEveryMessages = 1024
	scanEveryBytes    = 1 << 20
)

// A forced release looks for the followers it cuts at most once per
// cutScanMessages published or cutScanInterval, so that a follower hovering
// at its bound does not make every publish scan. A follower it misses finds
// its entry gone on its next fetch, as before.
const (
	cutScanMessages = 64
	cutScanInterval = 10 * time.Millisecond
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
	// spareSleepers is the list the last publish woke, kept for the next
	// sleepers (nil while a publish is waking it).
	spareSleepers []*follower
	minCursor     uint64 // last scanned minimum cursor (never above the real one)
	scanHead      uint64 // head at the last scan
	scanBytes     int64  // bytes at the last scan
	scanMsgs      uint64 // scan after this many messages ...
	scanEvery     int64  // ... or bytes since the last scan
	cutHead       uint64 // head at the last cutBehind
	cutAt         int64  // hub time of the last cutBehind
	cutNow        []*follower

	// extra is the bytes of the compressed copies held by entries in the
	// log (see countCompressed).
	extra atomic.Int64

	// Pacing of senders (see pace): the lags beyond which a session is
	// far behind.
	paceBytes  atomic.Int64
	paceMsgs   atomic.Uint64
	stallAfter atomic.Int64 // ns; 0: no stall cut
	tailBytesA atomic.Int64 // tailBytes, for pace's lock-free look
}

func newHub(maxMsgs int, maxBytes int64) *hub {
	h := &hub{epoch: time.Now(), maxMsgs: uint64(maxMsgs), maxBytes: maxBytes}
	h.ring.Store(newRing(maxMsgs + 1))
	h.setPace(maxMsgs, maxBytes)
	return h
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

func (h *hub) now() int64 { return int64(time.Since(h.epoch)) }

// setLimits changes the queue bounds. A ring too small for the new message
// bound is replaced by a larger copy; followers that read the old one notice
// and switch (see fetch).
func (h *hub) setLimits(maxMsgs int, maxBytes int64) {
	h.mu.Lock()
	defer func() { h.notifyCut(h.takeCut()) }()
	defer h.mu.Unlock()
	h.maxMsgs, h.maxBytes = uint64(maxMsgs), maxBytes
	h.setPace(maxMsgs, maxBytes)
	r := h.ring.Load()
	if uint64(maxMsgs) < uint64(len(r.slots)) {
		h.trim(h.head.Load(), h.now())
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
	h.trim(seq+1, e.born)
	cut := h.takeCut()
	// The sleepers are woken outside the lock (starting a session's writer
	// costs more than a channel send): they are taken out of the list
	// here, so the next publish wakes only those that sleep again.
	var woken []*follower
	if len(h.sleepers) > 0 {
		woken = h.sleepers
		for _, f := range woken {
			f.sleepIdx = -1
		}
		h.sleepers, h.spareSleepers = h.spareSleepers[:0], nil
	}
	h.mu.Unlock()
	for i, f := range woken {
		if f.onWake != nil {
			f.onWake()
		} else {
			select {
			case f.wake <- struct{}{}:
			default:
			}
		}
		woken[i] = nil
	}
	if cap(woken) > 0 {
		h.mu.Lock()
		if h.spareSleepers == nil {
			h.spareSleepers = woken[:0]
		}
		h.mu.Unlock()
	}
	h.notifyCut(cut)
}

// takeCut returns the followers cutBehind cut; the caller holds mu.
func (h *hub) takeCut() []*follower {
	if len(h.cutNow) == 0 {
		return nil
	}
	cut := h.cutNow
	h.cutNow = nil
	return cut
}

// notifyCut tells cut followers, outside the lock.
func (h *hub) notifyCut(cut []*follower) {
	for _, f := range cut {
		f.onCut()
	}
}

// trim releases entries nobody needs and entries beyond the bounds, always
// keeping the newest; now is the hub time. The caller holds mu.
func (h *hub) trim(head uint64, now int64) {
	total := h.bytes.Load()
	if head-h.scanHead >= h.scanMsgs || total-h.scanBytes >= h.scanEvery {
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
	forced := false
	for tail+1 < head {
		over := head-tail > h.maxMsgs || total-h.tailBytes+h.extra.Load() > h.maxBytes
		if tail >= h.minCursor {
			if !over {
				break
			}
			forced = true // some follower may still need it
		}
		slot := &r.slots[tail&r.mask]
		e := slot.Load()
		h.tailBytes = e.end
		h.tailBytesA.Store(e.end)
		if c := e.extra.Swap(-1); c > 0 {
			h.extra.Add(-c)
		}
		slot.Store(nil)
		tail++
	}
	if tail != start {
		h.tail.Store(tail)
	}
	if forced && (head-h.cutHead >= cutScanMessages || now-h.cutAt >= int64(cutScanInterval)) {
		h.cutBehind(tail, head, total, now)
	}
}

// cutBehind takes the followers whose cursor is below tail (their next entry
// is gone) out of the log and queues them for onCut; it rescans the minimum
// cursor of the others on the way. The caller holds mu.
func (h *hub) cutBehind(tail, head uint64, total, now int64) {
	m := head
	for i := 0; i < len(h.followers); {
		f := h.followers[i]
		c := f.cursor.Load()
		if c >= tail || f.onCut == nil {
			m = min(m, c)
			i++
			continue
		}
		h.removeAt(i)
		f.cut.Store(true)
		h.cutNow = append(h.cutNow, f)
	}
	h.minCursor, h.scanHead, h.scanBytes = m, head, total
	h.cutHead, h.cutAt = head, now
}

// countCompressed counts, once per entry and form, the compressed copy of e
// that a writer for a deflate client with the negotiated server window bits
// is about to make (or reuse), and returns nothing: the copy is cached in
// e.pm, so the write that follows uses it. A copy made after e left the log
// is not counted (it goes with the writer's batch).
func (h *hub) countCompressed(e *entry, windowBits int) {
	form := uint32(compressedFull)
	if windowBits > 0 && windowBits < 15 {
		form = compressedSmall
	}
	if e.forms.Load()&form != 0 || e.forms.Or(form)&form != 0 {
		return
	}
	f, plain := e.pm.FrameWindow(windowBits), e.pm.Frame(false)
	if len(f) == 0 || &f[0] == &plain[0] {
		return // too small to compress: the plain frame is sent
	}
	n := int64(len(f))
	for {
		c := e.extra.Load()
		if c < 0 {
			return
		}
		if e.extra.CompareAndSwap(c, c+n) {
			h.extra.Add(n)
			return
		}
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

// leave stops f from holding entries in the log and from being woken.
// Both removals are O(1): the last follower (sleeper) takes f's place.
func (h *hub) leave(f *follower) {
	h.mu.Lock()
	if i := f.sleepIdx; i >= 0 && i < len(h.sleepers) && h.sleepers[i] == f {
		last := len(h.sleepers) - 1
		h.sleepers[i] = h.sleepers[last]
		h.sleepers[i].sleepIdx = i
		h.sleepers[last] = nil
		h.sleepers = h.sleepers[:last]
	}
	f.sleepIdx = -1
	if f.idx >= 0 && f.idx < len(h.followers) && h.followers[f.idx] == f {
		h.removeAt(f.idx)
	}
	h.mu.Unlock()
}

// removeAt takes the follower at i out of the followers in O(1): the last
// one takes its place. The caller holds mu.
func (h *hub) removeAt(i int) {
	f, last := h.followers[i], len(h.followers)-1
	h.followers[i] = h.followers[last]
	h.followers[i].idx = i
	h.followers[last] = nil
	h.followers = h.followers[:last]
	f.idx = -1
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
// A follower is registered once however often it sleeps (a Follower whose
// context ends keeps its place), and leave takes it out.
func (h *hub) sleep(f *follower, cursor uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.head.Load() != cursor {
		return false
	}
	if f.sleepIdx < 0 {
		f.sleepIdx = len(h.sleepers)
		h.sleepers = append(h.sleepers, f)
	}
	return true
}

// retained returns how many messages the log keeps and the bytes they hold:
// plain frames plus compressed copies.
func (h *hub) retained() (msgs uint64, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.head.Load() - h.tail.Load(), h.bytes.Load() - h.tailBytes + h.extra.Load()
}

// Pacing. The publisher never waits, but a sender's reader may. A client
// that reads as fast as it can still falls behind a sender that writes
// faster than the bus can copy to everyone, and with small bounds it was cut
// like a stalled one (issue 9: three clients cut in one millisecond). So,
// after relaying a frame, a socket sender's reader checks whether the log is
// more than half a bound long (a few atomic loads); only then does it look
// at the followers (pressured) and wait, in paceStep sleeps, while some
// session is that far behind and still draining (its cursor moved within
// paceFresh): at most paceMin per frame, or the frame's size at paceRate
// when that is longer, so that a client draining at paceRate or faster
// keeps up with any sender, and one that drains slower cannot hold the
// senders below that. TCP then slows the sender to what the clients take.
// A session that far behind whose cursor has not moved for stallAfter (a
// tenth of write_timeout) is cut there and then: it reads nothing, and would
// otherwise pin its kernel buffer and its part of the log until
// write_timeout. So a client that reads nothing slows the senders for at
// most paceFresh, once.
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
	limit := max(paceMin, time.Duration(size)*time.Second/paceRate)
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
	pm, pb, stall := h.paceMsgs.Load(), h.paceBytes.Load(), h.stallAfter.Load()
	extra := h.extra.Load() // the compressed copies count against the bound too
	for i := 0; i < len(h.followers); {
		f := h.followers[i]
		if c := f.cursor.Load(); f.paces && (head-c > pm || total-f.fetched.Load()+extra > pb) {
			if c != f.seenCursor || f.seenAt == 0 {
				f.seenCursor, f.seenAt = c, now
			}
			idle := now - f.seenAt
			if stall > 0 && idle > stall && f.onCut != nil {
				h.removeAt(i)
				f.stalled.Store(true)
				f.cut.Store(true)
				cut = append(cut, f)
				continue
			}
			if idle < int64(paceFresh) {
				busy = true
			}
		}
		i++
	}
	return cut, busy
}
