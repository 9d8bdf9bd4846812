package bus

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// testServer starts a bus on 127.0.0.1:0 and shuts it down at the end.
func testServer(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	return testServerSet(t, opts, nil)
}

// testServerSet is testServer that calls set, if not nil, before Start: for
// the fields the serving goroutines read without a lock.
func testServerSet(t testing.TB, opts Options, set func(*Server)) (*Server, string) {
	t.Helper()
	opts.Addr = "127.0.0.1:0"
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(s)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, "ws://" + s.Addr().String() + s.opts.Route
}

// dial connects to the bus and checks the greeting.
func dial(t testing.TB, url string, opts *ws.DialOptions) *ws.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := ws.Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	op, b := read(t, c)
	if op != ws.OpText || string(b) != Greeting {
		t.Fatalf("greeting: got %v %q", op, b)
	}
	return c
}

func read(t testing.TB, c *ws.Conn) (ws.Opcode, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	op, b, err := c.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return op, b
}

func send(t testing.TB, c *ws.Conn, op ws.Opcode, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WriteMessage(ctx, op, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// expect reads one message from each client and compares it.
func expect(t testing.TB, op ws.Opcode, want []byte, cs ...*ws.Conn) {
	t.Helper()
	for i, c := range cs {
		gop, got := read(t, c)
		if gop != op || !bytes.Equal(got, want) {
			t.Fatalf("client %d: got %v %q, want %v %q", i, gop, got, op, want)
		}
	}
}

func TestGreetingAndRelayToAll(t *testing.T) {
	_, url := testServer(t, Options{})
	a, b, c := dial(t, url, nil), dial(t, url, nil), dial(t, url, nil)
	msg := []byte(`{"type":"speak","data":{"utterance":"hi"},"context":{"session":{"session_id":"default"}}}`)
	send(t, a, ws.OpText, msg)
	expect(t, ws.OpText, msg, a, b, c)
}

func TestTotalOrder(t *testing.T) {
	_, url := testServer(t, Options{})
	const n = 300
	clients := []*ws.Conn{dial(t, url, nil), dial(t, url, nil), dial(t, url, nil)}
	got := make([][]string, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for len(got[i]) < 2*n {
				_, b, err := c.ReadMessage(ctx)
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				got[i] = append(got[i], string(b))
			}
		}()
	}
	for s, c := range clients[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				msg := fmt.Sprintf(`{"type":"order","data":{"sender":%d,"k":%d},"context":{}}`, s, k)
				if err := c.WriteMessage(context.Background(), ws.OpText, []byte(msg)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := 1; i < len(got); i++ {
		for k := range got[0] {
			if got[i][k] != got[0][k] {
				t.Fatalf("client %d differs from client 0 at %d: %s vs %s", i, k, got[i][k], got[0][k])
			}
		}
	}
	next := [2]int{}
	for _, m := range got[0] {
		var s, k int
		fmt.Sscanf(m, `{"type":"order","data":{"sender":%d,"k":%d}`, &s, &k)
		if k != next[s] {
			t.Fatalf("sender %d: got message %d, want %d", s, k, next[s])
		}
		next[s]++
	}
}

func TestBinaryAndPassThrough(t *testing.T) {
	_, url := testServer(t, Options{})
	a, b := dial(t, url, nil), dial(t, url, nil)
	bin := []byte{0, 1, 2, 0xff, 'x'}
	send(t, a, ws.OpBinary, bin)
	expect(t, ws.OpBinary, bin, a, b)
	for _, m := range []string{
		"hello, not json",
		`[1, 2]`, `"hello"`, `42`, `true`, `null`,
		`{"data":{},"context":{}}`,
		`{"ciphertext":"3q2+7w==","tag":"abcd","nonce":"1234"}`,
		`{ "type" : "spaced",  "data": {"x": 1.50},"context":{"session": {"session_id":"s1"}} }`,
		`{"type":"x","context":{"session":null}}`,
		`{"type":"x","data":{"session":"not the context"}}`,
		`{"type":"x","context":"not an object","session":5}`,
		`{"type":"x","context":{"session":5}`,               // not JSON: relayed
		`{"type":"x","context":{"session":5},"context":{}}`, // the last context wins
	} {
		send(t, a, ws.OpText, []byte(m))
		expect(t, ws.OpText, []byte(m), a, b)
	}
}

func TestMalformedCarrier(t *testing.T) {
	_, url := testServer(t, Options{})
	a, b := dial(t, url, nil), dial(t, url, nil)
	cases := []struct{ in, out string }{
		{`{"type":"ovos.utterance.handle","data":{"utterances":["hello"]},"context":{"session":"not-an-object","utterance_id":"u-1"}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":"ovos.utterance.handle","reason":"malformed_carrier"},"context":{"utterance_id":"u-1"}}`},
		{`{"type":"t","data":{},"context":{"session":42,"utterance_id":""}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":"t","reason":"malformed_carrier"},"context":{}}`},
		{`{"data":{},"context":{"session":[1, 2],"utterance_id":7}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":null,"reason":"malformed_carrier"},"context":{"utterance_id":7}}`},
		{`{"type":"esc","context":{"sess\u0069on":false}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":"esc","reason":"malformed_carrier"},"context":{}}`},
	}
	for _, tc := range cases {
		send(t, a, ws.OpText, []byte(tc.in))
		expect(t, ws.OpText, []byte(tc.out), a, b)
	}
	// The connection stays open and relays as before.
	ok := []byte(`{"type":"ping","data":{},"context":{}}`)
	send(t, a, ws.OpText, ok)
	expect(t, ws.OpText, ok, a, b)
}

func TestOversize(t *testing.T) {
	_, url := testServer(t, Options{MaxMsgSize: 1024})
	a, b := dial(t, url, nil), dial(t, url, nil)
	send(t, a, ws.OpText, bytes.Repeat([]byte("x"), 2000))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := a.ReadMessage(ctx)
	var ce *ws.CloseError
	if !errors.As(err, &ce) || ce.Code != ws.StatusMessageTooBig {
		t.Fatalf("sender: got %v, want close 1009", err)
	}
	// Nothing was relayed; the others carry on.
	ok := []byte(`{"type":"after"}`)
	send(t, b, ws.OpText, ok)
	expect(t, ws.OpText, ok, b)
}

func TestSlowConsumer(t *testing.T) { testSlowConsumer(t, 0) }

// testSlowConsumer runs TestSlowConsumer with more clients that read as
// fast as they can, each checked like the fast one. Those take longer to
// serve on a loaded machine: patience scales with them.
func testSlowConsumer(t *testing.T, more int) {
	patience := time.Duration(1+more/8) * 20 * time.Second
	// A cut client's blocked write gets a tenth of write_timeout to finish
	// (then its 1008 goes out): the slow client starts reading well within.
	s, url := testServer(t, Options{MaxMsgSize: 1 << 20, MaxQueueBytes: 1 << 20, MaxQueueMessages: 10000, WriteTimeout: 3 * patience})
	fast := dial(t, url, nil)
	readers := []*ws.Conn{fast}
	for range more {
		readers = append(readers, dial(t, url, nil))
	}
	slow := dial(t, url, &ws.DialOptions{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			// A fixed buffer (no autotuning up to 32 MiB) makes the bus's
			// writes block soon; it stays over the loopback MSS, so the
			// window reopens at once when the client reads.
			nc.(*net.TCPConn).SetReadBuffer(256 << 10)
		}
		return nc, err
	}})
	// The sender is the fast client; it keeps at most 16 messages (256 KiB)
	// in flight to each reader, well within the bounds.
	const n, size, window = 512, 16 << 10, 16
	done := make(chan error, len(readers))
	received := make([]atomic.Int64, len(readers))
	for k, r := range readers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			for i := range n {
				_, b, err := r.ReadMessage(ctx)
				if err != nil {
					done <- err
					return
				}
				if want := fmt.Sprintf("%06d", i); string(b[:6]) != want || len(b) != size {
					done <- fmt.Errorf("fast client %d: message %d is %q... (%d bytes)", k, i, b[:6], len(b))
					return
				}
				received[k].Add(1)
			}
			done <- nil
		}()
	}
	least := func() int64 {
		m := received[0].Load()
		for k := range received {
			m = min(m, received[k].Load())
		}
		return m
	}
	payload := bytes.Repeat([]byte("y"), size)
	for i := range n {
		for int64(i)-least() > window {
			select {
			case err := <-done: // a reader ended early
				t.Fatalf("before message %d was sent: %v", i, err)
			default:
			}
			time.Sleep(100 * time.Microsecond)
		}
		copy(payload, fmt.Sprintf("%06d", i))
		send(t, fast, ws.OpText, payload)
	}
	for range readers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// The slow client now reads what it was sent, then the close.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := 0
	for {
		_, _, err := slow.ReadMessage(ctx)
		if err == nil {
			got++
			continue
		}
		var ce *ws.CloseError
		if !errors.As(err, &ce) || ce.Code != ws.StatusPolicyViolation || ce.Reason != "slow consumer" {
			t.Fatalf("slow client after %d messages: %v, want close 1008 slow consumer", got, err)
		}
		break
	}
	if got >= n {
		t.Fatalf("slow client got all %d messages", got)
	}
	if s.Clients() != len(readers) {
		t.Fatalf("clients = %d, want %d", s.Clients(), len(readers))
	}
	if m := scrape(t, s); !strings.Contains(m, `ovbus_closes_total{reason="slow_consumer"} 1`) {
		t.Fatalf("slow consumer not counted:\n%s", grep(m, "closes"))
	}
	// The fast clients carry on.
	ok := []byte(`{"type":"still.here"}`)
	send(t, fast, ws.OpText, ok)
	expect(t, ws.OpText, ok, readers...)
}

// A client that sends a lot and reads nothing for a while, within the
// bounds, is served (the OVOS benchmark's sender does that).
func TestSenderThatDoesNotRead(t *testing.T) {
	_, url := testServer(t, Options{})
	sender, other := dial(t, url, nil), dial(t, url, nil)
	const n = 2000
	go func() {
		for i := range n {
			sender.WriteMessage(context.Background(), ws.OpText, fmt.Appendf(nil, `{"type":"bench","data":{"i":%d}}`, i))
		}
	}()
	for range n {
		read(t, other)
	}
	time.Sleep(100 * time.Millisecond)
	for range n {
		read(t, sender)
	}
}

func scrape(t testing.TB, s *Server) string {
	t.Helper()
	rec := &bytes.Buffer{}
	w := &recorder{h: http.Header{}, body: rec}
	s.MetricsHandler().ServeHTTP(w, httpGet(t, "/metrics"))
	return rec.String()
}

type recorder struct {
	h    http.Header
	body *bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(int)             {}

func httpGet(t testing.TB, path string) *http.Request {
	r, err := http.NewRequest("GET", "http://x"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestHealthAnd404(t *testing.T) {
	s, _ := testServer(t, Options{})
	base := "http://" + s.Addr().String()
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{{"/health", 200, "ok"}, {"/nope", 404, ""}, {"/core/x", 404, ""}} { // a bus without tokens has no token paths
		resp, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(body) != tc.body) {
			t.Fatalf("%s: %d %q", tc.path, resp.StatusCode, body)
		}
	}
	// A WebSocket handshake on another path is refused too.
	_, _, err := ws.Dial(context.Background(), "ws://"+s.Addr().String()+"/other", nil)
	var de *ws.DialError
	if !errors.As(err, &de) {
		t.Fatalf("dial /other: %v", err)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	s, url := testServer(t, Options{MetricsAddress: "127.0.0.1:0"})
	a := dial(t, url, nil)
	send(t, a, ws.OpText, []byte(`{"type":"m"}`))
	read(t, a)
	send(t, a, ws.OpText, []byte(`{"type":"m","context":{"session":1}}`))
	read(t, a)
	// A writer counts its frames once its write has returned, which may be
	// after the client has read them: scrape until the second is counted.
	var m string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m = string(body)
		if strings.Contains(m, "ovbus_frames_sent_total 2") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{
		"ovbus_connections 1",
		"ovbus_connections_total 1",
		"ovbus_frames_received_total 2",
		"ovbus_frames_sent_total 2",
		"ovbus_bytes_received_total",
		"ovbus_bytes_sent_total",
		"ovbus_relay_latency_seconds_bucket",
		`ovbus_rejected_total{reason="malformed_carrier"} 1`,
		`ovbus_closes_total{reason="slow_consumer"} 0`,
		"go_gc_heap_live_bytes ",
		"go_memory_classes_heap_objects_bytes ",
		"go_memory_classes_metadata_other_bytes ",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestShutdownDropsWithoutCloseFrame(t *testing.T) {
	for _, closeFrames := range []bool{false, true} {
		t.Run(fmt.Sprint("close_frames=", closeFrames), func(t *testing.T) {
			s, url := testServer(t, Options{CloseFramesOnShutdown: closeFrames})
			a := dial(t, url, nil)
			msg := []byte(`{"type":"last"}`)
			send(t, a, ws.OpText, msg)
			expect(t, ws.OpText, msg, a)
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, _, err := a.ReadMessage(ctx)
				errc <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			err := <-errc
			var ce *ws.CloseError
			if closeFrames {
				if !errors.As(err, &ce) || ce.Code != ws.StatusGoingAway {
					t.Fatalf("got %v, want close 1001", err)
				}
				return
			}
			if errors.As(err, &ce) && ce.Code != ws.StatusAbnormalClosure {
				t.Fatalf("got a close frame %v, want a dropped connection", err)
			}
			if err == nil {
				t.Fatal("read succeeded after shutdown")
			}
			if _, err := http.Get("http://" + s.Addr().String() + "/health"); err == nil {
				t.Fatal("still accepting after shutdown")
			}
		})
	}
}

func TestInProcess(t *testing.T) {
	s, url := testServer(t, Options{})
	got := make(chan message.Message, 10)
	all := make(chan message.Message, 10)
	frames := make(chan Frame, 10)
	off := s.On("speak", func(m message.Message) { got <- m })
	s.On("*", func(m message.Message) { all <- m })
	s.OnFrame(func(f Frame) { frames <- f })
	a := dial(t, url, nil)
	msg := []byte(`{"type":"speak","data":{"utterance":"hello"},"context":{"lang":"en-US"}}`)
	send(t, a, ws.OpText, msg)
	expect(t, ws.OpText, msg, a)
	select {
	case m := <-got:
		if m.Type != "speak" || m.Data["utterance"] != "hello" || m.Context["lang"] != "en-US" {
			t.Fatalf("handler got %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called")
	}
	if m := <-all; m.Type != "speak" {
		t.Fatalf("* handler got %+v", m)
	}
	if f := <-frames; !bytes.Equal(f.Payload, msg) || f.Op != ws.OpText {
		t.Fatalf("frame handler got %+v", f)
	}
	// Emit reaches socket clients and handlers.
	if err := s.Emit(message.Message{Type: "speak", Data: map[string]any{"utterance": "<b>&"}}); err != nil {
		t.Fatal(err)
	}
	expect(t, ws.OpText, []byte(`{"type":"speak","data":{"utterance":"<b>&"},"context":{}}`), a)
	if m := <-got; m.Data["utterance"] != "<b>&" {
		t.Fatalf("handler got %+v", m)
	}
	<-all
	<-frames
	off()
	off() // twice is harmless
	// A frame that is not an OVOS message reaches the frame handlers only.
	send(t, a, ws.OpText, []byte("not json"))
	read(t, a)
	if f := <-frames; string(f.Payload) != "not json" || f.Type() != "" {
		t.Fatalf("frame handler got %+v", f)
	}
	s.Emit(message.Message{Type: "speak"})
	read(t, a)
	<-frames
	if m := <-all; m.Type != "speak" {
		t.Fatalf("* handler got %+v, want the speak after the non-message", m)
	}
	select {
	case m := <-got:
		t.Fatalf("handler called after off: %+v", m)
	default:
	}
}

func TestInProcessHandlerPanics(t *testing.T) {
	var logs syncBuffer
	s, _ := testServer(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	got := make(chan string, 2)
	s.On("boom", func(m message.Message) {
		if m.Data["n"] == 1.0 {
			panic("handler bug")
		}
		got <- "survived"
	})
	s.Emit(message.Message{Type: "boom", Data: map[string]any{"n": 1}})
	s.Emit(message.Message{Type: "boom", Data: map[string]any{"n": 2}})
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not get the message after its panic")
	}
	if l := logs.String(); !strings.Contains(l, "In-process handler panicked") || !strings.Contains(l, "handler bug") {
		t.Fatalf("log: %s", l)
	}
}

func TestDeflateClientsMixedWithPlain(t *testing.T) {
	_, url := testServer(t, Options{})
	z := dial(t, url, &ws.DialOptions{EnableCompression: true})
	if z.Deflate() == nil {
		t.Fatal("permessage-deflate not negotiated")
	}
	p := dial(t, url, nil)
	for _, m := range [][]byte{
		[]byte(`{"type":"small"}`),
		[]byte(`{"type":"big","data":{"text":"` + strings.Repeat("compress me ", 200) + `"}}`),
	} {
		send(t, p, ws.OpText, m)
		expect(t, ws.OpText, m, z, p)
		send(t, z, ws.OpText, m)
		expect(t, ws.OpText, m, z, p)
	}
}

func TestCompressionDisabled(t *testing.T) {
	_, url := testServer(t, Options{DisableCompression: true})
	z := dial(t, url, &ws.DialOptions{EnableCompression: true})
	if z.Deflate() != nil {
		t.Fatal("permessage-deflate negotiated although disabled")
	}
}

func TestAuthAndPermissions(t *testing.T) {
	_, url := testServer(t, Options{Auth: Auth{Required: true, Tokens: map[string]Permissions{
		"admin": {Name: "admin"},
		"gui":   {Name: "gui", Emit: []string{"gui.*"}, Receive: []string{"gui.*", "ovos.session.rejected"}},
	}}})
	for _, u := range []string{url, url + "?token=wrong"} {
		_, _, err := ws.Dial(context.Background(), u, nil)
		var de *ws.DialError
		if !errors.As(err, &de) {
			t.Fatalf("dial %s: %v", u, err)
		}
	}
	admin := dial(t, url+"?token=admin", nil)
	gui := dial(t, url, &ws.DialOptions{Header: http.Header{"Authorization": {"Bearer gui"}}})

	// gui may not emit speak: dropped for everyone, and gui alone is told,
	// whatever its receive rule. gui.* passes and both receive it, as the
	// next message.
	send(t, gui, ws.OpText, []byte(`{"type":"speak"}`))
	expect(t, ws.OpText, []byte(`{"type":"ovos.bus.error","data":{"error":"not allowed","msg_type":"speak"},"context":{}}`), gui)
	m := []byte(`{"type":"gui.value.set"}`)
	send(t, gui, ws.OpText, m)
	expect(t, ws.OpText, m, admin, gui)
	// admin's speak is not delivered to gui.
	send(t, admin, ws.OpText, []byte(`{"type":"speak"}`))
	expect(t, ws.OpText, []byte(`{"type":"speak"}`), admin)
	send(t, admin, ws.OpText, m)
	expect(t, ws.OpText, m, admin, gui)
}

func TestOrigins(t *testing.T) {
	_, url := testServer(t, Options{AllowedOrigins: []string{"http://localhost:*"}})
	dial(t, url, &ws.DialOptions{Header: http.Header{"Origin": {"http://localhost:8080"}}})
	dial(t, url, nil) // no Origin: not a browser
	_, _, err := ws.Dial(context.Background(), url, &ws.DialOptions{Header: http.Header{"Origin": {"http://evil.example"}}})
	var de *ws.DialError
	if !errors.As(err, &de) {
		t.Fatalf("dial with a foreign origin: %v", err)
	}
	// By default every origin is accepted, as Tornado does.
	_, url2 := testServer(t, Options{})
	dial(t, url2, &ws.DialOptions{Header: http.Header{"Origin": {"http://evil.example"}}})
}

func TestApply(t *testing.T) {
	s, url := testServer(t, Options{})
	changed, restart, err := s.Apply(Options{Addr: "127.0.0.1:1", Filter: true, MaxQueueMessages: 1 << 18, MaxMsgSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(changed, ",") != "filter,max_msg_size,max_queue_messages" || strings.Join(restart, ",") != "address" {
		t.Fatalf("changed %v, restart %v", changed, restart)
	}
	// The grown ring and the lowered size limit are in force.
	a := dial(t, url, nil)
	for i := range 100 {
		m := fmt.Appendf(nil, `{"i":%d}`, i)
		send(t, a, ws.OpText, m)
		expect(t, ws.OpText, m, a)
	}
	send(t, a, ws.OpText, bytes.Repeat([]byte("z"), 200))
	_, _, err = a.ReadMessage(context.Background())
	var ce *ws.CloseError
	if !errors.As(err, &ce) || ce.Code != ws.StatusMessageTooBig {
		t.Fatalf("got %v, want 1009", err)
	}
}

func TestFilterLog(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, url := testServer(t, Options{Filter: true, Logger: logger})
	a := dial(t, url, nil)
	for _, m := range []string{
		`{"type":"gui.status.request","data":{},"context":{}}`,
		`{"type":"speak","data":{},"context":{"source":"audio","destination":["skills","it's"],"session":{"session_id":"default","active":true,"n":null}}}`,
		`{"type":"plain","data":{}}`,
	} {
		send(t, a, ws.OpText, []byte(m))
		read(t, a)
	}
	out := buf.String()
	if strings.Contains(out, "gui.status.request source") {
		t.Errorf("filtered type logged:\n%s", out)
	}
	for _, want := range []string{
		`speak source: audio destination: ['skills', \"it's\"]\nSESSION: {'session_id': 'default', 'active': True, 'n': None}`,
		`plain source: [] destination: []\nSESSION: None`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestFragmentedMessageRelayedWhole(t *testing.T) {
	_, url := testServer(t, Options{})
	// A small write buffer makes the streaming writer send many frames.
	a := dial(t, url, &ws.DialOptions{WriteBufferSize: 16})
	b := dial(t, url, nil)
	w, err := a.Writer(context.Background(), ws.OpText)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range 20 {
		part := fmt.Appendf(nil, `{"part":%d,"pad":"................"}`, i)
		want = append(want, part...)
		if _, err := w.Write(part); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	expect(t, ws.OpText, want, a, b)
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	s, _ := testServer(t, Options{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}})
	url := "wss://" + s.Addr().String() + "/core"
	a := dial(t, url, &ws.DialOptions{TLSConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}})
	z := dial(t, url, &ws.DialOptions{TLSConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}, EnableCompression: true})
	for _, m := range [][]byte{[]byte(`{"type":"tls"}`), bytes.Repeat([]byte("abc"), 5000)} {
		send(t, a, ws.OpText, m)
		expect(t, ws.OpText, m, a, z)
	}
	// Plain ws:// on the same port is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, _, err := ws.Dial(ctx, "ws://"+s.Addr().String()+"/core", nil); err == nil {
		c.CloseNow()
		t.Fatal("plain ws:// accepted on a TLS bus")
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestIdleChurn: clients that connect, get the greeting and leave on a
// quiet bus leave no sleeper and no follower behind.
func TestIdleChurn(t *testing.T) {
	s, url := testServer(t, Options{})
	for range 200 {
		c := dial(t, url, nil)
		c.CloseNow()
	}
	waitFor(t, "every client to be gone", 10*time.Second, func() bool { return s.Clients() == 0 })
	waitFor(t, "the sleepers to be released", 10*time.Second, func() bool {
		s.hub.mu.Lock()
		defer s.hub.mu.Unlock()
		return len(s.hub.sleepers) == 0 && len(s.hub.followers) == 0
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sessions) != 0 || len(s.closes) > recentCloses {
		t.Fatalf("%d sessions, %d closes kept after the churn", len(s.sessions), len(s.closes))
	}
}

// TestIdleChurnAfterPeak: after more than shrinkMin clients were connected
// at once and all left, the server's sessions and the hub's followers and
// sleepers are reallocated below their peak, so a
// quiet bus keeps what its connections need, not what its busiest moment
// needed. Not timing-based: it waits for the clients to
// be gone, then looks.
func TestIdleChurnAfterPeak(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1 100 connections")
	}
	s, url := testServer(t, Options{})
	const peak = shrinkMin + 76
	cs := make([]*ws.Conn, peak)
	for i := range cs {
		cs[i] = dial(t, url, nil)
	}
	if n := s.Clients(); n != peak {
		t.Fatalf("%d clients, want %d", n, peak)
	}
	for _, c := range cs {
		c.CloseNow()
	}
	waitFor(t, "every client to be gone", 30*time.Second, func() bool { return s.Clients() == 0 })
	s.mu.Lock()
	n, p := len(s.sessions), cap(s.sessions)
	s.mu.Unlock()
	s.hub.mu.Lock()
	nf, ns, cf, csl := len(s.hub.followers), len(s.hub.sleepers), cap(s.hub.followers), cap(s.hub.sleepers)
	s.hub.mu.Unlock()
	if n != 0 || nf != 0 || ns != 0 {
		t.Fatalf("%d sessions, %d followers, %d sleepers left", n, nf, ns)
	}
	if p >= shrinkMin || cf >= shrinkMin || csl >= shrinkMin {
		t.Fatalf("after a peak of %d: sessions capacity %d, followers capacity %d, sleepers %d: not shrunk", peak, p, cf, csl)
	}
}

// dialStalled connects a client that never reads, with a small fixed
// receive buffer, so that the bus's writes to it block soon.
func dialStalled(t testing.TB, url string) *ws.Conn {
	t.Helper()
	return dial(t, url, &ws.DialOptions{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			nc.(*net.TCPConn).SetReadBuffer(64 << 10)
		}
		return nc, err
	}})
}

// TestShutdownBoundedWithAStalledClient: with close frames on and a client
// whose socket takes nothing, Shutdown still returns within
// shutdown_timeout (the 1001 frame waited for the stalled
// writer's lock until write_timeout).
func TestShutdownBoundedWithAStalledClient(t *testing.T) {
	const drain = 300 * time.Millisecond
	s, url := testServer(t, Options{CloseFramesOnShutdown: true, ShutdownTimeout: drain, WriteTimeout: time.Minute})
	healthy := dial(t, url, nil)
	dialStalled(t, url)
	payload := bytes.Repeat([]byte("z"), 256<<10)
	for range 64 { // 16 MiB: more than the kernel buffers of the stalled client hold
		if err := s.Publish(ws.OpBinary, payload, ""); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for {
			if _, _, err := healthy.ReadMessage(context.Background()); err != nil {
				return
			}
		}
	}()
	waitFor(t, "the stalled client's writer to block", 10*time.Second, func() bool {
		for _, si := range s.Sessions() {
			if si.QueuedBytes > 4<<20 {
				return true
			}
		}
		return false
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// A small constant on top for a loaded machine.
	if took, limit := time.Since(start), drain+500*time.Millisecond; took > limit {
		t.Fatalf("Shutdown took %v, want at most %v", took, limit)
	}
}
