//go:build linux

package ws

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// newRawIO returns the raw I/O of nc, a plain socket.
func newRawIO(t *testing.T, nc net.Conn) *rawIO {
	t.Helper()
	r := new(rawIO)
	if !r.init(nc) {
		t.Fatal("no raw I/O for a TCP connection")
	}
	return r
}

// TestRawIOStream writes batches that fill the socket buffers (raw writes
// that hit EAGAIN and partial writev) to a slow reader, and checks every
// byte, with raw reads on the other end.
func TestRawIOStream(t *testing.T) {
	a, b := tcpPair(t)
	w, r := newRawIO(t, a), newRawIO(t, b)
	a.(*net.TCPConn).SetWriteBuffer(64 << 10)
	b.(*net.TCPConn).SetReadBuffer(64 << 10)
	const total = 2 << 20
	pattern := func(off int) byte { return byte(off*7 + off>>11) }
	errc := make(chan error, 1)
	go func() {
		off := 0
		bufs := make([][]byte, 0, 1100)
		for off < total {
			bufs = bufs[:0]
			n := 0
			sizes := []int{1, 700, 3000, 0, 5, 9000}
			if off%3 == 0 {
				// More buffers than one writev takes.
				for range 1030 {
					sizes = append(sizes, 1)
				}
			}
			for _, s := range sizes {
				s = min(s, total-off-n)
				p := make([]byte, s)
				for i := range p {
					p[i] = pattern(off + n + i)
				}
				bufs = append(bufs, p)
				n += s
			}
			var err error
			if len(bufs) == 1 || off%5 == 1 {
				all := bytes.Join(bufs, nil)
				err = w.write(a, all)
			} else {
				err = w.writeBuffers(a, bufs)
			}
			if err != nil {
				errc <- err
				return
			}
			off += n
		}
		errc <- nil
	}()
	buf := make([]byte, 100<<10)
	got := 0
	for got < total {
		if got%(256<<10) < 5000 {
			time.Sleep(time.Millisecond) // let the writer block
		}
		n, err := r.read(b, buf[:1+got%len(buf)])
		if err != nil {
			t.Fatalf("read after %d bytes: %v", got, err)
		}
		for i := range n {
			if buf[i] != pattern(got+i) {
				t.Fatalf("byte %d: %d, want %d", got+i, buf[i], pattern(got+i))
			}
		}
		got += n
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	a.Close()
	if n, err := r.read(b, buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want io.EOF", n, err)
	}
}

func TestRawIOErrors(t *testing.T) {
	a, b := tcpPair(t)
	w, r := newRawIO(t, a), newRawIO(t, b)
	// A write deadline while the peer does not read.
	a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	chunk := make([]byte, 4<<10)
	var err error
	for range 100000 {
		if err = w.write(a, chunk); err != nil {
			break
		}
	}
	var oe *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("write past the deadline: %v, want a write timeout", err)
	}
	// A read deadline.
	b.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := r.read(b, make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("read past the deadline: %v, want a read timeout", err)
	}
	// A closed connection.
	b.Close()
	if _, err := r.read(b, make([]byte, 10)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
	var none rawIO
	if none.init(nil) {
		t.Fatal("raw I/O for a nil connection")
	}
}
