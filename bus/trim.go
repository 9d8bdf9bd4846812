package bus

import "time"

// Trimming the log: releasing the entries every follower has fetched, and,
// when the bounds force it, entries some follower still needs, cutting
// those followers (the slow consumers).

// trimming is the hub's state for trim (under hub.mu).
type trimming struct {
	minCursor uint64 // last scanned minimum cursor (never above the real one)
	scanHead  uint64 // head at the last scan
	scanBytes int64  // bytes at the last scan
	scanMsgs  uint64 // scan after this many messages ...
	scanEvery int64  // ... or bytes since the last scan
	cutHead   uint64 // head at the last cutBehind
	cutAt     int64  // hub time of the last cutBehind
	cutNow    []*follower
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
// its entry gone on its next fetch.
const (
	cutScanMessages = 64
	cutScanInterval = 10 * time.Millisecond
)

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
