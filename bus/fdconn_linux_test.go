//go:build linux

package bus

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ovbus/ovbus/ws"
)

// fdPair returns an fdConn (the server's side, out of the runtime's
// poller) and the peer's ordinary *net.TCPConn.
func fdPair(t *testing.T, ln net.Listener) (*fdConn, *net.TCPConn) {
	t.Helper()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fc := newFDConn(nc.(*net.TCPConn))
	if fc == nil {
		t.Fatal("newFDConn: no hand-over")
	}
	t.Cleanup(func() { fc.Close(); peer.Close() })
	return fc, peer.(*net.TCPConn)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// writerWaits waits until a Write waits for EPOLLOUT on fc.
func writerWaits(t *testing.T, fc *fdConn) {
	waitFor(t, "a writer waiting for EPOLLOUT", 10*time.Second, func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return fc.ww != nil
	})
}

// smallBuffers makes the socket fill quickly. (The peer's receive buffer
// stays as it is: a tiny one makes TCP wait for its persist timer.)
func smallBuffers(fc *fdConn, peer *net.TCPConn) {
	fc.SetWriteBuffer(4096)
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// TestFDConnWriteWaitsForDrain: a write larger than the socket takes waits
// for EPOLLOUT while the peer drains slowly, through net.Conn's Write and
// through the RawConn ws uses, and every byte arrives in order.
func TestFDConnWriteWaitsForDrain(t *testing.T) {
	ln := listen(t)
	for _, how := range []string{"Write", "RawConn"} {
		t.Run(how, func(t *testing.T) {
			fc, peer := fdPair(t, ln)
			smallBuffers(fc, peer)
			want := pattern(4 << 20)
			errc := make(chan error, 1)
			go func() {
				if how == "Write" {
					_, err := fc.Write(want)
					errc <- err
					return
				}
				rc, _ := fc.SyscallConn()
				left := want
				errc <- rc.Write(func(fd uintptr) bool { // as ws's rawIO.writeOnce
					for len(left) > 0 {
						n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&left[0])), uintptr(len(left)))
						switch e {
						case 0:
							left = left[n:]
						case syscall.EAGAIN:
							return false
						default:
							return true
						}
					}
					return true
				})
			}()
			writerWaits(t, fc) // the socket is full: nothing is read yet
			got := make([]byte, 0, len(want))
			buf := make([]byte, 16<<10) // slowly: many wakes of the writer
			for len(got) < len(want) {
				n, err := peer.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, buf[:n]...)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the peer got other bytes than were written")
			}
		})
	}
}

// TestFDConnWriteDeadline: a write waiting on a peer that reads nothing
// ends at its deadline with a timeout, whether the deadline was set before
// the write or moved while it waits (a cut, session.go's onCut).
func TestFDConnWriteDeadline(t *testing.T) {
	ln := listen(t)
	for _, when := range []string{"before", "while waiting"} {
		t.Run(when, func(t *testing.T) {
			fc, peer := fdPair(t, ln)
			smallBuffers(fc, peer)
			if when == "before" {
				fc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			}
			errc := make(chan error, 1)
			go func() {
				_, err := fc.Write(pattern(8 << 20))
				errc <- err
			}()
			if when != "before" {
				writerWaits(t, fc)
				fc.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
			}
			err := <-errc
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write: %v, want a timeout", err)
			}
			// A deadline set in the past fails even a write that would
			// not wait (ws's watch ends a call that way).
			fc.SetWriteDeadline(time.Now().Add(-time.Second))
			if _, err := fc.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write past its deadline: %v", err)
			}
			// The conn is still usable once the deadline is lifted.
			fc.SetWriteDeadline(time.Time{})
			go io.Copy(io.Discard, peer)
			if _, err := fc.Write([]byte("more")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFDConnCloseWakesWaiters: Close ends a write waiting for EPOLLOUT and
// a read waiting for EPOLLIN with net.ErrClosed.
func TestFDConnCloseWakesWaiters(t *testing.T) {
	fc, peer := fdPair(t, listen(t))
	smallBuffers(fc, peer)
	werr, rerr := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := fc.Write(pattern(8 << 20))
		werr <- err
	}()
	go func() {
		_, err := fc.Read(make([]byte, 10))
		rerr <- err
	}()
	writerWaits(t, fc)
	waitFor(t, "a reader waiting for EPOLLIN", 10*time.Second, func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return fc.rw != nil
	})
	if err := fc.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []chan error{werr, rerr} {
		if err := <-c; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("got %v, want net.ErrClosed", err)
		}
	}
	if err := fc.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	// The peer sees the socket closed: the descriptor was closed.
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, peer); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
}

// TestFDConnCloseRace: Close racing a busy reader and writer never lets
// them touch the descriptor number once another socket has it: right after
// Close the test opens new sockets, which take the lowest free numbers
// (the old one's, if it was closed), and checks that nothing was read from
// or written to them but what the test itself sent.
func TestFDConnCloseRace(t *testing.T) {
	ln := listen(t)
	reused := 0
	for i := range 200 {
		fc, peer := fdPair(t, ln)
		oldfd := int(fc.fd)
		go io.Copy(io.Discard, peer) // the old writer always has room
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			x := bytes.Repeat([]byte{'X'}, 1024)
			for {
				if _, err := fc.Write(x); err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			b := make([]byte, 64)
			for {
				if _, err := fc.Read(b); err != nil {
					return
				}
			}
		}()
		peer.Write([]byte("old")) // the old reader has something to read
		for range i % 7 {
			runtime.Gosched() // vary where Close lands
		}
		fc.Close()
		// New sockets, at once: the old descriptor number, if free, goes
		// to one of them.
		npeer, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		nsrv, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []net.Conn{npeer, nsrv} {
			rc, _ := c.(*net.TCPConn).SyscallConn()
			rc.Control(func(fd uintptr) {
				if int(fd) == oldfd {
					reused++
				}
			})
		}
		npeer.Write([]byte("ping"))
		nsrv.Write([]byte("pong"))
		wg.Wait() // the old conn's calls are over
		nsrv.(*net.TCPConn).CloseWrite()
		npeer.(*net.TCPConn).CloseWrite()
		nsrv.SetReadDeadline(time.Now().Add(10 * time.Second))
		npeer.SetReadDeadline(time.Now().Add(10 * time.Second))
		if b, err := io.ReadAll(nsrv); err != nil || string(b) != "ping" {
			t.Fatalf("round %d: the new server socket read %q, %v; want \"ping\" (the old reader took some?)", i, b, err)
		}
		if b, err := io.ReadAll(npeer); err != nil || string(b) != "pong" {
			t.Fatalf("round %d: the new peer read %.20q… (%d bytes), %v; want \"pong\" (the old writer wrote to it?)", i, b, len(b), err)
		}
		nsrv.Close()
		npeer.Close()
		peer.Close()
	}
	t.Logf("the old descriptor number went to a new socket in %d of 200 rounds", reused)
}

// TestSessionHandedOver: on the poll path a session's socket is an fdConn
// from the upgrade on (on the portable path a *net.TCPConn), and a client
// that reads nothing for a while gets every message once it reads: the
// session's writer waited for EPOLLOUT through ws's raw writes.
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
	var fcs []*fdConn
	s.mu.Lock()
	for _, c := range s.sessions {
		fc, ok := c.conn.NetConn().(*fdConn)
		if ok == pollDisabled {
			t.Errorf("pollDisabled %v: the session's socket is a %T", pollDisabled, c.conn.NetConn())
		}
		if ok {
			fcs = append(fcs, fc)
		}
	}
	s.mu.Unlock()
	msg := []byte(`{"type":"x","data":{"pad":"` + strings.Repeat("p", 60<<10) + `"}}`)
	const n = 40 // 2.4 MiB: more than the sockets hold
	go func() {
		for range n {
			if a.WriteMessage(context.Background(), ws.OpText, msg) != nil {
				return
			}
		}
	}()
	if !pollDisabled {
		waitFor(t, "a session's writer waiting for EPOLLOUT", 20*time.Second, func() bool {
			for _, fc := range fcs {
				fc.mu.Lock()
				w := fc.ww != nil
				fc.mu.Unlock()
				if w {
					return true
				}
			}
			return false
		})
	}
	go func() { // a reads its own echoes
		for range n {
			if _, _, err := a.ReadMessage(context.Background()); err != nil {
				return
			}
		}
	}()
	for i := range n {
		if op, got := read(t, b); op != ws.OpText || !bytes.Equal(got, msg) {
			t.Fatalf("message %d: %v, %d bytes", i, op, len(got))
		}
	}
}
