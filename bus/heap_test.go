package bus

import (
	"bufio"
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// serverHeap returns the heap the live objects allocated on the server's
// side hold (the listener's accept, net/http's connection goroutine with
// the upgrade and the hand-over, the poller and the sessions' readers and
// writers), from the heap profile, and the biggest allocation sites.
// runtime.MemProfileRate must have been 1 since before those objects were
// allocated.
func serverHeap() (total int64, sites []string) {
	recs := heapProfile()
	bySite := map[string]int64{}
	for i := range recs {
		r := &recs[i]
		if r.InUseBytes() == 0 {
			continue
		}
		server, site := false, ""
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			fn := f.Function
			if site == "" && !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "internal/") {
				site = fmt.Sprintf("%s:%d", fn, f.Line)
			}
			if strings.HasPrefix(fn, "net/http.(*Server).Serve") || strings.HasPrefix(fn, "net/http.(*conn).serve") ||
				strings.HasPrefix(fn, "github.com/ovbus/ovbus/bus/internal/netpoll.") || strings.HasPrefix(fn, "github.com/ovbus/ovbus/bus.(*session)") {
				server = true
			}
			if !more {
				break
			}
		}
		if server {
			total += r.InUseBytes()
			bySite[site] += r.InUseBytes()
		}
	}
	for s, b := range bySite {
		sites = append(sites, fmt.Sprintf("%8d B  %s", b, s))
	}
	slices.SortFunc(sites, func(a, b string) int { return cmp.Compare(b, a) })
	return total, sites
}

// heapProfile returns the heap profile's records after three collections:
// the pools' contents go in two, and the profile is that of the last
// completed cycle.
func heapProfile() []runtime.MemProfileRecord {
	for range 3 {
		runtime.GC()
	}
	var recs []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(recs, false)
		if ok {
			return recs[:n]
		}
		recs = make([]runtime.MemProfileRecord, n+50)
	}
}

// maxIdleSessionHeap is the most heap an idle plain session may hold on
// the server, everything it needs counted: the session with its follower
// (288 bytes), the ws.Conn with its Protocol and raw I/O (288; their read
// and write states are back in their pools), the socket out of Go's poller
// (netpoll's fdConn, 80), the remote address string (16), and its share of
// the poller's token table, the server's sessions and the hub's followers
// and sleepers (about 50, more while one grows). That is about 725 bytes;
// the bound leaves room for the tables' growth and fails on anything the
// size of a channel.
const maxIdleSessionHeap = 800

// TestIdleSessionHeap: an idle session on the poll path holds at most
// maxIdleSessionHeap bytes of heap. The figure is the heap profile's, of
// the live objects allocated on the server's side, divided by the
// sessions: a memory bound, the same under the race detector (which
// changes no object's size).
func TestIdleSessionHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("opens many connections")
	}
	if pollDisabled {
		t.Skip("the portable path: each session's reader goroutine waits holding its read state; the bound is the poll path's")
	}
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	const n = 2000
	s, _ := testServer(t, Options{})
	base := runtime.NumGoroutine()
	before, _ := serverHeap()
	brs := make([]*bufio.Reader, n)
	for i := range brs {
		_, brs[i] = rawDial(t, s)
	}
	waitFor(t, "every session", 10*time.Second, func() bool { return s.Clients() == n })
	waitGoroutines(t, base, n)
	after, sites := serverHeap()
	per := float64(after-before) / n
	t.Logf("%.0f bytes of heap per idle session (%d sessions); the biggest sites:\n%s", per, n, strings.Join(sites[:min(len(sites), 25)], "\n"))
	if per > maxIdleSessionHeap {
		t.Errorf("%.0f bytes of heap per idle session, want at most %d", per, maxIdleSessionHeap)
	}
	runtime.KeepAlive(brs)
}
