package bus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus/internal/workers"
	"github.com/ovbus/ovbus/ws"
)

// The sessions' idle path (session.go, "Who runs what"): on Linux over
// plain TCP an idle session owns no goroutine; on the portable path
// (OVBUS_TEST_PORTABLE=1, TLS, other systems) it owns its reader.

// readersPerSession is how many goroutines an idle session owns here.
func readersPerSession() int {
	if pollDisabled {
		return 1
	}
	return 0
}

// waitGoroutines waits until at most base + n·perSession + slack
// goroutines run (writers that caught up exit, readers go back to the
// poller); the slack counts the workers that may wait for a task
// (bus/internal/workers), a fixed number whatever n is.
func waitGoroutines(t *testing.T, base, n int) {
	t.Helper()
	want := base + n*readersPerSession() + workers.MaxIdle + 10
	waitFor(t, fmt.Sprintf("at most %d goroutines", want), 10*time.Second, func() bool { return runtime.NumGoroutine() <= want })
}

// rawDial opens a WebSocket connection by hand, with no goroutine and no
// library on the client side, and reads the greeting.
func rawDial(t *testing.T, s *Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", s.opts.Route)
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if op, b := rawRead(t, br); op != ws.OpText || string(b) != Greeting {
		t.Fatalf("greeting: %v %q", op, b)
	}
	nc.SetDeadline(time.Time{})
	return nc, br
}

// rawRead reads one unmasked, unfragmented server frame.
func rawRead(t *testing.T, br *bufio.Reader) (ws.Opcode, []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatal(err)
	}
	n := int(h[1] & 127)
	switch n {
	case 126:
		var l [2]byte
		io.ReadFull(br, l[:])
		n = int(l[0])<<8 | int(l[1])
	case 127:
		var l [8]byte
		io.ReadFull(br, l[:])
		n = 0
		for _, x := range l {
			n = n<<8 | int(x)
		}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		t.Fatal(err)
	}
	return ws.Opcode(h[0] & 15), b
}

// maskedFrame encodes one final client frame.
func maskedFrame(op ws.Opcode, p []byte) []byte {
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b := []byte{0x80 | byte(op)}
	switch {
	case len(p) < 126:
		b = append(b, 0x80|byte(len(p)))
	case len(p) < 1<<16:
		b = append(b, 0x80|126, byte(len(p)>>8), byte(len(p)))
	default:
		b = append(b, 0x80|127, 0, 0, 0, 0, byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p)))
	}
	b = append(b, key[:]...)
	for i, c := range p {
		b = append(b, c^key[i%4])
	}
	return b
}

// TestIdleSessionsOwnNoGoroutine: many idle clients cost no goroutine each
// on the poll path (one each on the portable path), and a publish still
// reaches every one of them, after which the writers are gone again.
func TestIdleSessionsOwnNoGoroutine(t *testing.T) {
	const n = 200
	s, _ := testServer(t, Options{})
	base := runtime.NumGoroutine()
	brs := make([]*bufio.Reader, n)
	for i := range brs {
		_, brs[i] = rawDial(t, s)
	}
	waitFor(t, "every session", 10*time.Second, func() bool { return s.Clients() == n })
	waitGoroutines(t, base, n)
	msg := []byte(`{"type":"wake.up","data":{},"context":{}}`)
	if err := s.Publish(ws.OpText, msg, ""); err != nil {
		t.Fatal(err)
	}
	for i, br := range brs {
		if op, b := rawRead(t, br); op != ws.OpText || !bytes.Equal(b, msg) {
			t.Fatalf("client %d got %v %q", i, op, b)
		}
	}
	waitGoroutines(t, base, n)
}

// TestFrameSplitOverManyWrites: a frame written a byte at a time, header
// included, is relayed whole.
func TestFrameSplitOverManyWrites(t *testing.T) {
	s, url := testServer(t, Options{})
	nc, br := rawDial(t, s)
	nc.(*net.TCPConn).SetNoDelay(true)
	other := dial(t, url, nil)
	msg := []byte(`{"type":"split","data":{"pad":"` + strings.Repeat("p", 300) + `"},"context":{}}`)
	for _, b := range maskedFrame(ws.OpText, msg) {
		if _, err := nc.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, ws.OpText, msg, other)
	if op, b := rawRead(t, br); op != ws.OpText || !bytes.Equal(b, msg) {
		t.Fatalf("sender got %v %q", op, b)
	}
}

// TestAbruptCloseMidFrame: a client that drops its connection half way
// through a frame ends its session as a disconnect, and leaves nothing
// running.
func TestAbruptCloseMidFrame(t *testing.T) {
	s, _ := testServer(t, Options{})
	base := runtime.NumGoroutine()
	nc, _ := rawDial(t, s)
	frame := maskedFrame(ws.OpText, bytes.Repeat([]byte("a"), 1000))
	if _, err := nc.Write(frame[:500]); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	waitFor(t, "the session to end", 10*time.Second, func() bool { return s.Clients() == 0 })
	if cs := s.RecentCloses(); len(cs) != 1 || cs[0].Reason != reasonDisconnect {
		t.Fatalf("closes %+v, want one disconnect", cs)
	}
	waitGoroutines(t, base, 0)
}

// TestPingWhileIdle: an idle client's pings are answered, again and again.
func TestPingWhileIdle(t *testing.T) {
	_, url := testServer(t, Options{})
	c := dial(t, url, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // pongs are seen by a reading client
		defer wg.Done()
		c.ReadMessage(context.Background())
	}()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.Ping(ctx, []byte(fmt.Sprint("ping ", i)))
		cancel()
		if err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
	}
	c.CloseNow()
	wg.Wait()
}

// TestLargeMessageThenIdle: a message of several MiB is relayed whole, and
// afterwards nothing of max_inflight_bytes is held.
func TestLargeMessageThenIdle(t *testing.T) {
	s, url := testServer(t, Options{MaxMsgSize: 8 << 20})
	a, b := dial(t, url, nil), dial(t, url, nil)
	big := bytes.Repeat([]byte("L"), 5<<20)
	errc := make(chan error, 1)
	go func() { errc <- a.WriteMessage(context.Background(), ws.OpBinary, big) }()
	expect(t, ws.OpBinary, big, b)
	expect(t, ws.OpBinary, big, a)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the budget to be free", 10*time.Second, func() bool { return s.inflight.InUse() == 0 })
	msg := []byte(`{"type":"small"}`)
	send(t, b, ws.OpText, msg)
	expect(t, ws.OpText, msg, a, b)
}

// TestShutdownWithIdleSessions: Shutdown ends idle sessions, whose readers
// wait in the poller, with and without close frames, and returns once all
// is gone.
func TestShutdownWithIdleSessions(t *testing.T) {
	for _, closeFrames := range []bool{false, true} {
		t.Run(fmt.Sprint("close_frames=", closeFrames), func(t *testing.T) {
			const n = 50
			s, _ := testServer(t, Options{CloseFramesOnShutdown: closeFrames, ShutdownTimeout: 5 * time.Second})
			base := runtime.NumGoroutine()
			brs := make([]*bufio.Reader, n)
			ncs := make([]net.Conn, n)
			for i := range brs {
				ncs[i], brs[i] = rawDial(t, s)
			}
			waitGoroutines(t, base, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- s.Shutdown(ctx) }()
			for i, br := range brs {
				ncs[i].SetReadDeadline(time.Now().Add(10 * time.Second))
				if closeFrames {
					op, b := rawRead(t, br)
					if op != ws.OpClose || len(b) < 2 || ws.StatusCode(b[0])<<8|ws.StatusCode(b[1]) != ws.StatusGoingAway {
						t.Fatalf("client %d: %v %q, want close 1001", i, op, b)
					}
					ncs[i].Write(maskedFrame(ws.OpClose, b[:2])) // the answer
				}
				if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
					t.Fatalf("client %d: %v, want the connection closed", i, err)
				}
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second): // a reader nobody ended holds Shutdown forever
				t.Fatal("Shutdown did not return")
			}
			if s.Clients() != 0 {
				t.Fatalf("%d clients after Shutdown", s.Clients())
			}
		})
	}
}

// TestWritersAfterIdle: once every session's writer has caught up and
// ended, the writers the next publishes start write a run (a plain client)
// or frame by frame (a receive rule, deflate), and each client gets what it
// may receive, in order: small frames in a shared segment, a frame of its
// own among them, and a notice for one client (docs/protocol.md §3).
func TestWritersAfterIdle(t *testing.T) {
	// Segments of 4 KiB: a frame over 1 KiB has its own buffer.
	s, url := testServer(t, Options{MaxMsgSize: 16 << 10, MaxQueueBytes: 64 << 10, Auth: Auth{Tokens: map[string]Permissions{
		"gui": {Name: "gui", Receive: []string{"gui.*"}},
	}}})
	plain := dial(t, url, nil)
	gui := dial(t, url+"?token=gui", nil)
	z := dial(t, url, &ws.DialOptions{EnableCompression: true})
	if z.Deflate() == nil {
		t.Fatal("permessage-deflate not negotiated")
	}
	var guiSession *session
	waitFor(t, "every writer to end", 10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		idle := len(s.sessions) == 3
		for _, c := range s.sessions {
			idle = idle && c.wpend.Load() == 0
			if c.permissions() != nil {
				guiSession = c
			}
		}
		return idle
	})
	s.mu.Lock()
	for _, c := range s.sessions {
		if want := c.permissions() == nil && c.windowBits < 0; c.runs() != want {
			t.Errorf("session %d: runs %v, want %v", c.id, c.runs(), want)
		}
	}
	s.mu.Unlock()
	small := []byte(`{"type":"gui.a"}`)
	speak := []byte(`{"type":"speak"}`)
	big := []byte(`{"type":"gui.big","data":{"x":"` + strings.Repeat("x", 2<<10) + `"}}`)
	last := []byte(`{"type":"gui.b"}`)
	notice := []byte(`{"type":"ovos.bus.error","data":{},"context":{}}`)
	if n := ws.PreparedFrameSize(len(big)); n <= s.hub.segCap/4 || s.hub.segCap == 0 {
		t.Fatalf("a frame of %d bytes in segments of %d: not one of its own", n, s.hub.segCap)
	}
	// Before the notice: the plain client's writer takes runs (a notice
	// in the log sends every writer frame by frame past it).
	for _, b := range [][]byte{small, speak, big} {
		if err := s.EmitRaw(ws.OpText, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range [][]byte{small, speak, big} {
		expect(t, ws.OpText, m, plain, z)
	}
	expect(t, ws.OpText, small, gui)
	expect(t, ws.OpText, big, gui)
	s.tell(guiSession, notice)
	if err := s.EmitRaw(ws.OpText, last); err != nil {
		t.Fatal(err)
	}
	expect(t, ws.OpText, last, plain, z)
	expect(t, ws.OpText, notice, gui)
	expect(t, ws.OpText, last, gui)
}
