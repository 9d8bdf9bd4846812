package bus

// recycling is the hub's state for recycling arenas and entry slabs
// (recycle, recycleSlab).
type recycling struct {
	// Under hub.mu: the retired ones kept for it, oldest first; the newest slab
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
}

// Recycling the log's memory: the allocations of shared segments (arena)
// and the slabs of their entries are used again instead of new ones once no
// reader can still read them; the followers that left the log while their
// writer still held frames (departed) keep that from happening too soon.

// arena is one allocation of shared segments, counted whole by the byte
// bound from the moment frames go into it until it is retired (frames go
// into another) and none of its frames is left in the log. Under hub.mu.
//
// A retired arena is recycled (hub.recycle) once no reader can still read
// its bytes: none of its frames is in the log, every follower with an owner
// reports through followerOwner.holds that it holds no frame before end,
// and no follower without an owner could ever read it (escaped). Those
// (Follower, the in-process dispatcher) hand payloads to code that may keep
// them (Frame.Payload), so every arena used from the first such join on is
// escaped for good and left to the garbage collector.
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
// forgets the departed ones that hold none any more. With trim's scan of
// the followers in the log, that is the oldest frame any reader may still
// read (holdMin): a reader never goes back before what it reported, and
// one that joins later reads from the head on, so whatever is before it
// and out of the log may be recycled. The caller holds mu.
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
