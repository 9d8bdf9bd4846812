//go:build linux

package netpoll

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ovbus/ovbus/internal/testwait"

	"github.com/ovbus/ovbus/ws/nonblock"
)

// An fdConn is what ws/nonblock calls a Socket: ws reads and writes it
// with raw system calls.
var _ nonblock.Socket = (*fdConn)(nil)

// TestFDConnSize: an fdConn (the whole of an idle connection's socket on
// the poll path, its reader's registration included) fits the 80-byte size
// class, and a kept socket's registration the 48-byte one.
func TestFDConnSize(t *testing.T) {
	if n := unsafe.Sizeof(fdConn{}); n > 80 {
		t.Errorf("an fdConn is %d bytes, more than the 80-byte size class", n)
	}
	if n := unsafe.Sizeof(kept{}); n > 48 {
		t.Errorf("a kept registration is %d bytes, more than the 48-byte size class", n)
	}
}

// tcpPair returns the two ends of a TCP connection made on ln: the
// server's side, kept in the runtime's poller, and the peer's.
func tcpPair(t *testing.T, ln net.Listener) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); peer.Close() })
	return nc.(*net.TCPConn), peer.(*net.TCPConn)
}

// fdPair returns an fdConn (the server's side, out of the runtime's
// poller) and the peer's ordinary *net.TCPConn.
func fdPair(t *testing.T, ln net.Listener) (*fdConn, *net.TCPConn) {
	t.Helper()
	nc, peer := tcpPair(t, ln)
	fc := newFDConn(nc)
	if fc == nil {
		t.Fatal("newFDConn: no hand-over")
	}
	t.Cleanup(func() { fc.Close() })
	return fc, peer
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
	testwait.Until(t, "a writer waiting for EPOLLOUT", 10*time.Second, func() bool {
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
			want := pattern(1 << 20)
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

// TestFDConnDeadlines: a read waiting on a peer that sends nothing, and a
// write waiting on a peer that reads nothing, end at their deadline with a
// timeout, whether it was set before the call or moved while it waits (as
// a server cutting a slow client does); a deadline in the past fails even
// a call that would not wait (ws's watch ends a call that way); once the
// deadline is lifted the conn works on.
func TestFDConnDeadlines(t *testing.T) {
	ln := listen(t)
	for _, side := range []string{"read", "write"} {
		for _, when := range []string{"before", "while waiting"} {
			t.Run(side+"/"+when, func(t *testing.T) {
				fc, peer := fdPair(t, ln)
				smallBuffers(fc, peer)
				set, waits := fc.SetReadDeadline, readerWaits
				call := func(b []byte) error { _, err := fc.Read(b); return err }
				if side == "write" {
					set, waits = fc.SetWriteDeadline, writerWaits
					call = func(b []byte) error { _, err := fc.Write(b); return err }
				}
				if when == "before" {
					set(time.Now().Add(50 * time.Millisecond))
				}
				errc := make(chan error, 1)
				go func() { errc <- call(pattern(8 << 20)) }()
				if when != "before" {
					waits(t, fc)
					set(time.Now().Add(10 * time.Millisecond))
				}
				if err := <-errc; !isTimeout(err) {
					t.Fatalf("%s: %v, want a timeout", side, err)
				}
				peer.Write([]byte("late")) // a read finds bytes
				set(time.Now().Add(-time.Second))
				if err := call(make([]byte, 4)); !isTimeout(err) {
					t.Fatalf("%s past its deadline: %v", side, err)
				}
				set(time.Time{})
				go io.Copy(io.Discard, peer) // a write finds room
				if err := call(make([]byte, 4)); err != nil {
					t.Fatalf("%s once the deadline is lifted: %v", side, err)
				}
			})
		}
	}
}

// isTimeout reports whether err is a deadline's, as net's are.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && errors.Is(err, os.ErrDeadlineExceeded)
}

// readerWaits waits until a Read waits for EPOLLIN on fc.
func readerWaits(t *testing.T, fc *fdConn) {
	testwait.Until(t, "a reader waiting for EPOLLIN", 10*time.Second, func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return fc.rw != nil
	})
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
	readerWaits(t, fc)
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
		nsrv, npeer := tcpPair(t, ln)
		for _, c := range []*net.TCPConn{npeer, nsrv} {
			rc, _ := c.SyscallConn()
			rc.Control(func(fd uintptr) {
				if int(fd) == oldfd {
					reused++
				}
			})
		}
		npeer.Write([]byte("ping"))
		nsrv.Write([]byte("pong"))
		wg.Wait() // the old conn's calls are over
		nsrv.CloseWrite()
		npeer.CloseWrite()
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
