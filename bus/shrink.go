package bus

// Capacity after a peak of connections: slices keep their capacity, so the
// server's sessions and the hub's followers and sleepers would keep what
// the peak needed. Each is reallocated to its size once it has fallen to a
// quarter of a capacity of at least shrinkMin. (The Go runtime keeps a
// descriptor for each goroutine that ever ran at once, which no program
// can give back.)
const shrinkMin = 1024

// shrinkSessions returns ss, or a copy of it sized to its length when that
// is a quarter of its capacity or less (the places, session.sidx, stay).
func shrinkSessions(ss []*session) []*session {
	if c := cap(ss); c < shrinkMin || 4*len(ss) > c {
		return ss
	}
	return append(make([]*session, 0, len(ss)), ss...)
}

// shrink reallocates the followers and the sleepers when the followers
// have fallen to a quarter of a capacity of shrinkMin or more. The sleepers
// are measured against the followers (their length falls to 0 at every
// publish, which is no reason to shrink). The caller holds mu.
func (h *hub) shrink() {
	n := len(h.followers)
	if c := cap(h.followers); c >= shrinkMin && 4*n <= c {
		h.followers = append(make([]*follower, 0, n), h.followers...)
	}
	if c := cap(h.sleepers); c >= shrinkMin && 4*n <= c {
		h.sleepers = append(make([]*follower, 0, max(n, len(h.sleepers))), h.sleepers...)
	}
}
