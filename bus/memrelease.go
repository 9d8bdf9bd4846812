package bus

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"time"
)

// Handing a burst's memory back to the operating system (issue 10 item 3).
//
// After a burst of large messages every connection is back to its idle size
// at once (ws, "Memory"), but the process is not: the Go runtime keeps the
// burst's pooled message buffers (sync.Pools, emptied over two collections),
// its garbage until the next collection (on a quiet process the runtime's
// forced one, every two minutes), and the pages both free only as fast as
// its background scavenger returns them. 1 000 connections that had each
// sent one 683 KiB message kept 38–52 KiB of RSS each instead of 26 for a
// minute or more.
//
// So when the in-flight budget (max_inflight_bytes, ws.Budget) falls to
// releaseLow after at least releaseMinBurst bytes of messages longer than
// ws.BudgetFree were charged to it (Budget.OnDrained: the volume counts,
// not how many were read at once), the bus waits until no such message has
// started or grown for releaseQuiet (Budget.Charged unchanged, at most
// releaseLow held: the burst is over), and, if the burst charged at least
// an eighth of the live heap (so that the collections cost in proportion to
// what they give back: a heap of many idle connections is not walked for a
// small burst), runs one collection (it moves the pools to their victim
// caches) and debug.FreeOSMemory (a second collection, which frees them,
// then every free page returned to the OS). The releases take at most
// 1/releaseShare of one CPU: the next one waits at least releaseShare times
// the CPU time the last one took (the runtime's GC and scavenger time,
// runtime/metrics), and at least releaseInterval; a burst that ends sooner
// is handled when that wait is over. Large messages that keep coming with
// less than releaseQuiet between them release nothing until they stop. Each
// release is counted (ovbus_memory_releases_total) and logged at debug
// level. The memory of the fan-out log (max_queue_bytes) is not a trigger:
// it is left to the runtime.
const (
	releaseMinBurst = 16 << 20
	releaseLow      = 1 << 20
	releaseQuiet    = 200 * time.Millisecond
	releaseInterval = time.Second
	releaseShare    = 50
)

// memRelease is the state of the releases; the zero value is ready.
type memRelease struct {
	pending atomic.Int64 // bytes charged by the bursts not handled yet
	running atomic.Bool  // a releaser goroutine is on its way
	last    atomic.Int64 // time of the last release, Unix nanoseconds
	took    atomic.Int64 // the CPU time it took, nanoseconds
	count   atomic.Uint64
	skipped atomic.Uint64 // bursts too small against the live heap
}

// onDrained is the in-flight budget's hook (ws.Budget.OnDrained): it runs on
// a reader's goroutine and only starts the releaser.
func (s *Server) onDrained(charged int64) {
	s.mem.pending.Add(charged)
	if s.mem.running.CompareAndSwap(false, true) {
		go s.releaseMemory()
	}
}

// releaseMemory waits for the end of the burst and the rate limit, then
// releases the memory of the bursts noted meanwhile.
func (s *Server) releaseMemory() {
	for {
		charged := s.inflight.Charged()
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
		if s.inflight.Charged() == charged && s.inflight.InUse() <= releaseLow {
			if burst := s.mem.pending.Swap(0); burst > 0 {
				s.release(burst)
			}
		} else {
			// The burst goes on: look again after the next quiet period
			// (a timer every releaseQuiet while large messages keep
			// coming, nothing once they stop).
			continue
		}
		s.mem.running.Store(false)
		if s.mem.pending.Load() == 0 || !s.mem.running.CompareAndSwap(false, true) {
			return
		}
	}
}

func (s *Server) release(burst int64) {
	cpu0, live := runtimeStats()
	if burst < live/8 {
		s.mem.skipped.Add(1)
		return
	}
	start := time.Now()
	runtime.GC()
	debug.FreeOSMemory()
	end := time.Now()
	cpu1, _ := runtimeStats()
	s.mem.took.Store(int64(max(cpu1-cpu0, 0) * float64(time.Second)))
	s.mem.last.Store(end.UnixNano())
	s.mem.count.Add(1)
	s.log.Debug("Returned memory to the OS after a burst of large messages", "burst_bytes", burst,
		"took", end.Sub(start), "cpu_seconds", cpu1-cpu0)
}

// runtimeStats returns the CPU time the runtime has spent in collections
// and returning memory, in seconds, and the heap the last collection marked
// live.
func runtimeStats() (cpu float64, live int64) {
	sample := []rtmetrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/scavenge/total:cpu-seconds"},
		{Name: "/gc/heap/live:bytes"},
	}
	rtmetrics.Read(sample)
	for _, x := range sample[:2] {
		if x.Value.Kind() == rtmetrics.KindFloat64 {
			cpu += x.Value.Float64()
		}
	}
	if sample[2].Value.Kind() == rtmetrics.KindUint64 {
		live = int64(sample[2].Value.Uint64())
	}
	return cpu, live
}
