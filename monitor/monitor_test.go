package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// waitFor bounds every wait of these tests: generous for a loaded machine
// under -race; a passing test never waits for it.
const waitFor = 20 * time.Second

// startBus runs a bus on a free loopback port.
func startBus(t *testing.T, o bus.Options) *bus.Server {
	t.Helper()
	o.Addr = "127.0.0.1:0"
	o.Logger = slog.New(slog.DiscardHandler)
	s, err := bus.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// startMonitor serves a monitor of s with httptest.
func startMonitor(t *testing.T, s *bus.Server, o Options) (*Monitor, *httptest.Server) {
	t.Helper()
	m, err := New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		hs.Close()
	})
	return m, hs
}

// busClient is a plain WebSocket client of the bus, past the greeting.
type busClient struct {
	c *ws.Conn
}

func dialBus(t *testing.T, s *bus.Server, header http.Header) *busClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, _, err := ws.Dial(ctx, "ws://"+s.Addr().String()+"/core", &ws.DialOptions{Header: header})
	if err != nil {
		t.Fatalf("dialing the bus: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	if _, b, err := c.ReadMessage(ctx); err != nil || !strings.Contains(string(b), `"connected"`) {
		t.Fatalf("greeting: %q, %v", b, err)
	}
	return &busClient{c: c}
}

func (b *busClient) send(t *testing.T, op ws.Opcode, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := b.c.WriteMessage(ctx, op, []byte(payload)); err != nil {
		t.Fatalf("sending to the bus: %v", err)
	}
}

// readUntil reads frames until one of type typ arrives.
func (b *busClient) readUntil(t *testing.T, typ string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		_, p, err := b.c.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("waiting for %q on the bus: %v", typ, err)
		}
		var m map[string]any
		if json.Unmarshal(p, &m) == nil && m["type"] == typ {
			return m
		}
	}
}

// testPage speaks the page's protocol; a goroutine reads its messages.
type testPage struct {
	c    *ws.Conn
	in   chan json.RawMessage
	done chan error
}

// openPage connects to the monitor and sends the hello with token.
func openPage(t *testing.T, hs *httptest.Server, token string) *testPage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, _, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatalf("dialing the monitor: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	p := &testPage{c: c, in: make(chan json.RawMessage, 1024), done: make(chan error, 1)}
	go func() {
		for {
			_, b, err := c.ReadMessage(context.Background())
			if err != nil {
				p.done <- err
				close(p.in)
				return
			}
			p.in <- b
		}
	}()
	p.write(t, map[string]any{"t": "hello", "token": token})
	return p
}

func (p *testPage) write(t *testing.T, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := p.c.WriteMessage(ctx, ws.OpText, b); err != nil {
		t.Fatalf("writing to the monitor: %v", err)
	}
}

// next returns the next message of kind kind (its "t"), decoded into v,
// skipping the others; ok false when the socket ended first.
func (p *testPage) next(t *testing.T, kind string, v any) (ok bool) {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for {
		select {
		case b, open := <-p.in:
			if !open {
				return false
			}
			var h struct{ T string }
			json.Unmarshal(b, &h)
			if h.T == kind {
				if err := json.Unmarshal(b, v); err != nil {
					t.Fatalf("decoding %s: %v", b, err)
				}
				return true
			}
		case <-timer.C:
			t.Fatalf("no %q message from the monitor in %v", kind, waitFor)
		}
	}
}

// welcomed reads the hello answer and fails unless it is one.
func (p *testPage) welcomed(t *testing.T) welcome {
	t.Helper()
	var w welcome
	if !p.next(t, "hello", &w) {
		t.Fatalf("the monitor closed instead of answering the hello: %v", <-p.done)
	}
	return w
}

// waitRow reads batches until a row satisfies ok.
func (p *testPage) waitRow(t *testing.T, what string, ok func(row) bool) row {
	t.Helper()
	for {
		var b batch
		if !p.next(t, "batch", &b) {
			t.Fatalf("the monitor closed before %s: %v", what, <-p.done)
		}
		for _, r := range b.Rows {
			if ok(r) {
				return r
			}
		}
	}
}

func ofType(typ string) func(row) bool { return func(r row) bool { return r.Type == typ } }

func TestPageSeesMessages(t *testing.T) {
	s := startBus(t, bus.Options{})
	_, hs := startMonitor(t, s, Options{})
	p := openPage(t, hs, "")
	w := p.welcomed(t)
	if w.Auth || !w.Clients || w.RowsPerSecond != DefaultRowsPerSecond || w.TypeRowsPerSecond != DefaultRowsPerSecond/4 {
		t.Errorf("hello on a bus without auth: %+v", w)
	}
	c := dialBus(t, s, nil)
	c.send(t, ws.OpText, `{"type":"test.hello","data":{"utterance":"hi"},"context":{"source":"skill.a","destination":["audio","gui"],"session":{"session_id":"s-42"}}}`)
	r := p.waitRow(t, "test.hello", ofType("test.hello"))
	if r.Kind != "json" || r.Source != "skill.a" || r.Destination != "audio, gui" || r.Session != "s-42" || r.Truncated {
		t.Errorf("row %+v", r)
	}
	if !strings.Contains(r.Payload, `"utterance":"hi"`) || r.Size != len(r.Payload) || r.Time == 0 {
		t.Errorf("row payload %q, size %d, seq %d, time %d", r.Payload, r.Size, r.Seq, r.Time)
	}

	c.send(t, ws.OpBinary, "\x00\x01binary\xff")
	r = p.waitRow(t, "the binary frame", func(r row) bool { return r.Kind == "binary" })
	if r.Preview != "00 01 62 69 6e 61 72 79 ff" || r.Size != 9 || r.Payload != "" || r.Type != "" {
		t.Errorf("binary row %+v", r)
	}
	c.send(t, ws.OpText, "not json at all")
	r = p.waitRow(t, "the text frame", func(r row) bool { return r.Kind == "text" })
	if r.Payload != "not json at all" || r.Type != "" {
		t.Errorf("text row %+v", r)
	}
}

func TestNewRow(t *testing.T) {
	big := `{"type":"big","data":{"s":"` + strings.Repeat("é", 100) + `"}}`
	for _, tc := range []struct {
		name, payload string
		op            ws.Opcode
		want          row
	}{
		{"no context", `{"type":"a"}`, ws.OpText, row{Kind: "json", Type: "a"}},
		{"context not an object", `{"type":"a","context":"x"}`, ws.OpText, row{Kind: "json", Type: "a"}},
		{"odd values", `{"type":"a","context":{"source":7,"destination":null,"session":{"session_id":["x"]}}}`, ws.OpText,
			row{Kind: "json", Type: "a", Source: "7", Session: "x"}},
		{"array", `[1,2]`, ws.OpText, row{Kind: "text"}},
		{"null", `null`, ws.OpText, row{Kind: "text"}},
		{"trailing text", `{"type":"a"} x`, ws.OpText, row{Kind: "text", Type: "a"}},
		{"cut at a character", big, ws.OpText, row{Kind: "json", Type: "big", Truncated: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := bus.Frame{Op: tc.op, Payload: []byte(tc.payload)}
			limit := 1000
			if tc.want.Truncated {
				limit = 40
			}
			got := newRow(f, tc.want.Type, limit)
			if got.Kind != tc.want.Kind || got.Source != tc.want.Source || got.Destination != tc.want.Destination ||
				got.Session != tc.want.Session || got.Truncated != tc.want.Truncated {
				t.Errorf("newRow(%s) = %+v, want %+v", tc.payload, got, tc.want)
			}
			if tc.want.Truncated && (len(got.Payload) > 40 || len(got.Payload) < 37 || strings.ContainsRune(got.Payload, '\uFFFD')) {
				t.Errorf("truncated payload %q", got.Payload)
			}
		})
	}
}

func TestSamplerBudget(t *testing.T) {
	perm := &bus.Permissions{Name: "t", Receive: []string{"flood", "rare.*"}}
	s := newSampler(perm, 40, 1024, 1<<20)
	var frames []bus.Frame
	for i := range 1000 {
		frames = append(frames, bus.Frame{Op: ws.OpText, Payload: []byte(`{"type":"flood"}`), Seq: uint64(i)})
		if i%100 == 0 {
			frames = append(frames, bus.Frame{Op: ws.OpText, Payload: []byte(fmt.Sprintf(`{"type":"rare.%d"}`, i/100))})
			frames = append(frames, bus.Frame{Op: ws.OpText, Payload: []byte(`{"type":"hidden"}`)})
		}
	}
	s.add(frames)
	b, ok := s.take()
	if !ok {
		t.Fatal("nothing taken")
	}
	kept := map[string]int{}
	for _, r := range b.Rows {
		kept[r.Type]++
	}
	if b.Total != 1010 || b.Counts["flood"] != 1000 || b.Counts["hidden"] != 0 || len(b.Rows) != 20 || b.Skipped != 990 {
		t.Errorf("total %d, counts %v, rows %d, skipped %d", b.Total, b.Counts, len(b.Rows), b.Skipped)
	}
	if kept["flood"] != 10 || len(kept) != 11 {
		t.Errorf("rows kept per type: %v; want 10 flood (a quarter of the budget) and every rare one", kept)
	}
	if _, ok := s.take(); ok {
		t.Error("a second take found something")
	}
}

// TestSampledAtHighRate: at thousands of messages per second a page gets at
// most its row budget per interval, exact counts, and the rare type.
func TestSampledAtHighRate(t *testing.T) {
	s := startBus(t, bus.Options{})
	_, hs := startMonitor(t, s, Options{RowsPerSecond: 100, Interval: 100 * time.Millisecond})
	p := openPage(t, hs, "")
	// The cap per type the page is told (and explains) is the one the batches keep to.
	w := p.welcomed(t)
	perTypeBatch := w.TypeRowsPerSecond * int(w.IntervalMS) / 1000
	if w.TypeRowsPerSecond != 20 || perTypeBatch != 2 {
		t.Fatalf("type_rows_per_second %d (%d a batch), want a quarter of 100 rows/s: 20 (2 a batch)", w.TypeRowsPerSecond, perTypeBatch)
	}
	const n = 5000
	go func() {
		for i := range n {
			s.EmitRaw(ws.OpText, []byte(fmt.Sprintf(`{"type":"flood","data":{"i":%d}}`, i)))
			if i == n/2 {
				s.EmitRaw(ws.OpText, []byte(`{"type":"rare"}`))
			}
		}
	}()
	total, skipped, rare := 0, 0, false
	for total < n+1 {
		var b batch
		if !p.next(t, "batch", &b) {
			t.Fatalf("closed: %v", <-p.done)
		}
		if len(b.Rows) > 10 {
			t.Fatalf("a batch of %d rows; the budget is 10", len(b.Rows))
		}
		total += b.Total
		skipped += b.Skipped
		flood := 0
		for _, r := range b.Rows {
			rare = rare || r.Type == "rare"
			if r.Type == "flood" {
				flood++
			}
		}
		if flood > perTypeBatch {
			t.Fatalf("a batch of %d flood rows; the page was told %d a batch", flood, perTypeBatch)
		}
	}
	if total != n+1 || skipped == 0 || !rare {
		t.Errorf("total %d, skipped %d, rare seen %v", total, skipped, rare)
	}
}

func TestAuth(t *testing.T) {
	s := startBus(t, bus.Options{Auth: bus.Auth{Required: true, Tokens: map[string]bus.Permissions{
		"gui-secret":   {Name: "gui", Receive: []string{"gui.*"}, Emit: []string{"gui.*"}},
		"admin-secret": {Name: "admin"},
	}}})
	_, hs := startMonitor(t, s, Options{})

	for _, tok := range []string{"", "wrong"} {
		p := openPage(t, hs, tok)
		var d ending
		if !p.next(t, "denied", &d) || d.Error == "" {
			t.Fatalf("token %q: no denial", tok)
		}
		var b batch
		if p.next(t, "batch", &b) {
			t.Fatalf("token %q: a batch after the denial", tok)
		}
		var ce *ws.CloseError
		if err := <-p.done; !errors.As(err, &ce) || ce.Code != ws.StatusPolicyViolation {
			t.Errorf("token %q: ended with %v, want a 1008 close", tok, err)
		}
	}

	gui := openPage(t, hs, "gui-secret")
	if w := gui.welcomed(t); !w.Auth || w.Token != "gui" || w.Clients || len(w.Receive) != 1 {
		t.Errorf("hello for gui: %+v", w)
	}
	var cl clientList
	if !gui.next(t, "clients", &cl) || len(cl.Sessions) != 0 {
		t.Errorf("clients for a restricted token: %+v", cl)
	}
	admin := openPage(t, hs, "admin-secret")
	if w := admin.welcomed(t); !w.Clients {
		t.Errorf("hello for admin: %+v", w)
	}
	c := dialBus(t, s, http.Header{"Authorization": {"Bearer admin-secret"}, "User-Agent": {"monitor-test"}})
	c.send(t, ws.OpText, `{"type":"speak","data":{}}`)
	c.send(t, ws.OpText, `{"type":"gui.value","data":{}}`)
	r := gui.waitRow(t, "gui.value", func(r row) bool { return true })
	if r.Type != "gui.value" {
		t.Errorf("the gui token got %q first; it may receive gui.* only", r.Type)
	}
	admin.waitRow(t, "speak", ofType("speak"))
	for {
		if !admin.next(t, "clients", &cl) {
			t.Fatal("admin page closed")
		}
		if len(cl.Sessions) == 1 {
			break
		}
	}
	if cs := cl.Sessions[0]; cs.UserAgent != "monitor-test" || cs.Token != "admin" || cs.FramesIn != 2 {
		t.Errorf("session %+v", cs)
	}

	gui.write(t, map[string]any{"t": "send", "id": 1, "type": "speak", "data": map[string]any{}})
	var rep sendReply
	if !gui.next(t, "sent", &rep) || rep.OK || !strings.Contains(rep.Error, "may not emit") {
		t.Errorf("send of speak under the gui token: %+v", rep)
	}
	gui.write(t, map[string]any{"t": "send", "id": 2, "type": "gui.x", "wait": true, "response": "speak"})
	if !gui.next(t, "sent", &rep) || rep.OK || !strings.Contains(rep.Error, "may not receive") {
		t.Errorf("wait for speak under the gui token: %+v", rep)
	}
}

func TestSendWaitsForResponse(t *testing.T) {
	s := startBus(t, bus.Options{})
	_, hs := startMonitor(t, s, Options{})
	responder := dialBus(t, s, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m := responder.readUntil(t, "ping")
		data, _ := json.Marshal(map[string]any{"type": "ping.response", "data": map[string]any{"pong": m["data"]}})
		responder.send(t, ws.OpText, string(data))
	}()
	p := openPage(t, hs, "")
	p.welcomed(t)
	p.write(t, map[string]any{"t": "send", "id": 7, "type": "ping", "data": map[string]any{"n": 1},
		"context": map[string]any{"source": "monitor"}, "wait": true, "timeout_ms": int(waitFor / time.Millisecond)})
	var rep sendReply
	if !p.next(t, "sent", &rep) || !rep.OK || rep.ID != 7 || rep.Response == nil {
		t.Fatalf("reply %+v", rep)
	}
	if rep.Response.Type != "ping.response" || !strings.Contains(rep.Response.Payload, `"pong":{"n":1}`) {
		t.Errorf("response %+v", rep.Response)
	}
	wg.Wait()

	p.write(t, map[string]any{"t": "send", "id": 8, "type": "nobody.home", "wait": true, "timeout_ms": 100})
	if !p.next(t, "sent", &rep) || rep.OK || !strings.Contains(rep.Error, `no "nobody.home.response" came`) {
		t.Errorf("reply without a responder: %+v", rep)
	}
	p.write(t, map[string]any{"t": "send", "id": 9, "type": "x", "data": []int{1}})
	if !p.next(t, "sent", &rep) || rep.OK || !strings.Contains(rep.Error, "data must be a JSON object") {
		t.Errorf("reply to bad data: %+v", rep)
	}
}

// TestLaggedPageIsCut: a page whose follower falls behind the bus's bounds
// is told so and closed like a slow client; the bus goes on.
func TestLaggedPageIsCut(t *testing.T) {
	s := startBus(t, bus.Options{MaxQueueMessages: 20})
	m, hs := startMonitor(t, s, Options{})
	hold := make(chan struct{})
	m.beforeNext = func() { <-hold }
	p := openPage(t, hs, "")
	p.welcomed(t)
	for i := range 100 {
		s.EmitRaw(ws.OpText, []byte(fmt.Sprintf(`{"type":"fill","data":{"i":%d}}`, i)))
	}
	close(hold)
	var e ending
	if !p.next(t, "end", &e) || e.Reason != "lagged" {
		t.Fatalf("end %+v", e)
	}
	var ce *ws.CloseError
	for range p.in {
	}
	if err := <-p.done; !errors.As(err, &ce) || ce.Code != ws.StatusPolicyViolation || ce.Reason != "slow consumer" {
		t.Errorf("closed with %v, want 1008 slow consumer", err)
	}
	c := dialBus(t, s, nil)
	c.send(t, ws.OpText, `{"type":"after"}`)
	c.readUntil(t, "after")
}

// TestSlowClientClose: the client list shows a slow consumer's close with
// its reason.
func TestSlowClientClose(t *testing.T) {
	s := startBus(t, bus.Options{WriteTimeout: 300 * time.Millisecond})
	_, hs := startMonitor(t, s, Options{})
	p := openPage(t, hs, "")
	p.welcomed(t)
	dialBus(t, s, http.Header{"User-Agent": {"slow-reader"}}) // never reads again
	big := []byte(`{"type":"fill","data":{"s":"` + strings.Repeat("x", 64<<10) + `"}}`)
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		for range 16 { // until its socket buffers are full and a write times out
			s.EmitRaw(ws.OpText, big)
		}
		select {
		case b, open := <-p.in:
			if !open {
				t.Fatalf("the page was closed: %v", <-p.done)
			}
			var cl clientList
			if json.Unmarshal(b, &cl) != nil || cl.T != "clients" {
				continue
			}
			for _, c := range cl.Closes {
				if c.Session.UserAgent == "slow-reader" {
					if c.Reason != "slow_consumer" { // code 1008, or none when the write timed out
						t.Errorf("close %+v", c)
					}
					return
				}
			}
		case <-deadline.C:
			t.Fatalf("no close of the slow reader in %v", waitFor)
		}
	}
}

func TestShutdownTellsThePage(t *testing.T) {
	s := startBus(t, bus.Options{})
	m, hs := startMonitor(t, s, Options{})
	p := openPage(t, hs, "")
	p.welcomed(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var e ending
	if !p.next(t, "end", &e) || e.Reason != "shutdown" {
		t.Errorf("end %+v", e)
	}
}

func TestLoopbackOnly(t *testing.T) {
	s := startBus(t, bus.Options{})
	for _, addr := range []string{"0.0.0.0:9182", ":9182", "192.0.2.1:9182"} {
		if _, err := New(s, Options{Addr: addr}); err == nil || !strings.Contains(err.Error(), "monitor_allow_remote") {
			t.Errorf("New(%q) = %v, want a refusal naming monitor_allow_remote", addr, err)
		}
		if _, err := New(s, Options{Addr: addr, AllowRemote: true}); err != nil {
			t.Errorf("New(%q, AllowRemote) = %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		if _, err := New(s, Options{Addr: addr}); err != nil {
			t.Errorf("New(%q) = %v", addr, err)
		}
	}

	_, hs := startMonitor(t, s, Options{})
	get := func(host string, h http.Header) *http.Response {
		req, _ := http.NewRequest("GET", hs.URL+"/", nil)
		req.Host = host
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get("rebound.example:9182", nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("Host rebound.example: %s, want 403", r.Status)
	}
	for _, host := range []string{"localhost:9182", "[::1]:9182", "127.0.0.2"} {
		if r := get(host, nil); r.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %s, want 200", host, r.Status)
		}
	}
	r := get(strings.TrimPrefix(hs.URL, "http://"), nil)
	if r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(r.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET /: %s %v", r.Status, r.Header)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, _, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/ws",
		&ws.DialOptions{Header: http.Header{"Origin": {"http://elsewhere.example"}}})
	var de *ws.DialError
	if !errors.As(err, &de) || de.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin WebSocket: %v, want 403", err)
	}
}

func TestAssets(t *testing.T) {
	s := startBus(t, bus.Options{})
	_, hs := startMonitor(t, s, Options{})
	for path, ctype := range map[string]string{
		"/": "text/html", "/app.js": "text/javascript", "/lib.js": "text/javascript",
		"/chart.js": "text/javascript", "/style.css": "text/css",
	} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %s, %q", path, resp.Status, resp.Header.Get("Content-Type"))
		}
	}
	resp, err := http.Post(hs.URL+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %s", resp.Status)
	}
}

func TestSamplerByteBudget(t *testing.T) {
	s := newSampler(nil, 40, 4096, 1500)
	big := bus.Frame{Op: ws.OpText, Payload: []byte(`{"type":"a","data":"` + strings.Repeat("x", 1000) + `"}`)}
	s.add([]bus.Frame{big, big, big})
	b, _ := s.take()
	var sizes []int
	for _, r := range b.Rows {
		sizes = append(sizes, len(r.Payload))
	}
	if len(sizes) != 3 || sizes[0] != len(big.Payload) || sizes[1] != len(big.Payload) || sizes[2] != shortPayload || !b.Rows[2].Truncated {
		t.Errorf("payload sizes %v: want two whole rows, then %d bytes once 1500 are used", sizes, shortPayload)
	}
}

// TestMaxPages: pages beyond MaxPages are refused with 503 until one goes.
func TestMaxPages(t *testing.T) {
	s := startBus(t, bus.Options{})
	_, hs := startMonitor(t, s, Options{MaxPages: 1})
	first := openPage(t, hs, "")
	first.welcomed(t)
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, _, err := ws.Dial(ctx, url, nil)
	var de *ws.DialError
	if !errors.As(err, &de) || de.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second page: %v, want 503", err)
	}
	first.c.Close(ws.StatusNormalClosure, "")
	for { // the first page's end is seen by the monitor soon after
		c, _, err := ws.Dial(ctx, url, nil)
		if err == nil {
			c.CloseNow()
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no page accepted after the first closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}
