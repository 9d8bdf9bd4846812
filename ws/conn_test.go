package ws

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer starts an httptest server that echoes every message back. At
// the test's end it drops the connections and waits for their handlers:
// httptest's Close does not wait for hijacked ones, and a handler still
// writing would overlap the next test (withSIMD switches what it runs).
func echoServer(t *testing.T, opts *AcceptOptions) string {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []*Conn
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wg.Add(1) // before the hijack, so before srv.Close returns
		defer wg.Done()
		c, err := Accept(w, r, opts)
		if err != nil {
			return
		}
		defer c.CloseNow()
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		echoLoop(c, false)
	}))
	t.Cleanup(func() {
		srv.Close() // no handler starts after this
		mu.Lock()
		for _, c := range conns {
			c.CloseNow()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// echoLoop echoes every message c reads until it fails, as
// examples/echoserver does: with BufferMessage when buffered (one write per
// batch of messages read), else WriteMessage.
func echoLoop(c *Conn, buffered bool) {
	var buf []byte
	ctx := context.Background()
	for {
		op, msg, err := c.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			return
		}
		buf = msg
		if buffered {
			err = c.BufferMessage(op, msg)
		} else {
			err = c.WriteMessage(ctx, op, msg)
		}
		if err != nil {
			return
		}
	}
}

func dialT(t *testing.T, url string, opts *DialOptions) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func TestConnEcho(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 125, 126, 65535, 65536, 1 << 20}
	for _, compress := range []bool{false, true} {
		url := echoServer(t, &AcceptOptions{EnableCompression: compress})
		c := dialT(t, url, &DialOptions{EnableCompression: compress})
		if compress && c.Deflate() == nil {
			t.Fatal("deflate was not negotiated")
		}
		if !compress && c.Deflate() != nil {
			t.Fatal("deflate negotiated without being offered")
		}
		ctx := context.Background()
		for _, n := range sizes {
			for _, op := range []Opcode{TextMessage, BinaryMessage} {
				msg := make([]byte, n)
				for i := range msg {
					msg[i] = 'a' + byte(rng.IntN(26))
				}
				if err := c.WriteMessage(ctx, op, msg); err != nil {
					t.Fatalf("write %d: %v", n, err)
				}
				gotOp, got, err := c.ReadMessage(ctx)
				if err != nil {
					t.Fatalf("read %d: %v", n, err)
				}
				if gotOp != op || !bytes.Equal(got, msg) {
					t.Fatalf("compress=%v size %d: echo differs (op %v)", compress, n, gotOp)
				}
			}
		}
		if err := c.Close(StatusNormalClosure, "bye"); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
}

func TestConnStreaming(t *testing.T) {
	url := echoServer(t, nil)
	c := dialT(t, url, &DialOptions{WriteBufferSize: 1000})
	ctx := context.Background()
	w, err := c.Writer(ctx, BinaryMessage)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789"), 1000) // ten frames of 1000 bytes
	for i := 0; i < len(want); i += 333 {
		if _, err := w.Write(want[i:min(i+333, len(want))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	op, r, err := c.Reader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if op != BinaryMessage || !bytes.Equal(got, want) {
		t.Fatalf("streamed echo differs: op %v, %d bytes", op, len(got))
	}
	// An unfinished reader is skipped by the next read.
	c.WriteMessage(ctx, TextMessage, []byte("first"))
	c.WriteMessage(ctx, TextMessage, []byte("second"))
	if _, r, err = c.Reader(ctx); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	r.Read(b)
	_, msg, err := c.ReadMessage(ctx)
	if err != nil || string(msg) != "second" {
		t.Fatalf("got %q, %v after a partly read message", msg, err)
	}
}

// TestConcurrentWriters checks that the Conn serialises writers itself.
func TestConcurrentWriters(t *testing.T) {
	url := echoServer(t, nil)
	c := dialT(t, url, nil)
	ctx := context.Background()
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				msg := bytes.Repeat([]byte{byte('a' + w)}, 100+i)
				if err := c.WriteMessage(ctx, TextMessage, msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := 0
	for seen < writers*each {
		_, msg, err := c.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(msg, msg[:1]) != len(msg) {
			t.Fatalf("interleaved message %q", msg)
		}
		seen++
	}
	wg.Wait()
}

func TestReadDeadlineKeepsConn(t *testing.T) {
	url := echoServer(t, nil)
	c := dialT(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _, err := c.ReadMessage(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	// The connection still works after the timed-out read.
	if err := c.WriteMessage(context.Background(), TextMessage, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := c.ReadMessage(context.Background())
	if err != nil || string(msg) != "still here" {
		t.Fatalf("after timeout: %q, %v", msg, err)
	}
}

func TestPingPong(t *testing.T) {
	url := echoServer(t, nil)
	c := dialT(t, url, nil)
	go c.ReadMessage(context.Background()) // a reader must run to see the pong
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx, []byte("hi")); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

func TestCloseHandshake(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, nil)
		if err != nil {
			return
		}
		_, _, err = c.ReadMessage(context.Background())
		got <- err
	}))
	defer srv.Close()
	c := dialT(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err := c.Close(StatusGoingAway, "done"); err != nil {
		t.Fatal(err)
	}
	var ce *CloseError
	if err := <-got; !errors.As(err, &ce) || ce.Code != StatusGoingAway || ce.Reason != "done" {
		t.Fatalf("server saw %v, want close 1001 done", err)
	}
	if err := c.WriteMessage(context.Background(), TextMessage, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v, want ErrClosed", err)
	}
}

// TestProtocolViolationClose sends an unmasked frame to a server: it must
// answer with close 1002 and drop the connection (RFC 6455 §5.1).
func TestProtocolViolationClose(t *testing.T) {
	url := echoServer(t, nil)
	c := dialT(t, url, nil)
	nc := c.NetConn()
	nc.Write([]byte{0x81, 0x02, 'h', 'i'}) // text "hi", unmasked
	nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(nc)
	if len(b) < 4 || b[0] != 0x88 || int(b[2])<<8|int(b[3]) != int(StatusProtocolError) {
		t.Fatalf("server answered % x, want a close frame with 1002", b)
	}
}

func TestHandshakeRefusals(t *testing.T) {
	url := echoServer(t, nil)
	httpURL := "http" + strings.TrimPrefix(url, "ws")
	cases := []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"plain GET", nil, http.StatusBadRequest},
		{"old version", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "8", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}, http.StatusUpgradeRequired},
		{"cross origin", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example"}, http.StatusForbidden},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest("GET", httpURL, nil)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	// The client reports a refused handshake with its status.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no websockets here", http.StatusTeapot)
	}))
	defer srv.Close()
	_, _, err := Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	var de *DialError
	if !errors.As(err, &de) || de.StatusCode != http.StatusTeapot || !strings.Contains(de.Body, "no websockets here") {
		t.Fatalf("got %v, want a DialError with 418 and the body", err)
	}
}

func TestUpgradeConnRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c, _, err := UpgradeConn(nc, &AcceptOptions{EnableCompression: true})
		if err != nil {
			return
		}
		op, msg, err := c.ReadMessage(context.Background())
		if err == nil {
			c.WriteMessage(context.Background(), op, append(msg, '!'))
		}
		c.Close(StatusNormalClosure, "")
	}()
	c := dialT(t, "ws://"+ln.Addr().String()+"/x", &DialOptions{EnableCompression: true})
	ctx := context.Background()
	c.WriteMessage(ctx, TextMessage, bytes.Repeat([]byte("hello "), 100))
	_, msg, err := c.ReadMessage(ctx)
	if err != nil || !bytes.HasSuffix(msg, []byte(" !")) || len(msg) != 601 {
		t.Fatalf("got %d bytes, %v", len(msg), err)
	}
}

func TestPreparedBatch(t *testing.T) {
	received := make(chan []string, 2)
	srvOpts := &AcceptOptions{EnableCompression: true, Compression: CompressionOptions{Threshold: -1}}
	var msgs []*PreparedMessage
	for _, s := range []string{"one", "two", strings.Repeat("three ", 50)} {
		m, err := NewPreparedMessage(TextMessage, []byte(s), srvOpts.Compression)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, srvOpts)
		if err != nil {
			return
		}
		c.WritePreparedBatch(context.Background(), msgs)
		c.Close(StatusNormalClosure, "")
	}))
	defer srv.Close()
	for _, compress := range []bool{false, true} {
		c := dialT(t, "ws"+strings.TrimPrefix(srv.URL, "http"), &DialOptions{EnableCompression: compress})
		var got []string
		for range msgs {
			_, m, err := c.ReadMessage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(m))
		}
		received <- got
		g := <-received
		for i, m := range msgs {
			if g[i] != string(m.Payload()) {
				t.Fatalf("compress=%v message %d: %q", compress, i, g[i])
			}
		}
	}
}

// TestCloseWithReadLoop closes while another goroutine runs a read loop: the
// two must not read at once (the race detector checks), and the loop must end
// with the close.
func TestCloseWithReadLoop(t *testing.T) {
	url := echoServer(t, nil)
	c := dialT(t, url, nil)
	done := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.ReadMessage(context.Background()); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := range 20 {
		c.WriteMessage(context.Background(), TextMessage, []byte{byte('a' + i)})
	}
	if err := c.Close(StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	var ce *CloseError
	if err := <-done; !errors.As(err, &ce) && !errors.Is(err, ErrClosed) {
		t.Fatalf("read loop ended with %v", err)
	}
}

// TestReadAfterCancelledRead checks that a read cancelled by its context does
// not leave a deadline behind that fails the next read.
func TestReadAfterCancelledRead(t *testing.T) {
	url := echoServer(t, nil)
	c := dialT(t, url, nil)
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		c.ReadMessage(ctx)
		cancel()
		c.WriteMessage(context.Background(), TextMessage, []byte("x"))
		if _, _, err := c.ReadMessage(context.Background()); err != nil {
			t.Fatalf("read after a cancelled read: %v", err)
		}
	}
}

func TestReadMessageIntoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector; make test runs this test without -race")
	}
	url := echoServer(t, nil)
	c := dialT(t, url, nil)
	ctx := context.Background()
	msg := bytes.Repeat([]byte("x"), 200)
	buf := make([]byte, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		c.WriteMessage(ctx, TextMessage, msg)
		_, buf, _ = c.ReadMessageInto(ctx, buf[:0])
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per echo with a background context, want 0", allocs)
	}
}

// TestDialThroughProxy dials an echo server through an HTTP CONNECT proxy
// that demands basic authentication.
func TestDialThroughProxy(t *testing.T) {
	target := echoServer(t, nil)
	var tunnels int
	var mu sync.Mutex
	proxySrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("Proxy-Authorization") != "Basic dXNlcjpzZWNyZXQ=" { // user:secret
			w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
			http.Error(w, "auth", http.StatusProxyAuthRequired)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		mu.Lock()
		tunnels++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
		down, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			up.Close()
			return
		}
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			up.Write(b)
		}
		go func() { io.Copy(up, down); up.Close() }()
		io.Copy(down, up)
		down.Close()
	}))
	defer proxySrv.Close()

	withProxy := func(userinfo string) *DialOptions {
		return &DialOptions{Proxy: func(*url.URL) (*url.URL, error) {
			return url.Parse("http://" + userinfo + strings.TrimPrefix(proxySrv.URL, "http://"))
		}}
	}
	c := dialT(t, target, withProxy("user:secret@"))
	ctx := context.Background()
	c.WriteMessage(ctx, TextMessage, []byte("via proxy"))
	if _, msg, err := c.ReadMessage(ctx); err != nil || string(msg) != "via proxy" {
		t.Fatalf("echo through proxy: %q, %v", msg, err)
	}
	mu.Lock()
	if tunnels != 1 {
		t.Fatalf("%d tunnels, want 1", tunnels)
	}
	mu.Unlock()

	_, _, err := Dial(ctx, target, withProxy("user:wrong@"))
	if err == nil || !strings.Contains(err.Error(), "407") {
		t.Fatalf("wrong password: got %v, want an error naming 407", err)
	}
}

// TestPreparedFrames: frames laid back to back by AppendPreparedMessage go
// out as one slice (WritePreparedFrames) or, adjacent, merged by
// WritePreparedBatch, and arrive as the messages they are, also on a
// connection that negotiated deflate (sent uncompressed), between a
// message compressed with context takeover and one after it.
func TestPreparedFrames(t *testing.T) {
	srvOpts := &AcceptOptions{EnableCompression: true, Compression: CompressionOptions{Threshold: -1}}
	buf := make([]byte, 0, 4096)
	var msgs []*PreparedMessage
	payloads := []string{"one", "two", strings.Repeat("three ", 50)}
	for _, s := range payloads {
		var m *PreparedMessage
		var err error
		buf, m, err = AppendPreparedMessage(buf, TextMessage, []byte(s), srvOpts.Compression)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	own := strings.Repeat("own message ", 40)
	// Each handler's outcome, checked by the test once its client has read
	// everything: the handler runs on after the upgrade, and srv.Close does
	// not wait for hijacked connections, so it must not report on its own.
	done := make(chan error, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, srvOpts)
		if err != nil {
			done <- err
			return
		}
		ctx := context.Background()
		err = errors.Join(c.WriteMessage(ctx, TextMessage, []byte(own)),
			c.WritePreparedFrames(ctx, buf),
			c.WriteMessage(ctx, TextMessage, []byte(own)),
			c.WritePreparedBatch(ctx, msgs),
			c.Close(StatusNormalClosure, ""))
		done <- err
	}))
	defer srv.Close()
	want := append(append(append([]string{own}, payloads...), own), payloads...)
	for _, compress := range []bool{false, true} {
		c := dialT(t, "ws"+strings.TrimPrefix(srv.URL, "http"), &DialOptions{EnableCompression: compress})
		for i, w := range want {
			_, m, err := c.ReadMessage(context.Background())
			if err != nil {
				t.Fatalf("compress=%v message %d: %v", compress, i, err)
			}
			if string(m) != w {
				t.Fatalf("compress=%v message %d: %q", compress, i, m)
			}
		}
		if _, _, err := c.ReadMessage(context.Background()); !isNormalClose(err) {
			t.Fatalf("compress=%v: after the messages: %v", compress, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("compress=%v: server: %v", compress, err)
		}
	}
	// A client must mask its frames: it cannot send prepared ones.
	cl := dialT(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err := cl.WritePreparedFrames(context.Background(), buf); err == nil {
		t.Fatal("a client wrote prepared frames")
	}
	for range want {
		if _, _, err := cl.ReadMessage(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := cl.ReadMessage(context.Background()); !isNormalClose(err) {
		t.Fatalf("after the messages: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// isNormalClose reports whether err is the peer's close frame with 1000.
func isNormalClose(err error) bool {
	var ce *CloseError
	return errors.As(err, &ce) && ce.Code == StatusNormalClosure
}

func TestAdjacent(t *testing.T) {
	b := make([]byte, 10)
	if !adjacent(b[:4], b[4:6]) || adjacent(b[:4], b[5:6]) || adjacent(b[:4:4], b[4:6]) || adjacent(b[:4], b[4:4]) {
		t.Fatal("adjacent")
	}
	if other := make([]byte, 2); adjacent(b[:4], other) {
		t.Fatal("another array")
	}
}

// TestClosedConnDropsReadBuffer: a Conn that is closed, by CloseNow or by
// the end of its reads, holds no receive buffer, so that a closed
// connection kept a while longer (a writer finishing) costs little.
func TestClosedConnDropsReadBuffer(t *testing.T) {
	url := echoServer(t, nil)
	ctx := context.Background()
	for _, how := range []string{"CloseNow", "read error"} {
		c := dialT(t, url, nil)
		if err := c.WriteMessage(ctx, TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ReadMessage(ctx); err != nil {
			t.Fatal(err)
		}
		if c.p.buf == nil {
			t.Fatalf("%s: no receive buffer after a read", how)
		}
		if how == "CloseNow" {
			c.CloseNow()
		} else {
			c.NetConn().Close() // the next read fails
			if _, _, err := c.ReadMessage(ctx); err == nil {
				t.Fatal("read after the socket closed succeeded")
			}
		}
		if c.p.buf != nil {
			t.Fatalf("%s: the receive buffer (%d bytes) is still held", how, cap(c.p.buf))
		}
	}
}

// TestAcceptCompressionContext: a server with Compression.Context lets the
// client's decompressor keep its window (no server_no_context_takeover in
// the answer) and writes broadcasts compressed against its context, which
// the client reads back whole; without it the answer has
// server_no_context_takeover, as before.
func TestAcceptCompressionContext(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	msgs := ovosLike(rng, 200)
	for _, window := range []int{0, 4096} {
		srvConn := make(chan *Conn, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := Accept(w, r, &AcceptOptions{EnableCompression: true, Compression: CompressionOptions{Context: window}})
			if err == nil {
				srvConn <- c
			}
		}))
		c := dialT(t, "ws"+strings.TrimPrefix(srv.URL, "http"), &DialOptions{EnableCompression: true})
		s := <-srvConn
		if got := c.Deflate().ServerNoContextTakeover; got != (window == 0) {
			t.Fatalf("context %d: server_no_context_takeover %v", window, got)
		}
		pms := make([]*PreparedMessage, len(msgs))
		for i, m := range msgs {
			pms[i], _ = NewPreparedMessage(OpText, m, CompressionOptions{})
		}
		ctx := context.Background()
		go func() {
			for i := 0; i < len(pms); i += 7 {
				s.WritePreparedBatch(ctx, pms[i:min(i+7, len(pms))])
			}
		}()
		for i, m := range msgs {
			_, p, err := c.ReadMessage(ctx)
			if err != nil || !bytes.Equal(p, m) {
				t.Fatalf("context %d, message %d: %q, %v", window, i, p, err)
			}
		}
		s.CloseNow()
		srv.Close()
	}
}
