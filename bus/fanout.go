package bus

import (
	"cmp"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/bus/internal/workers"
	"github.com/ovbus/ovbus/ws"
)

// The fan-out engine.
//
// Every relayed frame is encoded once (a ws.PreparedMessage) and appended to
// one shared log under one mutex, which gives every message a sequence
// number and so one total order. Each receiver (a session's writer, the
// in-process dispatcher, a public Follower) is a follower (follow.go): it
// reads the log at its own cursor, without locks, taking as many frames at
// a time as there are (up to a batch limit); a session writes them in one
// system call.
//
// The plain frames of small messages are encoded back to back into shared
// segments (segment), in the log's order, so that what a follower has not
// fetched of one segment is one slice: a client that takes every frame as
// it is (no receive rule, no deflate) gets it with one write (fetchRun). A
// large frame, or every frame when the byte bound is too small for
// segments, has a buffer of its own, as a segment of one frame.
//
// The log keeps the frames in [tail, head). The publisher releases entries
// once every follower has fetched them, and never keeps more than the
// queue bounds (MaxQueueMessages, MaxQueueBytes): a follower whose cursor
// falls below the tail finds its next entry gone and is closed as a slow
// consumer. The byte bound counts what the log really holds: the plain
// frames, the compressed copies that deflate clients' writers make of them
// (counted as made), and whole shared segments (a segment is held while
// any of its frames is in the log). So memory is bounded whatever the
// clients do. When the bounds force the release of an entry that some
// followers still need, those are cut at once (cutBehind) and told through
// their owner's onCut, which gives a session's blocked write a tenth of
// write_timeout to finish instead of all of it.
//
// Shared segments and entry slabs are recycled once no reader can still
// read them (see arena): out of the log, before what every session's writer
// may still read (followerOwner.holds, taken at trim's scan), and never
// once a follower without an owner (Follower, the in-process dispatcher)
// joined, whose frames go to code that may keep them. So a bus whose
// clients keep up publishes without allocating. The few kept (recycleKeep,
// slabKeep) are let go by the memory release (memrelease.go).
//
// The publisher never waits for anyone and does O(1) work per message
// however many followers sleep: it wakes up to inlineWakes sleepers with a
// wake channel itself and hands the rest, and every session, to a waker
// goroutine (wakeSleepers), which wakes them outside the lock and writes
// the sessions' batches itself when their sockets take them at once
// (session.wake). A batch of frames (publishFrames) is appended under one
// hold of the lock and wakes them once, after its last frame. Once in a
// while the publisher scans the followers' cursors to release what
// everybody has fetched.

// entry is one message of the log. It is immutable once published. The
// entries of frames in shared segments are carved from slabs (entrySlab)
// with their PreparedMessage, so that a message costs no allocation of its
// own; the garbage collector frees a slab once no entry of it is referred
// to (by the log or by a writer that fetched it).
type entry struct {
	seq  uint64
	end  int64 // cumulative bytes of the log through this entry
	size int64 // bytes of the plain frame
	frameMeta
	msg ws.PreparedMessage
	seg *segment // holds the plain frame at off; nil for frames outside the log (tests)
	off int

	// Compressed copies: which forms were counted (compressedFull,
	// compressedSmall), and their bytes in hub.extra; -1 once released.
	forms atomic.Uint32
	extra atomic.Int64
}

// frameMeta is what a publisher tells the log about a frame besides its
// bytes (publishFrame): copied into the frame's entry. It holds no atomic
// value, so a publisher keeps it on its stack on 32-bit systems too, where
// a structure with a 64-bit atomic (an entry) must go to the heap.
type frameMeta struct {
	born   int64  // publish time, nanoseconds since the hub's epoch
	mtype  string // the message type, set only when receive permissions need it
	origin string // Frame.Origin: "" unless published by Publish

	// to is the id of the one session the entry is for (a notice about its
	// own frame, see tell), 0 for everyone. Followers and in-process
	// handlers skip such entries.
	to uint64
	// route, when set, keeps a private frame from the routed clients it is
	// not for (routing.go); everyone else receives it.
	route *route
}

// segment holds the plain frames of consecutive entries back to back, at
// increasing offsets, with no gap. A shared one is filled under hub.mu up
// to its capacity, or until a frame with a buffer of its own comes, and
// then sealed: endSeq and endLen are set before any entry of a later
// segment is published, so a follower that saw such an entry sees them.
// The bytes of a published frame never change. The rest of an early-sealed
// segment's buffer becomes the next segment (one allocation for both).
type segment struct {
	buf    []byte // the segment's part of its allocation: from its start to the end
	shared bool   // false: one large frame of its own
	endSeq atomic.Uint64
	endLen atomic.Int64
	arena  *arena // the allocation of a shared one
}

// seal records that the segment ends before sequence number seq, with used
// bytes in it. The caller holds hub.mu.
func (g *segment) seal(seq uint64, used int) {
	g.endLen.Store(int64(used))
	g.endSeq.Store(seq)
}

// end reports the segment's end, once sealed (endSeq 0: not yet).
func (g *segment) end() (seq uint64, used int) {
	return g.endSeq.Load(), int(g.endLen.Load())
}

// Shared segment sizing: a sixteenth of the byte bound, at most maxSegment
// (so the whole segments the byte bound counts cost little of it); no
// segments below minSegment (every frame has its own buffer). A frame
// larger than a quarter of a segment has its own.
const (
	maxSegment = 256 << 10
	minSegment = 4 << 10
)

func segmentSize(maxBytes int64) int {
	n := min(maxBytes/16, maxSegment)
	if n < minSegment {
		return 0
	}
	return int(n)
}

// entrySlab is how many entries of small frames are allocated at once. A
// slab lives while any of its entries does, and with it the frames and
// compressed copies they refer to, so it is kept small; an entry of a
// frame of its own (up to max_msg_size) is allocated alone, so that no
// slab can hold large frames past their release.
const entrySlab = 64

// The compressed forms of an entry (ws.PreparedMessage.FrameWindow).
const (
	compressedFull  = 1 << iota // 32 KiB window
	compressedSmall             // 256-byte window, for smaller negotiated windows
)

// ring holds the log's entries, indexed by sequence number modulo its size.
// It starts with initialRing slots (fewer for a smaller message bound) and
// doubles when the log holds more entries (growRing), up to the message
// bound: a slot is a pointer the garbage collector scans at every cycle,
// and a bus whose clients keep up never needs more than a few.
type ring struct {
	mask  uint64
	slots []atomic.Pointer[entry]
}

const initialRing = 1024

func newRing(minCap int) *ring {
	n := uint64(1) << bits.Len64(uint64(minCap)) // a power of two > minCap
	if n < 64 {
		n = 64
	}
	return &ring{mask: n - 1, slots: make([]atomic.Pointer[entry], n)}
}

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
	trimming  // trim.go

	// Shared segments (under mu): the size of a new one, the one frames go
	// into and its used bytes, a spare one allocated outside the lock, and
	// for the byte bound the capacity of the shared segments the log holds
	// and the plain bytes of the log's frames in them.
	segCap    int
	seg       *segment
	segUsed   int
	spare     *segment
	segHeld   int64
	segFrames int64
	slab      []entry // the entries not yet used of the newest slab

	recycling // recycle.go

	// lastNotice is the sequence number after the newest entry for one
	// session only (entry.to): runs start after it (fetchRun).
	lastNotice atomic.Uint64

	// relayed counts the entries for everyone (messages_relayed_total);
	// stored under mu.
	relayed atomic.Uint64

	wakerState // wake.go
	corking    // cork.go

	// extra is the bytes of the compressed copies held by entries in the
	// log (see countCompressed).
	extra atomic.Int64

	pacing // pace.go
}

func newHub(maxMsgs int, maxBytes int64) *hub {
	h := &hub{epoch: time.Now(), maxMsgs: uint64(maxMsgs), maxBytes: maxBytes, segCap: segmentSize(maxBytes)}
	h.ring.Store(newRing(min(maxMsgs, initialRing-1)))
	h.setPace(maxMsgs, maxBytes)
	h.freshFor.Store(int64(paceFresh))
	h.rate.Store(paceRate)
	h.corkFor, h.streamTicks = corkBound, 1
	return h
}

func (h *hub) now() int64 { return int64(time.Since(h.epoch)) }

// setLimits changes the queue bounds.
func (h *hub) setLimits(maxMsgs int, maxBytes int64) {
	h.mu.Lock()
	defer func() { h.notifyCut(h.takeCut()) }()
	defer h.mu.Unlock()
	h.maxMsgs, h.maxBytes = uint64(maxMsgs), maxBytes
	h.setPace(maxMsgs, maxBytes)
	if c := segmentSize(maxBytes); c != h.segCap {
		// The next frame starts a segment of the new size, and the old
		// one goes with its frames.
		h.segCap, h.spare = c, nil
		h.retire()
	}
	h.trim(h.head.Load(), h.now()) // the ring grows when the log needs it
}

// growRing replaces the ring r, full, by a copy twice its size; followers
// that read the old one notice and switch (see fetch). The caller holds mu.
func (h *hub) growRing(r *ring) *ring {
	nr := newRing(2*len(r.slots) - 1)
	for s, head := h.tail.Load(), h.head.Load(); s < head; s++ {
		nr.slots[s&nr.mask].Store(r.slots[s&r.mask].Load())
	}
	h.ring.Store(nr)
	return nr
}

// publishFrame encodes a data frame of type op (copying payload) and
// appends it to the log with meta (copied), then wakes the followers.
func (h *hub) publishFrame(op ws.Opcode, payload []byte, co ws.CompressionOptions, meta *frameMeta) error {
	h.mu.Lock()
	head := h.head.Load()
	err := h.appendFrame(op, payload, co, meta)
	h.wakeLocked(head)
	return err
}

// publishFrames appends frames in their order as publishFrame does each,
// with born, each frame's Origin and, when mtypes is not nil, mtypes[i], and
// wakes the followers once, after the last: a writer woken by them finds
// them all in the log and writes them at once, and the publisher pays one
// wake instead of one per frame. It holds mu throughout (letting go only to
// allocate a segment, a slab or a large frame's buffer), so no other
// publisher's frame comes between them. A frame that cannot be encoded is
// left out; it returns how many were, and the first error.
func (h *hub) publishFrames(frames []Frame, mtypes []string, co ws.CompressionOptions, born int64) (failed int, err error) {
	meta := frameMeta{born: born}
	h.mu.Lock()
	head := h.head.Load()
	for i, f := range frames {
		meta.origin, meta.mtype = f.Origin, ""
		if mtypes != nil {
			meta.mtype = mtypes[i]
		}
		if e := h.appendFrame(f.Op, f.Payload, co, &meta); e != nil {
			failed++
			err = cmp.Or(err, e)
		}
	}
	h.wakeLocked(head)
	return failed, err
}

// appendFrame encodes a frame and appends it to the log, without waking
// anyone. A small frame is encoded into the shared segment under mu
// (segments and slabs are allocated outside it); a large one into a buffer
// of its own, outside mu. The caller holds mu, which appendFrame may let go
// of and take again.
func (h *hub) appendFrame(op ws.Opcode, payload []byte, co ws.CompressionOptions, meta *frameMeta) error {
	n := ws.PreparedFrameSize(len(payload))
	for {
		c := h.segCap
		if !op.IsData() || c == 0 || n > c/4 {
			h.mu.Unlock()
			e := &entry{frameMeta: *meta}
			buf, err := ws.AppendPreparedMessageTo(&e.msg, nil, op, payload, co)
			h.mu.Lock()
			if err != nil {
				return err
			}
			e.size = int64(n)
			e.seg = &segment{buf: buf}
			h.appendOwn(e)
			return nil
		}
		if len(h.slab) == 0 {
			if h.recycleSlab() {
				continue
			}
			// A new slab is due: allocate it outside the lock.
			h.mu.Unlock()
			slab := make([]entry, entrySlab)
			h.mu.Lock()
			if len(h.slab) == 0 {
				h.retireSlab()
				h.slab, h.slabBase = slab, slab
			}
			continue
		}
		if h.seg != nil && h.segUsed+n <= len(h.seg.buf) {
			break
		}
		if h.spare != nil {
			h.retire()
			h.seg, h.segUsed, h.spare = h.spare, 0, nil
			h.seg.arena.escaped = h.escapes
			h.segHeld += int64(h.seg.arena.size)
			break
		}
		if a := h.recycle(c); a != nil {
			h.spare = &segment{buf: a.buf, shared: true, arena: a}
			continue
		}
		// A new segment is due: allocate it outside the lock.
		h.mu.Unlock()
		buf := make([]byte, c)
		g := &segment{buf: buf, shared: true, arena: &arena{buf: buf, size: c}}
		h.mu.Lock()
		if h.spare == nil && h.segCap == c {
			h.spare = g
		}
	}
	e, g := &h.slab[0], h.seg
	if _, err := ws.AppendPreparedMessageTo(&e.msg, g.buf[:h.segUsed], op, payload, co); err != nil {
		return err
	}
	h.slab = h.slab[1:]
	e.frameMeta = *meta
	e.size, e.seg, e.off = int64(n), g, h.segUsed
	h.segUsed += n
	h.segFrames += int64(n)
	g.arena.frames++
	h.appendLocked(e)
	return nil
}

// publish appends e, whose frame is not in a shared segment, to the log and
// wakes the followers.
func (h *hub) publish(e *entry) {
	h.mu.Lock()
	head := h.head.Load()
	h.appendOwn(e)
	h.wakeLocked(head)
}

// appendOwn appends e, whose frame is not in a shared segment, to the log.
// The caller holds mu.
func (h *hub) appendOwn(e *entry) {
	if g := h.seg; g != nil && h.segUsed > 0 {
		// The shared segment ends here (the log's order must stay the
		// order of the bytes in it); the frames after e go on in the rest
		// of its allocation, as a segment of their own.
		g.seal(h.head.Load(), h.segUsed)
		h.seg, h.segUsed = &segment{buf: g.buf[h.segUsed:], shared: true, arena: g.arena}, 0
	}
	if e.seg != nil {
		e.seg.seal(h.head.Load()+1, len(e.seg.buf))
	}
	h.appendLocked(e)
}

// appendLocked gives e the next sequence number and puts it into the log,
// releasing what the bounds ask. The caller holds mu and, once done
// appending, calls wakeLocked.
func (h *hub) appendLocked(e *entry) {
	seq := h.head.Load()
	e.seq = seq
	total := h.bytes.Load() + e.size
	e.end = total
	h.bytes.Store(total)
	if e.to != 0 {
		h.lastNotice.Store(seq + 1)
	} else {
		h.relayed.Store(h.relayed.Load() + 1) // under mu: no atomic add needed
	}
	r := h.ring.Load()
	if seq-h.tail.Load() >= uint64(len(r.slots)) {
		r = h.growRing(r)
	}
	r.slots[seq&r.mask].Store(e)
	h.head.Store(seq + 1)
	h.trim(seq+1, e.born)
}

// wakeLocked wakes the sleeping followers (or has them woken) when the log
// grew past head, tells the followers the bounds cut, and unlocks mu.
func (h *hub) wakeLocked(head uint64) {
	cut := h.takeCut()
	if h.head.Load() == head {
		h.mu.Unlock() // nothing appended (a frame that could not be encoded)
		h.notifyCut(cut)
		return
	}
	// The sleepers to wake, taken out of the sleepers under the lock and
	// woken after it.
	var wake [inlineWakes]*follower
	nw, waker := 0, false
	switch {
	case len(h.sleepers) == 0 || h.waking:
	case h.corks.Load() > 0:
		h.holdWake() // the last cork, or corkBound, wakes them
	case len(h.sleepers) <= inlineWakes:
		// Followers with a wake channel are woken here; sessions
		// (owner.wake) by the waker, which writes their batches itself: one
		// goroutine for all of them.
		keep := h.sleepers[:0]
		for _, f := range h.sleepers {
			if f.owner == nil {
				f.sleepIdx = -1
				wake[nw] = f
				nw++
			} else {
				f.sleepIdx = int32(len(keep))
				keep = append(keep, f)
			}
		}
		clear(h.sleepers[len(keep):])
		h.sleepers = keep
		if len(keep) > 0 {
			h.waking, waker = true, true
		}
	default:
		h.waking, waker = true, true
	}
	h.mu.Unlock()
	for _, f := range wake[:nw] {
		f.signal(wakeStart)
	}
	if waker {
		workers.Start((*wakerTask)(h))
	}
	h.notifyCut(cut)
}

// countCompressed counts, once per entry and form, the compressed copy of e
// that a writer for a deflate client with the negotiated server window bits
// is about to make (or reuse), and returns nothing: the copy is cached in
// e.msg, so the write that follows uses it. A copy made after e left the log
// is not counted (it goes with the writer's batch).
func (h *hub) countCompressed(e *entry, windowBits int) {
	form := uint32(compressedFull)
	if windowBits > 0 && windowBits < 15 {
		form = compressedSmall
	}
	if e.forms.Load()&form != 0 || e.forms.Or(form)&form != 0 {
		return
	}
	f, plain := e.msg.FrameWindow(windowBits), e.msg.Frame(false)
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
	f.idx = int32(len(h.followers))
	h.followers = append(h.followers, f)
	if f.owner == nil {
		// It may read the frames from the head on, in the shared segment
		// now being filled: that one, and every one after it, is never
		// recycled (see arena).
		h.escapes = true
		h.recycleQ, h.slabQ = nil, nil
		if h.seg != nil {
			h.seg.arena.escaped = true
		}
		if h.spare != nil {
			h.spare.arena.escaped = true
		}
	}
}

// leave stops f from holding entries in the log and from being woken, for
// good: a sleep after leave (its reader may have checked its done channel
// just before the leaver closed it) does not register f again, which would
// keep it, and its session, in the sleepers until the next publish.
// Both removals are O(1): the last follower (sleeper) takes f's place.
func (h *hub) leave(f *follower) {
	h.mu.Lock()
	if i := int(f.sleepIdx); i >= 0 && i < len(h.sleepers) && h.sleepers[i] == f {
		last := len(h.sleepers) - 1
		h.sleepers[i] = h.sleepers[last]
		h.sleepers[i].sleepIdx = int32(i)
		h.sleepers[last] = nil
		h.sleepers = h.sleepers[:last]
	}
	f.sleepIdx = -1
	f.left = true
	if i := int(f.idx); i >= 0 && i < len(h.followers) && h.followers[i] == f {
		h.removeAt(i)
	}
	h.shrink()
	h.mu.Unlock()
}

// removeAt takes the follower at i out of the followers in O(1): the last
// one takes its place. The caller holds mu.
func (h *hub) removeAt(i int) {
	f, last := h.followers[i], len(h.followers)-1
	h.followers[i] = h.followers[last]
	h.followers[i].idx = int32(i)
	h.followers[last] = nil
	h.followers = h.followers[:last]
	f.idx = -1
	if f.owner != nil && f.owner.holds() != released {
		// Its reader may be writing a batch still: recycling waits for it,
		// until the owner says it is done (forget).
		if h.departed == nil {
			h.departed = map[*follower]struct{}{}
		}
		h.departed[f] = struct{}{}
	}
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

// A run is a stretch of the log whose plain frames lie back to back in one
// segment: n frames from first on, frames being their bytes.
type run struct {
	first  *entry
	frames []byte
	n      uint64
}

// fetchRun returns the run from cursor on: everything up to the head of the
// log or the end of cursor's segment, in O(1) whatever its length. lagged
// is as in fetch. A zero run with first set means the entry at cursor has
// no segment, or some entry from cursor on is a notice for one session:
// fetch them one by one. A zero run without first: nothing to fetch.
func (h *hub) fetchRun(cursor uint64) (rn run, lagged bool) {
	for {
		head := h.head.Load()
		if cursor >= head {
			return run{}, false
		}
		r := h.ring.Load()
		first := r.slots[cursor&r.mask].Load()
		if first == nil || first.seq != cursor {
			if r2 := h.ring.Load(); r2 != r { // the ring grew: read the new one
				continue
			}
			return run{}, true
		}
		g := first.seg
		if g == nil || h.lastNotice.Load() > cursor {
			return run{first: first}, false
		}
		last := first
		if head-1 != cursor {
			if last = r.slots[(head-1)&r.mask].Load(); last == nil || last.seq != head-1 {
				continue // the log moved on (or the ring grew) meanwhile
			}
		}
		endSeq, end := head, last.off+int(last.size)
		if last.seg != g {
			endSeq, end = g.end() // sealed before last was published
		}
		return run{first: first, frames: g.buf[first.off:end], n: endSeq - cursor}, false
	}
}

// sleep registers f to be woken by the next publish, unless a message
// arrived after cursor already. It reports whether f must wait for the token.
// A follower is registered once however often it sleeps (a Follower whose
// context ends keeps its place), and leave takes it out; one that has left
// is not registered again and waits for its done channel (every leaver
// closes it first, or stops calling next).
func (h *hub) sleep(f *follower, cursor uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.head.Load() != cursor && !f.left {
		return false
	}
	f.sleepAt = cursor
	if f.sleepIdx < 0 && !f.left {
		f.sleepIdx = int32(len(h.sleepers))
		h.sleepers = append(h.sleepers, f)
	}
	return true
}

// fanningOut reports whether some follower has not fetched up to the head
// of the log: a fan-out is under way (the memory releaser waits for its
// end, memrelease.go). It looks at every follower, under the lock.
func (h *hub) fanningOut() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	head := h.head.Load()
	for _, f := range h.followers {
		if f.cursor.Load() < head {
			return true
		}
	}
	return false
}

// retained returns how many messages the log keeps and the bytes they hold:
// plain frames (whole shared segments) plus compressed copies.
func (h *hub) retained() (msgs uint64, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.head.Load() - h.tail.Load(), h.held(h.bytes.Load())
}
