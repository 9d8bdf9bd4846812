package bus

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// Clients that come and go on a quiet bus must leave nothing behind: each
// way of leaving, thousands of times, with no message published, and the
// live heap after collection stays where it was.

// leaveWay is one way a client leaves the bus.
type leaveWay struct {
	name string
	run  func(nc *net.TCPConn, br *bufio.Reader) error
}

// leaveWays are the ways of leaving a churn test runs, each after its own
// handshake (or half of one).
var leaveWays = []leaveWay{
	{"close frame", func(nc *net.TCPConn, br *bufio.Reader) error {
		if err := greeted(br); err != nil {
			return err
		}
		if _, err := nc.Write(maskedFrame(ws.OpClose, []byte{0x03, 0xe8})); err != nil {
			return err
		}
		_, err := io.Copy(io.Discard, br) // the echo, then the server's FIN
		return err
	}},
	{"reset after the greeting", func(nc *net.TCPConn, br *bufio.Reader) error {
		if err := greeted(br); err != nil {
			return err
		}
		return nc.SetLinger(0)
	}},
	{"reset before the 101", func(nc *net.TCPConn, br *bufio.Reader) error {
		return nc.SetLinger(0)
	}},
	{"FIN without a close frame", func(nc *net.TCPConn, br *bufio.Reader) error {
		return greeted(br)
	}},
}

// greeted reads the 101 and the greeting of a raw client's handshake.
func greeted(br *bufio.Reader) error {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("upgrade: %s", resp.Status)
	}
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return err
	}
	if _, err := io.CopyN(io.Discard, br, int64(h[1]&127)); err != nil {
		return err
	}
	if ws.Opcode(h[0]&15) != ws.OpText || int(h[1]&127) != len(Greeting) {
		return fmt.Errorf("greeting: header % x", h)
	}
	return nil
}

// churn runs n cycles of way against s, a few at a time, each a raw
// connection (no library, no goroutine of the client's once it returns)
// that sends the upgrade request and leaves as way says; then it waits
// until the bus has ended every session it made.
func churn(t *testing.T, s *Server, way leaveWay, n int) {
	t.Helper()
	const parallel = 8
	addr := s.Addr().String()
	req := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", s.opts.Route))
	var wg sync.WaitGroup
	errs := make(chan error, parallel)
	for g := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += parallel {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					errs <- err
					return
				}
				nc := c.(*net.TCPConn)
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = nc.Write(req)
				if err == nil {
					err = way.run(nc, bufio.NewReader(nc))
				}
				nc.Close()
				if err != nil {
					errs <- fmt.Errorf("%s, cycle %d: %w", way.name, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every session gone and both its sides ended (conns counts a
	// connection until then), its writer included.
	waitFor(t, "every connection's end", 30*time.Second, func() bool { return s.Clients() == 0 && s.conns.Load() == 0 })
}

// liveHeap is the heap the live objects hold, from the heap profile,
// without the runtime's records of
// goroutines and threads: those grow to the most that ever ran at once
// (which creeps up over a long test as the scheduler happens to overlap
// more of them), not with connections, and are never freed.
// runtime.MemProfileRate must be 1 since before the objects measured were
// allocated.
func liveHeap() int64 {
	recs := heapProfile()
	var total int64
	for i := range recs {
		r := &recs[i]
		if r.InUseBytes() != 0 && !runtimeBookkeeping(r.Stack()) {
			total += r.InUseBytes()
		}
	}
	return total
}

// runtimeBookkeeping reports whether an allocation's stack is the
// runtime's record of a goroutine or a thread.
func runtimeBookkeeping(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		switch f.Function {
		case "runtime.malg", "runtime.allgadd", "runtime.allocm", "runtime.acquireSudog":
			return true
		}
		if !more {
			return false
		}
	}
}

// maxChurnGrowth is how much the live heap may grow over a churn test's
// thousands of cycles: the maps and pools that grew to the test's
// parallelism during the warm-up may settle differently. One closed
// connection kept costs some 34 KB (its read buffer, Conn and session).
const maxChurnGrowth = 256 << 10

// TestChurnLeavesNothingBehind: thousands of clients that connect and
// leave each way, on a bus that relays nothing, leave the live heap where
// it was, and the hub keeps no follower of a session that ended.
func TestChurnLeavesNothingBehind(t *testing.T) {
	cycles := 3000
	if raceEnabled || testing.Short() {
		cycles = 1000
	}
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	s, _ := testServer(t, Options{})
	for _, way := range leaveWays { // warm-up: pools, maps and workers grow to their size
		churn(t, s, way, 200)
	}
	before := liveHeap()
	for _, way := range leaveWays {
		churn(t, s, way, cycles)
		s.hub.mu.Lock()
		departed := len(s.hub.departed)
		s.hub.mu.Unlock()
		if departed != 0 {
			t.Errorf("%s: the hub holds %d departed followers of sessions that ended", way.name, departed)
		}
	}
	after := liveHeap()
	t.Logf("live heap %d KB before, %d KB after %d cycles of each way of leaving", before>>10, after>>10, cycles)
	if after-before > maxChurnGrowth {
		t.Fatalf("live heap grew by %d KB over %d cycles of each of %d ways of leaving (bound %d KB)",
			(after-before)>>10, cycles, len(leaveWays), maxChurnGrowth>>10)
	}
}

// TestDepartedWriterLetGoWithoutTraffic: a client cut while its writer is
// blocked on it (it reads nothing) is held only until that write ends, and
// then let go with nothing published after it; the departed_writers gauge
// shows it meanwhile.
func TestDepartedWriterLetGoWithoutTraffic(t *testing.T) {
	// Cut at 4 MiB behind; the blocked write then has a tenth of a minute.
	s, _ := testServer(t, Options{WriteTimeout: time.Minute, MaxMsgSize: 1 << 20, MaxQueueBytes: 4 << 20})
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tc := nc.(*net.TCPConn)
	tc.SetReadBuffer(64 << 10) // it reads nothing: the bus's writes to it block soon
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", s.opts.Route)
	if err := greeted(bufio.NewReader(nc)); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 256<<10)
	for range 64 { // 16 MiB: more than the kernel buffers and the bound hold
		if err := s.Publish(ws.OpBinary, payload, ""); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the cut client's blocked writer to be counted", 10*time.Second, func() bool {
		return metricValue(t, s, "ovbus_departed_writers", "") == 1
	})
	tc.SetLinger(0)
	tc.Close() // the blocked write fails: the writer ends
	waitFor(t, "the writer to be let go", 10*time.Second, func() bool {
		return metricValue(t, s, "ovbus_departed_writers", "") == 0 && s.conns.Load() == 0
	})
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if s.hub.departed != nil {
		t.Fatalf("the hub keeps %d departed followers (a map of %T)", len(s.hub.departed), s.hub.departed)
	}
}

// metricValue returns the value of the counter or gauge name with the
// label reason (or no labels when reason is ""), 0 when it has none yet.
func metricValue(t testing.TB, s *Server, name, reason string) float64 {
	t.Helper()
	fams, err := s.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := m.GetLabel()
			if (reason == "" && len(labels) == 0) || (len(labels) == 1 && labels[0].GetValue() == reason) {
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
