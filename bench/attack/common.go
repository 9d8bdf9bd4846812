//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// snapshot is the server's memory as /metrics and /proc report it.
type snapshot struct {
	RSS        int64
	HeapInuse  int64
	LiveHeap   int64 // see liveHeap
	Goroutines int64
	Conns      int64
	LogBytes   int64
	m          metricSet
}

func takeSnapshot(s *server) (snapshot, error) {
	m, _, err := s.scrape()
	if err != nil {
		return snapshot{RSS: s.rss()}, err
	}
	live, _ := m.liveHeap()
	return snapshot{
		RSS:        s.rss(),
		HeapInuse:  int64(m.sum("go_memstats_heap_inuse_bytes")),
		LiveHeap:   int64(live),
		Goroutines: int64(m.sum("go_goroutines")),
		Conns:      int64(m.sum("ovbus_connections")),
		LogBytes:   int64(m.sum("ovbus_log_bytes")),
		m:          m,
	}, nil
}

// liveHeapEstimate names where liveHeap took its figure from when the
// server does not export go_gc_heap_live_bytes.
const liveHeapEstimate = "go_memstats_next_gc_bytes ÷ 2 (an estimate: this server has no go_gc_heap_live_bytes)"

// liveHeap is the heap the server's last collection found live, in bytes,
// and the metric it came from. Servers built before /metrics had
// go_gc_heap_live_bytes give half their heap goal instead: at GOGC=100 the
// goal is the live heap plus as much again (plus the stacks and globals,
// so the estimate is high by half of those), and never under 4 MiB.
func (m metricSet) liveHeap() (float64, string) {
	if v, ok := m["go_gc_heap_live_bytes"]; ok {
		return v, "go_gc_heap_live_bytes"
	}
	return m.sum("go_memstats_next_gc_bytes") / 2, liveHeapEstimate
}

// errCounts counts errors by their text, safe for concurrent use.
type errCounts struct {
	mu sync.Mutex
	m  map[string]int
	n  int
}

// addrPattern matches the host:port pairs that make every error text unique.
var addrPattern = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

func (e *errCounts) add(err error) {
	msg := addrPattern.ReplaceAllString(err.Error(), "ADDR")
	if len(msg) > 120 {
		msg = msg[:120]
	}
	e.mu.Lock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	e.m[msg]++
	e.n++
	e.mu.Unlock()
}

func (e *errCounts) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

func (e *errCounts) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return countMap(e.m)
}

// connectMany opens n connections, conc at a time, each reading its
// greeting unless noGreeting. Failed ones are counted in errs and left out.
func connectMany(ctx context.Context, s *server, n, conc int, o dialOptions, noGreeting bool, errs *errCounts) []*conn {
	out := make([]*conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				oo := o
				if oo.Source == nil {
					oo.Source = nextSource()
				}
				c, err := dial(ctx, s.addr, s.route, oo)
				if err == nil && !noGreeting {
					if err = c.readGreeting(30 * time.Second); err != nil {
						c.nc.Close()
					}
				}
				if err != nil {
					errs.add(err)
					continue
				}
				out[i] = c
			}
		}()
	}
	wg.Wait()
	live := out[:0]
	for _, c := range out {
		if c != nil {
			live = append(live, c)
		}
	}
	return live
}

func closeAll(cs []*conn) {
	for _, c := range cs {
		c.nc.Close()
	}
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitMetric polls /metrics until cond holds or timeout passes.
func waitMetric(ctx context.Context, s *server, timeout time.Duration, cond func(metricSet) bool) (metricSet, bool) {
	deadline := time.Now().Add(timeout)
	for {
		m, _, err := s.scrape()
		if err == nil && cond(m) {
			return m, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil || !s.alive() {
			return m, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// padMessage returns an OVOS-shaped text message of about size bytes.
// random picks the filler from 16 letters (compresses about 2:1) instead
// of one repeated letter (compresses about 1000:1).
func padMessage(typ string, n, size int, random bool) []byte {
	head := fmt.Sprintf(`{"type":%q,"data":{"n":%d,"pad":"`, typ, n)
	tail := `"},"context":{}}`
	fill := max(size-len(head)-len(tail), 0)
	b := make([]byte, 0, len(head)+fill+len(tail))
	b = append(b, head...)
	if random {
		r := rand.New(rand.NewPCG(uint64(n), 7))
		for range fill {
			b = append(b, "abcdefghijklmnop"[r.IntN(16)])
		}
	} else {
		for range fill {
			b = append(b, 'a')
		}
	}
	return append(b, tail...)
}

// durations summarises latencies.
type durations []time.Duration

func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append(durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// drainer reads and discards what a connection receives until it ends,
// then records how it ended.
type drainer struct {
	c      *conn
	frames atomic.Int64
	done   chan struct{}
	end    outcome
}

func startDrainer(c *conn) *drainer {
	// A larger buffer for the one reader that must keep up with a flood;
	// reads past it go straight to the socket.
	c.br = bufio.NewReaderSize(c.br, 256<<10)
	d := &drainer{c: c, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			f, err := c.readFrame(0)
			if err != nil {
				d.end = outcome{How: describeEnd(err), Frames: int(d.frames.Load())}
				return
			}
			if f.Op == opClose {
				d.end = outcome{Code: f.closeCode(), How: fmt.Sprintf("close %d", f.closeCode()), Frames: int(d.frames.Load())}
				c.closeWith(f.closeCode())
				return
			}
			d.frames.Add(1)
		}
	}()
	return d
}

// state says whether the drainer's connection ended, and how.
func (d *drainer) state() string {
	select {
	case <-d.done:
		return fmt.Sprintf("cut: %s after %d frames", d.end.How, d.end.Frames)
	default:
		return fmt.Sprintf("open (%d frames)", d.frames.Load())
	}
}

func (d *drainer) ended() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}
