package bus

import (
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// The fan-out engine.
//
// Every relayed frame is encoded once (a ws.PreparedMessage) and appended to
// one shared log under one mutex, which gives every message a sequence number
// and so one total order. Each receiver (a session's on-demand writer, the
// in-process dispatcher, a public Follower) is a follower (follow.go): it
// reads the log at its own cursor, without locks, taking as many frames at a
// time as there are (up to a batch limit); a session writes them in one
// system call.
//
// The plain frames of small messages are encoded back to back into shared
// segments (segment), in the log's order, so that everything a follower has
// not fetched yet in one segment is one slice: a client that takes every
// frame as it is (no receive rule, no deflate) gets it with one write of
// that slice (fetchRun), with no work per frame. A large frame, or every
// frame when the byte bound is too small for segments, has a buffer of its
// own, as a segment of one frame.
//
// The log keeps the frames in [tail, head). The publisher releases old
// entries as soon as every follower has fetched them, and never keeps more
// than the queue bounds (MaxQueueMessages, MaxQueueBytes): a follower whose
// cursor falls below the tail was further behind than the bounds allow, finds
// its next entry gone and is closed as a slow consumer. The byte bound counts
// what the log really holds: the plain frames, plus the compressed copies the
// writers of deflate clients make of them (counted as they are made). So
// memory is bounded by the bounds whatever the clients do. A shared segment
// is held whole while any of its frames is in the log, so the byte bound
// counts whole allocations of segments (arena): their size instead of the
// frames in them.
//
// The allocations of shared segments (arena) and the slabs of their
// entries are recycled instead of new ones once no reader can still read
// them (see arena): out of the log, before what every session's writer
// reports it may still read (followerOwner.holds, taken at trim's scan),
// and never once a follower without an owner (Follower, the in-process
// dispatcher) joined, whose frames are handed to code that may keep them.
// So a bus whose clients keep up publishes without allocating (issue 13:
// the collector's cycles, the zeroing and first touch of new segments were
// a third of the cost of a message). The few kept for it (recycleKeep,
// slabKeep) are let go by the memory release (memrelease.go).
//
// The publisher never waits for anyone and does O(1) work per message
// however many followers sleep: it wakes up to inlineWakes sleepers with a
// wake channel itself and hands sessions, and more than inlineWakes
// sleepers, to a waker goroutine (wakeSleepers), which wakes every follower
// that sleeps at a cursor the log has passed, outside the lock, while the
// publisher goes on, and writes the sessions' batches itself when their
// sockets take them at once (session.wake); once in a while the publisher
// scans the followers' cursors to release what everybody has fetched.
//
// When the bounds force the release of an entry that some followers still
// need, those followers are cut at once (cutBehind): taken out of the log and
// told through their owner's onCut, which for a session gives a write that is blocked on a
// client that reads nothing a tenth of write_timeout to finish, instead of
// all of it.

// entry is one message of the log. It is immutable once published. The
// entries of frames in shared segments are carved from slabs (entrySlab)
// with their PreparedMessage, so that a message costs no allocation of its
// own; the garbage collector frees a slab once no entry of it is referred
// to (by the log or by a writer that fetched it).
type entry struct {
	seq    uint64
	end    int64               // cumulative bytes of the log through this entry
	size   int64               // bytes of the plain frame
	born   int64               // publish time, nanoseconds since the hub's epoch
	pm     *ws.PreparedMessage // &msg
	msg    ws.PreparedMessage
	seg    *segment // holds the plain frame at off; nil for frames outside the log (tests)
	off    int
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
	// route, when set, keeps a private frame from the routed clients it is
	// not for (routing.go); everyone else receives it.
	route *route
}

// segment holds the plain frames of consecutive entries back to back: the
// entries from the first to end in it, at increasing offsets, with no gap.
// A shared one is filled under hub.mu up to its capacity, or until a frame
// of a buffer of its own comes, and then sealed: endSeq and endLen are set
// before any entry of a later segment is published, so a follower that saw
// such an entry sees them. The bytes of a published frame never change.
// When a segment is sealed early, the rest of its buffer becomes the next
// segment (the two share one allocation), so frames of their own among
// small ones do not cost a new buffer each.
type segment struct {
	buf    []byte // the segment's part of its allocation: from its start to the end
	shared bool   // false: one large frame of its own
	endSeq atomic.Uint64
	endLen atomic.Int64
	arena  *arena // the allocation of a shared one
}

// arena is one allocation of shared segments, counted whole by the byte
// bound from the moment frames go into it until it is retired (frames go
// into another) and none of its frames is left in the log. Under hub.mu.
//
// A retired arena is recycled (hub.recycle) instead of a new allocation
// once no reader can still read its bytes: none of its frames is left in
// the log, every follower with an owner (a session's writer) reports
// through followerOwner.holds that it holds no frame before end, and no
// follower without an owner could ever read it (escaped). Those followers
// (Follower, the in-process dispatcher) hand their frames' payloads out to
// code that may keep them as long as it likes (Frame.Payload), so every
// arena frames go into from the first such join on is escaped, for good;
// the garbage collector frees those.
type arena struct {
	buf     []byte // the whole allocation
	size    int
	frames  int // its frames in the log
	retired bool
	escaped bool   // a follower without an owner may read it
	end     uint64 // once retired: the sequence number after its last frame
}

// released is what followerOwner.holds reports once its reader holds no
// frame at all, and never will again.
const released = ^uint64(0)

// recycleKeep is how many retired arenas the log keeps for recycling, the
// oldest first: they are held, beyond the byte bound once their frames
// are released, until recycled or pushed out by newer ones. slabKeep is
// the same for entry slabs: about as many as are used between two scans
// of trim (scanEveryMessages), which is when recycling learns what the
// readers hold.
const (
	recycleKeep = 2
	slabKeep    = scanEveryMessages/entrySlab + 2
)

// heldSlab is a used-up entry slab kept for recycling: its entries are
// all before end.
type heldSlab struct {
	s   []entry
	end uint64
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

// inlineWakes is how many sleepers with a wake channel publish wakes
// itself; more are woken by a waker goroutine (wakeSleepers), and so are
// sessions, always.
const inlineWakes = 16

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
	minCursor uint64 // last scanned minimum cursor (never above the real one)
	scanHead  uint64 // head at the last scan
	scanBytes int64  // bytes at the last scan
	scanMsgs  uint64 // scan after this many messages ...
	scanEvery int64  // ... or bytes since the last scan
	cutHead   uint64 // head at the last cutBehind
	cutAt     int64  // hub time of the last cutBehind
	cutNow    []*follower

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

	// Recycling of arenas and entry slabs (recycle, recycleSlab, under
	// mu): the retired ones kept for it, oldest first; the newest slab
	// whole; whether some follower without an owner ever joined (escapes:
	// nothing is recycled from then on); the followers with an owner taken
	// out of the log whose readers may still hold frames (departed: each
	// leaves it when its reader says it is done, forget); the oldest frame
	// any reader held at the last scan of trim (holdMin: everything before
	// it may be recycled once out of the log); and how many arenas and
	// slabs were recycled (for tests).
	recycleQ  []*arena
	slabQ     []heldSlab
	slabBase  []entry
	escapes   bool
	departed  map[*follower]struct{}
	holdMin   uint64
	recycled  int
	recycledS int

	// lastNotice is the sequence number after the newest entry for one
	// session only (entry.to): runs start after it (fetchRun).
	lastNotice atomic.Uint64

	// relayed counts the entries for everyone (messages_relayed_total);
	// stored under mu.
	relayed atomic.Uint64

	// The waker (under mu): running, and its spare list.
	waking  bool
	wakeBuf []*follower

	// extra is the bytes of the compressed copies held by entries in the
	// log (see countCompressed).
	extra atomic.Int64

	// Pacing of senders (see pace): the lags beyond which a session is
	// far behind.
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

func newHub(maxMsgs int, maxBytes int64) *hub {
	h := &hub{epoch: time.Now(), maxMsgs: uint64(maxMsgs), maxBytes: maxBytes, segCap: segmentSize(maxBytes)}
	h.ring.Store(newRing(min(maxMsgs, initialRing-1)))
	h.setPace(maxMsgs, maxBytes)
	h.freshFor.Store(int64(paceFresh))
	h.rate.Store(paceRate)
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
// appends it to the log as an entry with meta's born, mtype, origin, to and route
// (meta itself is not kept). A small frame is encoded into the shared
// segment, its entry carved from the slab, under the lock (segments and
// slabs are allocated outside it); a large one beforehand into a buffer of
// its own.
func (h *hub) publishFrame(op ws.Opcode, payload []byte, co ws.CompressionOptions, meta *entry) error {
	n := ws.PreparedFrameSize(len(payload))
	h.mu.Lock()
	for {
		c := h.segCap
		if !op.IsData() || c == 0 || n > c/4 {
			h.mu.Unlock()
			e := &entry{born: meta.born, mtype: meta.mtype, origin: meta.origin, to: meta.to, route: meta.route}
			buf, err := ws.AppendPreparedMessageTo(&e.msg, nil, op, payload, co)
			if err != nil {
				return err
			}
			e.pm, e.size = &e.msg, int64(n)
			e.seg = &segment{buf: buf}
			h.publish(e)
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
		h.mu.Unlock()
		return err
	}
	h.slab = h.slab[1:]
	e.born, e.mtype, e.origin, e.to, e.route = meta.born, meta.mtype, meta.origin, meta.to, meta.route
	e.pm, e.size, e.seg, e.off = &e.msg, int64(n), g, h.segUsed
	h.segUsed += n
	h.segFrames += int64(n)
	g.arena.frames++
	h.publishLocked(e)
	return nil
}

// publish appends e, whose frame is not in a shared segment, to the log.
func (h *hub) publish(e *entry) {
	h.mu.Lock()
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
	h.publishLocked(e)
}

// retire seals the shared segment frames go into, and its allocation: no
// frame goes into either any more. The caller holds mu.
func (h *hub) retire() {
	g := h.seg
	if g == nil {
		return
	}
	if h.segUsed > 0 {
		g.seal(h.head.Load(), h.segUsed)
	}
	a := g.arena
	a.retired, a.end = true, h.head.Load()
	if a.frames == 0 {
		h.segHeld -= int64(a.size)
	}
	h.seg, h.segUsed = nil, 0
	if a.escaped || a.size != h.segCap {
		return
	}
	if len(h.recycleQ) == recycleKeep { // the oldest goes to the collector
		copy(h.recycleQ, h.recycleQ[1:])
		h.recycleQ = h.recycleQ[:recycleKeep-1]
	}
	h.recycleQ = append(h.recycleQ, a)
}

// recycle returns the oldest retired arena, of size c, emptied for new
// frames, if no reader can still read its bytes (see arena); else nil.
// The caller holds mu.
func (h *hub) recycle(c int) *arena {
	if len(h.recycleQ) == 0 {
		return nil
	}
	a := h.recycleQ[0]
	if a.size != c || a.escaped || h.escapes {
		h.dropRecycled()
		return nil
	}
	if a.frames > 0 || a.end > h.holdMin {
		return nil
	}
	h.dropRecycled()
	a.frames, a.retired, a.end = 0, false, 0
	h.recycled++
	return a
}

// retireSlab keeps the used-up newest slab for recycling. The caller holds
// mu.
func (h *hub) retireSlab() {
	if h.slabBase == nil || h.escapes {
		return
	}
	if len(h.slabQ) == slabKeep { // the oldest goes to the collector
		copy(h.slabQ, h.slabQ[1:])
		h.slabQ = h.slabQ[:slabKeep-1]
	}
	h.slabQ = append(h.slabQ, heldSlab{h.slabBase, h.head.Load()})
	h.slabBase = nil
}

// recycleSlab makes the oldest retired slab, zeroed, the newest one, if no
// reader can still hold one of its entries (as for arenas: out of the log,
// before holdMin, nobody without an owner), and reports whether it did.
// The caller holds mu.
func (h *hub) recycleSlab() bool {
	if len(h.slabQ) == 0 || h.escapes {
		return false
	}
	q := h.slabQ[0]
	if q.end > h.tail.Load() || q.end > h.holdMin {
		return false
	}
	copy(h.slabQ, h.slabQ[1:])
	h.slabQ[len(h.slabQ)-1] = heldSlab{}
	h.slabQ = h.slabQ[:len(h.slabQ)-1]
	h.retireSlab()
	clear(q.s)
	h.slab, h.slabBase = q.s, q.s
	h.recycledS++
	return true
}

// forgetRecycling lets the arenas and slabs kept for recycling go to the
// collector: the memory releaser (memrelease.go) calls it before it
// collects, so that a bus that went quiet holds only what its log does.
func (h *hub) forgetRecycling() {
	h.mu.Lock()
	h.recycleQ, h.slabQ = nil, nil
	h.mu.Unlock()
}

// dropRecycled takes the oldest arena out of recycleQ.
func (h *hub) dropRecycled() {
	copy(h.recycleQ, h.recycleQ[1:])
	h.recycleQ[len(h.recycleQ)-1] = nil
	h.recycleQ = h.recycleQ[:len(h.recycleQ)-1]
}

// heldDeparted returns the smaller of m and the oldest frame a reader of a
// follower that left the log may still read (followerOwner.holds), and
// forgets the departed ones that hold none any more. With what trim's scan
// finds for the followers in the log, that is the oldest frame any reader
// may still read (holdMin). Every later reader holds no less: a reader
// never goes back before what it reported, and one that joins later reads
// from the head on. So whatever is before it and out of the log may be
// recycled. The caller holds mu.
func (h *hub) heldDeparted(m uint64) uint64 {
	for f := range h.departed {
		if x := f.owner.holds(); x != released {
			m = min(m, x)
		} else {
			delete(h.departed, f)
		}
	}
	h.dropDeparted()
	return m
}

// forget takes f, whose reader now holds no frame (its owner's holds
// reports released, for good), out of the departed followers, so that
// nothing of a closed session is kept once its writer has ended, whether
// or not anything is published after it.
func (h *hub) forget(f *follower) {
	h.mu.Lock()
	if _, ok := h.departed[f]; ok {
		delete(h.departed, f)
		h.dropDeparted()
	}
	h.mu.Unlock()
}

// dropDeparted lets an empty departed map go: a map keeps the room it grew
// to (a storm of closes), and a quiet bus should not. The caller holds mu.
func (h *hub) dropDeparted() {
	if len(h.departed) == 0 {
		h.departed = nil
	}
}

// departedCount is how many followers that left the log still wait for
// their readers (the departed_writers gauge).
func (h *hub) departedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.departed)
}

// publishLocked appends e to the log, wakes the sleeping followers (or has
// them woken) and unlocks mu.
func (h *hub) publishLocked(e *entry) {
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
	cut := h.takeCut()
	// The sleepers to wake, taken out of the sleepers under the lock and
	// woken after it.
	var wake [inlineWakes]*follower
	nw, waker := 0, false
	switch {
	case len(h.sleepers) == 0 || h.waking:
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
				f.sleepIdx = len(keep)
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
		workers.start((*wakerTask)(h))
	}
	h.notifyCut(cut)
}

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
				f.sleepIdx = len(keep)
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

// held returns the bytes the log holds, total being the cumulative bytes
// published: its frames, with whole shared segments in place of the frames
// in them, plus the compressed copies. The caller holds mu.
func (h *hub) held(total int64) int64 {
	return total - h.tailBytes - h.segFrames + h.segHeld + h.extra.Load()
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
		if f.owner != nil {
			f.owner.onCut()
		}
	}
}

// trim releases entries nobody needs and entries beyond the bounds, always
// keeping the newest; now is the hub time. The caller holds mu.
func (h *hub) trim(head uint64, now int64) {
	total := h.bytes.Load()
	if head-h.scanHead >= h.scanMsgs || total-h.scanBytes >= h.scanEvery {
		// One walk for the oldest cursor and, while recycling is on, the
		// oldest frame a session's writer may still read (heldDeparted).
		m, held := head, head
		recycling := !h.escapes
		for _, f := range h.followers {
			if c := f.cursor.Load(); c < m {
				m = c
			}
			if recycling && f.owner != nil {
				held = min(held, f.owner.holds())
			}
		}
		h.minCursor, h.scanHead, h.scanBytes = m, head, total
		if recycling {
			h.holdMin = h.heldDeparted(held)
		}
	}
	tail := h.tail.Load()
	if tail+1 >= head {
		return
	}
	r := h.ring.Load()
	start := tail
	forced := false
	for tail+1 < head {
		if tail >= h.minCursor {
			if head-tail <= h.maxMsgs && h.held(total) <= h.maxBytes {
				break // within the bounds
			}
			forced = true // some follower may still need it
		}
		slot := &r.slots[tail&r.mask]
		e := slot.Load()
		h.tailBytes = e.end
		h.tailBytesA.Store(e.end)
		if g := e.seg; g != nil && g.shared {
			h.segFrames -= e.size
			a := g.arena
			a.frames--
			if a.frames == 0 && a.retired { // its last frame: the allocation goes
				h.segHeld -= int64(a.size)
			}
		}
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
// is gone) out of the log and queues them for owner.onCut; it rescans the minimum
// cursor of the others on the way. The caller holds mu.
func (h *hub) cutBehind(tail, head uint64, total, now int64) {
	m := head
	for i := 0; i < len(h.followers); {
		f := h.followers[i]
		c := f.cursor.Load()
		if c >= tail || !f.cuts {
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
	if i := f.sleepIdx; i >= 0 && i < len(h.sleepers) && h.sleepers[i] == f {
		last := len(h.sleepers) - 1
		h.sleepers[i] = h.sleepers[last]
		h.sleepers[i].sleepIdx = i
		h.sleepers[last] = nil
		h.sleepers = h.sleepers[:last]
	}
	f.sleepIdx = -1
	f.left = true
	if f.idx >= 0 && f.idx < len(h.followers) && h.followers[f.idx] == f {
		h.removeAt(f.idx)
	}
	h.shrink()
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
		f.sleepIdx = len(h.sleepers)
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
