package bus

import (
	"cmp"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"time"
)

// Handing a burst's memory back to the operating system.
//
// After a burst of large messages every connection is back to its idle
// size at once (ws, "Limits and memory"), but the process is not: the Go
// runtime keeps the burst's pooled buffers (sync.Pools, emptied over two
// collections), its garbage until the next collection (on a quiet process
// the forced one, every two minutes), and returns the pages only as fast
// as its background scavenger does. A burst of handshakes is the same:
// each leaves net/http's request, header maps and bufio buffers behind,
// several times what the idle connection keeps. So the bus releases memory
// after either kind of burst:
//
//   - messages: when the in-flight budget (max_inflight_bytes, ws.Budget)
//     falls to releaseLow after at least releaseMinBurst bytes of messages
//     longer than ws.BudgetFree were charged to it (Budget.OnDrained: the
//     volume counts, not how many were read at once);
//   - handshakes: when at least releaseMinAccepts handshakes (accepted or
//     failed) were made since the last release (noteAccept).
//
// It waits until the burst is over (Budget.Charged unchanged, at most
// releaseLow held, no handshake for releaseQuiet) and the fan-out has
// paused for releaseQuiet: every follower had fetched up to the head of
// the log (hub.fanningOut) and every client had been written up to it
// (Server.flushed: a fan-out's writes go on long after its last fetch),
// with no frame appended since. A release is two collections of the whole
// heap, which would delay a fan-out's deliveries; a bus whose clients keep
// up is between fan-outs most of the time.
//
// It releases only when that is worth a collection, whose cost grows with
// the live heap: the messages charged at least an eighth of the live heap,
// or the heap's mapped memory (runtime/metrics) grew since the last
// release by releaseMinBurst or an eighth of the live heap. A release is
// one collection (moving the pools to their victim caches) and
// debug.FreeOSMemory (a second one, which frees them and returns every
// free page). Releases take at most 1/releaseShare of one CPU: the next
// waits at least releaseShare times the CPU time the last took (GC and
// scavenger time less idle mark time, runtimeStats), and at least
// releaseInterval. Bursts less than releaseQuiet apart release nothing
// until they stop. Each release is counted (ovbus_memory_releases_total)
// and logged at debug level with its cause. The fan-out log's memory
// (max_queue_bytes) is not a trigger: it is left to the runtime.
const (
	releaseMinBurst   = 16 << 20
	releaseMinAccepts = 1024
	releaseLow        = 1 << 20
	releaseQuiet      = 200 * time.Millisecond
	releaseInterval   = time.Second
	releaseShare      = 50
)

// memRelease is the state of the releases; the zero value is ready.
type memRelease struct {
	pending  atomic.Int64  // bytes charged by the message bursts not handled yet
	accepts  atomic.Int64  // handshakes since the last release (noteAccept)
	held     atomic.Int64  // heapHeld after the last release; 0 before the first
	running  atomic.Bool   // a releaser goroutine is on its way
	last     atomic.Int64  // time of the last release, Unix nanoseconds
	took     atomic.Int64  // the CPU time it took, nanoseconds
	count    atomic.Uint64 // releases
	skipped  atomic.Uint64 // message bursts too small against the live heap
	accepted atomic.Uint64 // releases after handshakes (a subset of count)
	deferred atomic.Uint64 // looks that found the burst over but a fan-out under way

	// minAccepts and minGrowth replace releaseMinAccepts and releaseMinBurst
	// for the handshake trigger when not 0 (tests).
	minAccepts, minGrowth int64
}

// onDrained is the in-flight budget's hook (ws.Budget.OnDrained): it runs on
// a reader's goroutine and only starts the releaser.
func (s *Server) onDrained(charged int64) {
	s.mem.pending.Add(charged)
	s.startReleaser()
}

// noteAccept counts one WebSocket handshake (the upgrade path, serveWS) and
// starts the releaser once there were enough since the last release.
func (s *Server) noteAccept() {
	if s.mem.accepts.Add(1) >= s.mem.acceptsWanted() {
		s.startReleaser()
	}
}

func (s *Server) startReleaser() {
	if s.mem.running.CompareAndSwap(false, true) {
		go s.releaseMemory()
	}
}

func (m *memRelease) acceptsWanted() int64 { return cmp.Or(m.minAccepts, releaseMinAccepts) }

// due reports whether a burst is waiting to be handled.
func (m *memRelease) due() bool {
	return m.pending.Load() > 0 || m.accepts.Load() >= m.acceptsWanted()
}

// releaseMemory waits for the end of the burst and the rate limit, then
// releases the memory of the bursts noted meanwhile.
func (s *Server) releaseMemory() {
	for {
		charged, accepts, head := s.inflight.Charged(), s.mem.accepts.Load(), s.hub.head.Load()
		idle := !s.hub.fanningOut() && s.flushed(head) // the fan-out is over from the start of the wait
		wait := releaseQuiet
		if last := s.mem.last.Load(); last != 0 {
			gap := max(releaseInterval, releaseShare*time.Duration(s.mem.took.Load()))
			wait = max(wait, time.Until(time.Unix(0, last).Add(gap)))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.closingC:
			t.Stop()
			s.mem.running.Store(false)
			return
		}
		if s.inflight.Charged() != charged || s.inflight.InUse() > releaseLow || s.mem.accepts.Load() != accepts {
			// The burst goes on: look again after the next quiet period
			// (a timer every releaseQuiet while large messages or
			// handshakes keep coming, nothing once they stop).
			continue
		}
		if !idle || s.hub.head.Load() != head {
			s.mem.deferred.Add(1)
			continue // look again once the fan-outs have paused
		}
		burst, handshakes := s.mem.pending.Swap(0), int64(0)
		if accepts >= s.mem.acceptsWanted() {
			handshakes = s.mem.accepts.Swap(0)
		}
		if burst > 0 || handshakes > 0 {
			s.release(burst, handshakes)
		}
		s.mem.running.Store(false)
		if !s.mem.due() || !s.mem.running.CompareAndSwap(false, true) {
			return
		}
	}
}

// release releases memory after burst bytes of large messages and
// handshakes handshakes, if either is worth a collection.
func (s *Server) release(burst, handshakes int64) {
	cpu0, live, held := runtimeStats()
	why := ""
	if handshakes > 0 {
		grown := held - s.mem.held.Load()
		if grown >= cmp.Or(s.mem.minGrowth, releaseMinBurst) || grown >= live/8 {
			why = "handshakes"
			s.mem.accepted.Add(1)
		}
	}
	if burst > 0 {
		if burst >= live/8 {
			why = cmp.Or(why, "large messages")
		} else {
			s.mem.skipped.Add(1)
		}
	}
	if why == "" {
		return
	}
	start := time.Now()
	s.hub.forgetRecycling()
	runtime.GC()
	debug.FreeOSMemory()
	end := time.Now()
	cpu1, _, held := runtimeStats()
	s.mem.held.Store(held)
	s.mem.took.Store(int64(max(cpu1-cpu0, 0) * float64(time.Second)))
	s.mem.last.Store(end.UnixNano())
	s.mem.count.Add(1)
	s.log.Debug("Returned memory to the OS after a burst of "+why, "burst_bytes", burst, "handshakes", handshakes,
		"took", end.Sub(start), "cpu_seconds", cpu1-cpu0)
}

// runtimeStats returns the CPU time the runtime has spent in collections
// and returning memory, in seconds, less what its mark workers took from
// idle processors (/cpu/classes/gc/mark/idle: time nothing else wanted,
// which on a quiet machine is most of a large collection's), the heap the last collection marked
// live, and the memory the heap holds: mapped and not returned to the OS
// (in use or free).
func runtimeStats() (cpu float64, live, held int64) {
	sample := []rtmetrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/scavenge/total:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/idle:cpu-seconds"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	rtmetrics.Read(sample)
	for i, x := range sample[:3] {
		if x.Value.Kind() == rtmetrics.KindFloat64 {
			cpu += [3]float64{1, 1, -1}[i] * x.Value.Float64()
		}
	}
	if sample[3].Value.Kind() == rtmetrics.KindUint64 {
		live = int64(sample[3].Value.Uint64())
	}
	for _, x := range sample[4:] {
		if x.Value.Kind() == rtmetrics.KindUint64 {
			held += int64(x.Value.Uint64())
		}
	}
	return cpu, live, held
}
