package bus

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// pipeListener hands the bus's real HTTP server one end of net.Pipe per
// dial, so that raw request bytes go through exactly the path a TCP client's
// do (net/http's parser, ServeHTTP, the upgrade) without a socket.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8181} }

func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
	case <-l.done:
		server.Close()
	}
	return client
}

// panicWatch is a slog handler that remembers a log line about a panic
// (net/http recovers a handler's panic and logs it).
type panicWatch struct {
	mu    sync.Mutex
	lines []string
}

func (h *panicWatch) Enabled(context.Context, slog.Level) bool { return true }
func (h *panicWatch) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "panic") {
		h.mu.Lock()
		h.lines = append(h.lines, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *panicWatch) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *panicWatch) WithGroup(string) slog.Handler      { return h }

// FuzzHandshake feeds raw bytes to the bus's own HTTP server as one
// connection's input (the path the bus really uses is
// net/http's, not ws's own parser). Whatever the input, the server must not
// panic, must answer only with HTTP/1.x responses, and must send a 101 only
// followed by the greeting. The seed corpus is in testdata/fuzz/FuzzHandshake.
func FuzzHandshake(f *testing.F) {
	f.Add([]byte("GET /core HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
	f.Add([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
	watch := &panicWatch{}
	s, err := New(Options{Logger: slog.New(watch), HandshakeTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	l := newPipeListener()
	go s.Serve(l)
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	f.Fuzz(func(t *testing.T, input []byte) {
		input = bytes.Clone(input) // the writer may outlive this call
		c := l.dial()
		defer c.Close()
		go func() {
			c.Write(input) // blocks until read; fails once the server closed
		}()
		c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		out, _ := io.ReadAll(io.LimitReader(c, 1<<16))
		if len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.")) {
			t.Fatalf("answer is not HTTP/1.x: %q", out[:min(len(out), 80)])
		}
		if bytes.HasPrefix(out, []byte("HTTP/1.1 101 ")) {
			_, rest, ok := bytes.Cut(out, []byte("\r\n\r\n"))
			if ok && len(rest) > 2 && !bytes.HasPrefix(rest, append([]byte{0x81, byte(len(Greeting))}, Greeting...)[:min(len(rest), 2+len(Greeting))]) {
				t.Fatalf("101 not followed by the greeting: %q", rest[:min(len(rest), 80)])
			}
		}
		watch.mu.Lock()
		defer watch.mu.Unlock()
		if len(watch.lines) > 0 {
			t.Fatalf("server panicked: %q", watch.lines)
		}
	})
}

// TestHandshakeHeaderLimit: a request whose headers pass MaxHeaderBytes is
// answered 431 at once instead of being collected up to net/http's 1 MiB,
// and one under it still upgrades.
func TestHandshakeHeaderLimit(t *testing.T) {
	s, url := testServer(t, Options{})
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	go func() {
		nc.Write([]byte("GET /core HTTP/1.1\r\nHost: x\r\nX-Big: "))
		nc.Write(bytes.Repeat([]byte("a"), 1<<20)) // never finished
	}()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("no answer to a 1 MiB header: %v", err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
	// A browser-sized cookie header still gets through.
	hdr := http.Header{"Cookie": {strings.Repeat("k=v; ", 16<<10/5)}}
	dial(t, url, &ws.DialOptions{Header: hdr}).CloseNow()
}
