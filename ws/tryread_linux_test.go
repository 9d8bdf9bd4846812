//go:build linux

package ws

import (
	"bytes"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// tryPair returns a server Conn on one end of a loopback TCP connection and
// a client Protocol that encodes frames for the other end.
func tryPair(t *testing.T, budget *Budget) (*Conn, net.Conn, *Protocol) {
	t.Helper()
	a, b := tcpPair(t)
	c := newConn(b, connConfig{role: RoleServer, maxMessageSize: -1, maxFrameSize: -1, budget: budget})
	if !c.canTryRead() {
		t.Fatal("canTryRead false on a TCP connection")
	}
	return c, a, NewProtocol(Config{Role: RoleClient, MaxMessageSize: -1, MaxFrameSize: -1})
}

// tryUntil calls tryNextMessage until it returns a message or an error other
// than errWouldBlock. The client's bytes are all written before, so the
// loop ends once the kernel has moved them.
func tryUntil(t *testing.T, c *Conn) (Opcode, []byte, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		op, b, err := c.tryNextMessage()
		if err != errWouldBlock {
			return op, b, err
		}
		if time.Now().After(deadline) {
			t.Fatal("no message after 10 s")
		}
	}
}

// TestTryNextMessageIdleHoldsNothing: tryNextMessage returns errWouldBlock
// at once on a silent socket and then holds neither a receive buffer nor a
// message buffer, after a small message and after a large one alike.
func TestTryNextMessageIdleHoldsNothing(t *testing.T) {
	c, a, cp := tryPair(t, nil)
	if _, _, err := c.tryNextMessage(); err != errWouldBlock {
		t.Fatalf("silent socket: %v, want errWouldBlock", err)
	}
	for _, size := range []int{10, 3 << 20} {
		payload := bytes.Repeat([]byte{'q'}, size)
		frame, err := cp.AppendMessage(nil, OpBinary, payload)
		if err != nil {
			t.Fatal(err)
		}
		go a.Write(frame)
		op, b, err := tryUntil(t, c)
		if err != nil || op != OpBinary || !bytes.Equal(b, payload) {
			t.Fatalf("size %d: op %v, %d bytes, %v", size, op, len(b), err)
		}
		if _, _, err := c.tryNextMessage(); err != errWouldBlock {
			t.Fatalf("after the message: %v, want errWouldBlock", err)
		}
		pieces := 0
		if x := c.x.Load(); x != nil {
			pieces = len(x.chunks)
		}
		if c.message() != nil || c.p.buf != nil || pieces != 0 {
			t.Fatalf("size %d: idle connection holds a message buffer of %d, a receive buffer of %d, %d pieces", size, cap(c.message()), cap(c.p.buf), pieces)
		}
	}
}

// TestTryNextMessageDrainedSocket: after a read that drained the socket
// ended on a message boundary, tryNextMessage takes the socket as empty
// without reading it (the bytes that came since wait for the next call, as
// its readiness would report them); in the middle of a message it reads.
func TestTryNextMessageDrainedSocket(t *testing.T) {
	c, a, cp := tryPair(t, nil)
	a.(*net.TCPConn).SetNoDelay(true)
	one, err := cp.AppendMessage(nil, OpText, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	two, err := cp.AppendMessage(nil, OpText, []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(one); err != nil {
		t.Fatal(err)
	}
	if _, b, err := tryUntil(t, c); err != nil || string(b) != "one" {
		t.Fatalf("first message %q, %v", b, err)
	}
	if _, err := a.Write(two); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, c, len(two))
	if _, b, err := c.tryNextMessage(); err != errWouldBlock {
		t.Fatalf("after a read that drained the socket: %q, %v, want errWouldBlock without a read", b, err)
	}
	if _, b, err := c.tryNextMessage(); err != nil || string(b) != "two" {
		t.Fatalf("the next call: %q, %v, want the message that came", b, err)
	}

	// In the middle of a frame the read is made, drained or not.
	big, err := cp.AppendMessage(nil, OpBinary, bytes.Repeat([]byte{'h'}, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(big[:500]); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, c, 500)
	for i := range 2 { // the first call takes the socket as drained ("two"), the second reads
		if _, b, err := c.tryNextMessage(); err != errWouldBlock {
			t.Fatalf("half a frame, call %d: %d bytes, %v, want errWouldBlock", i+1, len(b), err)
		}
	}
	if q := unread(t, c); q != 0 {
		t.Fatalf("%d bytes of the half frame unread", q)
	}
	if _, err := a.Write(big[500:]); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, c, len(big)-500)
	if _, b, err := c.tryNextMessage(); err != nil || len(b) != 1000 {
		t.Fatalf("the rest of the frame: %d bytes, %v, want the message", len(b), err)
	}
}

// waitReadable waits until c's socket holds at least n unread bytes.
func waitReadable(t *testing.T, c *Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for unread(t, c) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes unread after 10 s, want %d", unread(t, c), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// unread is how many bytes c's socket holds unread.
func unread(t *testing.T, c *Conn) int {
	t.Helper()
	rc, err := c.nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ferr error
	if err := rc.Control(func(fd uintptr) { n, ferr = unixFIONREAD(fd) }); err != nil || ferr != nil {
		t.Fatal(err, ferr)
	}
	return n
}

// unixFIONREAD is ioctl(FIONREAD): the bytes a socket holds unread.
func unixFIONREAD(fd uintptr) (int, error) {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0, e
	}
	return int(n), nil
}

// TestTryNextMessageSplitFrame: a frame that arrives a byte at a time is
// put together across calls, and its Budget charge stays while it is
// incomplete.
func TestTryNextMessageSplitFrame(t *testing.T) {
	budget := NewBudget(1 << 20)
	c, a, cp := tryPair(t, budget)
	a.(*net.TCPConn).SetNoDelay(true)
	payload := bytes.Repeat([]byte("split "), 20<<10) // 120 KiB: above BudgetFree, charged
	frame, err := cp.AppendMessage(nil, OpText, payload)
	if err != nil {
		t.Fatal(err)
	}
	// The header a byte at a time, then all but the last byte.
	for i := range 10 {
		if _, err := a.Write(frame[i : i+1]); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.tryNextMessage(); err != errWouldBlock && err != nil {
			t.Fatalf("after %d bytes: %v", i+1, err)
		}
	}
	if _, err := a.Write(frame[10 : len(frame)-1]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for budget.InUse() < int64(len(payload))/2 { // the charge stays between calls
		if _, _, err := c.tryNextMessage(); err != errWouldBlock {
			t.Fatalf("incomplete frame: %v, want errWouldBlock", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Budget holds %d bytes of an incomplete message of %d", budget.InUse(), len(payload))
		}
	}
	if _, err := a.Write(frame[len(frame)-1:]); err != nil {
		t.Fatal(err)
	}
	op, b, err := tryUntil(t, c)
	if err != nil || op != OpText || !bytes.Equal(b, payload) {
		t.Fatalf("op %v, %d bytes, %v", op, len(b), err)
	}
	if _, _, err := c.tryNextMessage(); err != errWouldBlock {
		t.Fatalf("after the message: %v", err)
	}
	if n := budget.InUse(); n != 0 {
		t.Fatalf("Budget holds %d bytes after the message", n)
	}
}

// TestTryNextMessageCloseAndPing: a ping read by tryNextMessage is answered,
// and a close frame is echoed and reported as a *CloseError.
func TestTryNextMessageCloseAndPing(t *testing.T) {
	c, a, cp := tryPair(t, nil)
	out := cp.AppendPing(nil, []byte("hi"))
	out, _ = cp.AppendClose(out, StatusNormalClosure, "bye")
	if _, err := a.Write(out); err != nil {
		t.Fatal(err)
	}
	_, _, err := tryUntil(t, c)
	var ce *CloseError
	if !errors.As(err, &ce) || ce.Code != StatusNormalClosure {
		t.Fatalf("got %v, want close 1000", err)
	}
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	buf := make([]byte, 256)
	for {
		n, err := a.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	cp.Receive(got)
	ev, err := cp.Next()
	if err != nil || ev.Kind != EventPong || string(ev.Payload) != "hi" {
		t.Fatalf("first frame back: %+v %v, want the pong", ev, err)
	}
	ev, err = cp.Next()
	if err != nil || ev.Kind != EventClose || ev.Code != StatusNormalClosure {
		t.Fatalf("second frame back: %+v %v, want the echoed close", ev, err)
	}
}
