package bus

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/internal/testsock"
	"github.com/ovbus/ovbus/ws"
)

// TestSendBufferSet: each client's socket gets
// send_buffer as its kernel send buffer (Linux reports twice what was set).
func TestSendBufferSet(t *testing.T) {
	const n = 128 << 10
	s, url := testServer(t, Options{SendBuffer: n})
	dial(t, url, nil)
	waitFor(t, "the session", 5*time.Second, func() bool { return s.Clients() == 1 })
	s.mu.Lock()
	c := s.sessions[0]
	s.mu.Unlock()
	rc, err := c.conn.NetConn().(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	rc.Control(func(fd uintptr) { got, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) })
	if err != nil {
		t.Fatal(err)
	}
	if got != 2*n {
		t.Fatalf("SO_SNDBUF = %d, want %d (2 × %d)", got, 2*n, n)
	}
}

// TestBoundCutsABlockedWrite: a client over its bound whose writer is
// blocked on its socket is cut a tenth of write_timeout later, not at
// write_timeout, without a close frame (its write was cut part way), and
// counted. The sockets hold less than one frame, so the writer blocks in
// the first one: once bytes of it reach the client, the writer is past the
// point where a cut closes with 1008 (cut while fetching), and only then
// does the queue pass its bound.
func TestBoundCutsABlockedWrite(t *testing.T) {
	const wt = 30 * time.Second
	s, url := testServer(t, Options{MaxMsgSize: 1 << 20, MaxQueueBytes: 4 << 20, WriteTimeout: wt, SendBuffer: 8 << 10})
	stalled := dialStalled(t, url)
	payload := bytes.Repeat([]byte("b"), 256<<10) // more than the client's 128 KiB and the server's 16 KiB hold
	start := time.Now()
	s.Publish(ws.OpBinary, payload, "")
	waitFor(t, "the first frame's bytes at the client", 10*time.Second, func() bool { return testsock.Unread(stalled.NetConn()) > 0 })
	for range 63 { // 16 MiB in all through Publish: no sender to pace, no stall check
		s.Publish(ws.OpBinary, payload, "")
	}
	ci := closeOf(t, s, stalled.LocalAddr().String())
	if took := time.Since(start); took > wt/2 {
		t.Fatalf("cut after %v", took)
	}
	if ci.Reason != reasonSlowConsumer || ci.Detail != "queue limit, write blocked" || ci.Code != 0 {
		t.Fatalf("closed with %+v", ci)
	}
}
