//go:build linux

package netpoll

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/ovbus/ovbus/ws"
	"github.com/ovbus/ovbus/ws/nonblock"
)

// hijacked serves one request on ln with HandOver's Hijack and returns
// what it gave, after the client sent req and then extra.
func hijacked(t *testing.T, ln net.Listener, req, extra string) (net.Conn, *bufio.ReadWriter, net.Conn) {
	t.Helper()
	type result struct {
		nc  net.Conn
		brw *bufio.ReadWriter
		err error
	}
	got := make(chan result, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, brw, err := HandOver(w).(http.Hijacker).Hijack()
		got <- result{nc, brw, err}
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	peer, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if _, err := io.WriteString(peer, req+extra); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.nc.Close() })
	return r.nc, r.brw, peer
}

// TestHandOver: a plain TCP socket hijacked through HandOver is the
// poller's own (an fdConn), whose reads and writes work, with what the
// client sent after its request still in the hijack's reader; a Unix socket
// is returned as net/http gave it; a writer that cannot hijack is returned
// as it is.
func TestHandOver(t *testing.T) {
	const req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	t.Run("tcp", func(t *testing.T) {
		nc, brw, peer := hijacked(t, listen(t), req, "early")
		if _, ok := nc.(*fdConn); !ok {
			t.Fatalf("a hijacked TCP socket is a %T", nc)
		}
		early := make([]byte, 5)
		if _, err := io.ReadFull(brw, early); err != nil || string(early) != "early" {
			t.Fatalf("the hijack's reader: %q, %v", early, err)
		}
		peer.Write([]byte("later"))
		b := make([]byte, 5)
		if _, err := io.ReadFull(nc, b); err != nil || string(b) != "later" {
			t.Fatalf("read from the handed-over socket: %q, %v", b, err)
		}
		if _, err := nc.Write([]byte("back")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, b[:4]); err != nil || string(b[:4]) != "back" {
			t.Fatalf("the peer read %q, %v", b[:4], err)
		}
	})
	t.Run("unix", func(t *testing.T) {
		ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
		if err != nil {
			t.Fatal(err)
		}
		nc, _, _ := hijacked(t, ln, req, "")
		if _, ok := nc.(*net.UnixConn); !ok {
			t.Fatalf("a hijacked Unix socket is a %T", nc)
		}
	})
	t.Run("no hijacker", func(t *testing.T) {
		w := httptest.NewRecorder()
		if got := HandOver(w); got != http.ResponseWriter(w) {
			t.Fatalf("HandOver(a recorder) = %T", got)
		}
	})
}

// TestHandOverWebSocket: a ws.Conn accepted through HandOver is on the
// poller's socket and can be used without waiting (nonblock.Supported),
// and a message larger than the socket holds, written while the client
// reads nothing, waits for EPOLLOUT through ws's raw writes and arrives
// whole once the client reads.
func TestHandOverWebSocket(t *testing.T) {
	msg := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	conns := make(chan *ws.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(HandOver(w), r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		conns <- c
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	client, _, err := ws.Dial(ctx, "ws"+srv.URL[len("http"):], &ws.DialOptions{MaxMessageSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseNow() })
	c := <-conns
	t.Cleanup(func() { c.CloseNow() })
	fc, ok := c.NetConn().(*fdConn)
	if !ok || !nonblock.Supported(c) {
		t.Fatalf("the accepted Conn is on a %T (supported: %v)", c.NetConn(), nonblock.Supported(c))
	}
	fc.SetWriteBuffer(4096)
	errc := make(chan error, 1)
	go func() { errc <- c.WriteMessage(ctx, ws.OpBinary, msg) }()
	writerWaits(t, fc)
	op, got, err := client.ReadMessage(ctx)
	if err != nil || op != ws.OpBinary || !bytes.Equal(got, msg) {
		t.Fatalf("the client read %v, %d bytes, %v", op, len(got), err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
