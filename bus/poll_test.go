package bus

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ovbus/ovbus/ws"
	"github.com/ovbus/ovbus/ws/nonblock"
)

// TestSessionSize: a session, its follower and its registration with the
// poller included, fits the 288-byte size class, so that an idle
// connection's heap does not grow (TestIdleSessionHeap counts the whole).
func TestSessionSize(t *testing.T) {
	if n := unsafe.Sizeof(session{}); n > 288 {
		t.Fatalf("a session is %d bytes, more than the 288-byte size class", n)
	}
}

// TestSessionHandedOver: on the poll path a session's socket is the
// poller's own from the upgrade on (a *net.TCPConn on the portable path),
// and a client that reads nothing until more than its socket holds has
// been relayed gets every message once it reads: its writer waited for the
// socket to drain (on the poll path, for EPOLLOUT through ws's raw writes;
// bus/internal/netpoll's tests watch the wait itself).
func TestSessionHandedOver(t *testing.T) {
	s, url := testServer(t, Options{MaxMsgSize: 1 << 20})
	a := dial(t, url, nil)
	b := dial(t, url, &ws.DialOptions{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			nc.(*net.TCPConn).SetReadBuffer(64 << 10) // fills soon
		}
		return nc, err
	}})
	waitFor(t, "the sessions", 5*time.Second, func() bool { return s.Clients() == 2 })
	s.mu.Lock()
	for _, c := range s.sessions {
		nc := c.conn.NetConn()
		_, own := nc.(nonblock.Socket)
		if _, tcp := nc.(*net.TCPConn); own == pollDisabled || tcp != pollDisabled {
			t.Errorf("pollDisabled %v: the session's socket is a %T", pollDisabled, nc)
		}
	}
	s.mu.Unlock()
	msg := []byte(`{"type":"x","data":{"pad":"` + strings.Repeat("p", 60<<10) + `"}}`)
	const n = 40 // 2.4 MiB: more than the sockets hold
	go func() {  // a reads its own echoes
		for range n {
			if _, _, err := a.ReadMessage(context.Background()); err != nil {
				return
			}
		}
	}()
	for range n {
		send(t, a, ws.OpText, msg)
	}
	waitFor(t, "every message relayed", 20*time.Second, func() bool {
		return s.Sessions()[0].FramesIn == n // a's: the first to connect
	})
	for i := range n {
		if op, got := read(t, b); op != ws.OpText || !bytes.Equal(got, msg) {
			t.Fatalf("message %d: %v, %d bytes", i, op, len(got))
		}
	}
}
