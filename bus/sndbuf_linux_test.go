package bus

import (
	"syscall"
	"testing"
	"time"
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
