package e2e

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// startDefault starts a bus with the default configuration on a free port.
func startDefault(t *testing.T) *busProc {
	t.Helper()
	sb := newSandbox(t)
	sb.usePort()
	return sb.start()
}

func TestGreeting(t *testing.T) {
	t.Parallel()
	b := startDefault(t)
	t.Run("go", func(t *testing.T) {
		expectGreeting(t, dialGo(t, b.url(), nil))
	})
	t.Run("python", func(t *testing.T) {
		expectGreeting(t, dialPy(t, b.url(), ""))
	})
	t.Run("query string ignored", func(t *testing.T) {
		expectGreeting(t, dialGo(t, b.url()+"?client=e2e&x=1", nil))
	})
}

func TestRelayToAllIncludingSender(t *testing.T) {
	t.Parallel()
	b := startDefault(t)
	g1, g2, py := dialGo(t, b.url(), nil), dialGo(t, b.url(), nil), dialPy(t, b.url(), "")
	all := []client{g1, g2, py}
	connectAll(t, all...)
	for i, sender := range all {
		// Unusual spacing and key order: relayed unchanged, byte for byte.
		msg := fmt.Appendf(nil, `{"context": {"source": "s%d"}, "type" : "e2e.relay", "data":{"i":%d, "text":"héllo ✓"}}`, i, i)
		relayText(t, sender, all, msg)
	}
}

// TestTotalOrder: two senders send concurrently; three observers (two of
// ours, one Python) and both senders see one and the same order, and each
// sender's messages in the order sent.
func TestTotalOrder(t *testing.T) {
	t.Parallel()
	const n = 300
	b := startDefault(t)
	senders := []*goClient{dialGo(t, b.url(), nil), dialGo(t, b.url(), nil)}
	observers := []client{dialGo(t, b.url(), nil), dialGo(t, b.url(), nil), dialPy(t, b.url(), "")}
	all := append([]client{senders[0], senders[1]}, observers...)
	connectAll(t, all...)

	seqs := make([][][]byte, len(all))
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(all))
	// Every client reads concurrently with the sending.
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 * n {
				f, err := c.tryNext(recvTimeout)
				if err == nil && f.end {
					err = fmt.Errorf("connection ended: %v", f)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %v after %d frames", c.name(), err, len(seqs[i]))
					return
				}
				seqs[i] = append(seqs[i], f.data)
			}
		}()
	}
	for s, sender := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				msg := fmt.Appendf(nil, `{"type":"e2e.order","data":{"s":%d,"i":%d},"context":{}}`, s, i)
				if err := sender.c.WriteMessage(t.Context(), ws.OpText, msg); err != nil {
					errs <- fmt.Errorf("sender %d: %v", s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for i := range all {
		if len(seqs[i]) != 2*n {
			t.Fatalf("%s received %d messages, want %d", all[i].name(), len(seqs[i]), 2*n)
		}
		next := [2]int{}
		for k, m := range seqs[i] {
			var msg struct{ Data struct{ S, I int } }
			if err := json.Unmarshal(m, &msg); err != nil {
				t.Fatalf("%s message %d: %v: %s", all[i].name(), k, err, m)
			}
			if msg.Data.I != next[msg.Data.S] {
				t.Fatalf("%s message %d: sender %d's message %d, want its %d (sender order broken)", all[i].name(), k, msg.Data.S, msg.Data.I, next[msg.Data.S])
			}
			next[msg.Data.S]++
		}
		if i > 0 {
			for k := range seqs[i] {
				if !bytes.Equal(seqs[i][k], seqs[0][k]) {
					t.Fatalf("total order broken at message %d: %s got %s, %s got %s", k, all[0].name(), seqs[0][k], all[i].name(), seqs[i][k])
				}
			}
		}
	}
	interleaved := 0
	for k := 1; k < len(seqs[0]); k++ {
		if !bytes.Equal(seqs[0][k][:40], seqs[0][k-1][:40]) {
			interleaved++
		}
	}
	t.Logf("%d clients saw the same %d messages; the senders alternated %d times", len(all), 2*n, interleaved)
}

func TestBinaryRelayedAsBinary(t *testing.T) {
	t.Parallel()
	b := startDefault(t)
	g, py := dialGo(t, b.url(), nil), dialPy(t, b.url(), "")
	all := []client{g, py}
	connectAll(t, all...)
	payloads := [][]byte{
		{0x00, 0xff, 0xfe, 0x80, 0x7b, 0x22}, // not UTF-8
		[]byte(`{"type":"looks.like.json","data":{},"context":{}}`),
		bytes.Repeat([]byte{0xc3}, 70000), // needs a 64-bit length
	}
	for _, sender := range all {
		for _, p := range payloads {
			sender.send(ws.OpBinary, p)
			for _, c := range all {
				expectFrame(t, c, ws.OpBinary, p)
			}
		}
	}
}

// TestPassThrough: text that is not a bus message, and encrypted frames,
// pass byte for byte.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	b := startDefault(t)
	g, py := dialGo(t, b.url(), nil), dialPy(t, b.url(), "")
	all := []client{g, py}
	connectAll(t, all...)
	frames := []string{
		"hello, not JSON",
		"",
		"[1, 2, 3]",
		"42",
		`"a string"`,
		"null",
		`{"data": {}, "context": {}}`,
		`{"type": 5, "data": {}}`,
		`{"type":"x","data":{},"context":{}`, // truncated JSON
		`{"ciphertext": "7QnnIg0gwcNr/9hdbLeTZg==", "tag": "kS/Tc0dDOYIL6Zo4r6PfPw==", "nonce": "5e0zyi1NIMmJCFZFFEyiRA=="}`,
		"  {\"type\":\"spaced\",\n\t\"data\":{}} ",
		`{"type":"dup","type":"dup2","data":{}}`,
		"\u00e9\u4e16\U0001f600",
	}
	for _, sender := range all {
		for _, f := range frames {
			relayText(t, sender, all, []byte(f))
		}
	}
}

// TestMalformedSessionCarrier: a frame whose context.session is present, not
// null and not an object is dropped and everyone gets ovos.session.rejected;
// the sender stays connected. "session": null is relayed.
func TestMalformedSessionCarrier(t *testing.T) {
	t.Parallel()
	b := startDefault(t)
	sender, other, py := dialGo(t, b.url(), nil), dialGo(t, b.url(), nil), dialPy(t, b.url(), "")
	all := []client{sender, other, py}
	connectAll(t, all...)

	cases := []struct {
		name, frame, want string
	}{
		{"string", `{"type":"speak","data":{"utterance":"hi"},"context":{"session":"abc","utterance_id":"u-1"}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":"speak","reason":"malformed_carrier"},"context":{"utterance_id":"u-1"}}`},
		{"number", `{"type":"recognizer_loop:utterance","data":{},"context":{"session":42}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":"recognizer_loop:utterance","reason":"malformed_carrier"},"context":{}}`},
		{"list", `{"type":"a","data":{},"context":{"session":[{"session_id":"x"}],"utterance_id":""}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":"a","reason":"malformed_carrier"},"context":{}}`},
		{"bool", `{"type":"b","data":{},"context":{"session":true,"utterance_id":"u-2"}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":"b","reason":"malformed_carrier"},"context":{"utterance_id":"u-2"}}`},
		{"no type", `{"data":{},"context":{"session":"abc"}}`,
			`{"type":"ovos.session.rejected","data":{"msg_type":null,"reason":"malformed_carrier"},"context":{}}`},
	}
	for i, tc := range cases {
		src := all[i%len(all)]
		src.send(ws.OpText, []byte(tc.frame))
		for _, c := range all {
			expectJSON(t, c, tc.want)
		}
		// The connection stays and relays what comes next.
		ok := fmt.Appendf(nil, `{"type":"e2e.after","data":{"case":%q},"context":{}}`, tc.name)
		relayText(t, src, all, ok)
	}

	relayed := []string{
		`{"type":"speak","data":{},"context":{"session":null}}`,
		`{"type":"speak","data":{},"context":"not an object","session":"x"}`,
		`{"type":"speak","data":{},"context":{"session":{"session_id":"s1"}}}`,
		`{"type":"speak","data":{},"context":{}}`,
	}
	for _, f := range relayed {
		relayText(t, sender, all, []byte(f))
	}
}

// TestOversize: with max_msg_size 1 MiB a frame of 1 MiB passes, a larger
// one closes its sender with 1009 and is not relayed; the others carry on.
func TestOversize(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.write(sb.userFile(), `{"websocket": {"max_msg_size": 1}}`)
	sb.usePort()
	b := sb.start()

	const limit = 1 << 20
	fill := func(n int, tag string) []byte {
		p := fmt.Appendf(nil, `{"type":"e2e.big","data":{"tag":%q,"fill":"`, tag)
		p = append(p, bytes.Repeat([]byte("x"), n-len(p)-len(`"},"context":{}}`))...)
		return append(p, `"},"context":{}}`...)
	}

	for _, kind := range []string{"go", "python"} {
		t.Run(kind, func(t *testing.T) {
			var sender client
			if kind == "go" {
				sender = dialGo(t, b.url(), nil)
			} else {
				sender = dialPy(t, b.url(), "")
			}
			obs := dialGo(t, b.url(), nil)
			py := dialPy(t, b.url(), "")
			connectAll(t, sender, obs, py)

			atLimit := fill(limit, "at-limit")
			relayText(t, sender, []client{sender, obs, py}, atLimit)

			over := fill(limit+1, "over")
			sender.send(ws.OpText, over)
			f := expectClosed(t, sender, 1009, recvTimeout)
			t.Logf("sender closed: %v", f)

			// Nothing was relayed: the next frame the others get is this one.
			after := []byte(`{"type":"e2e.after.oversize","data":{},"context":{}}`)
			obs.send(ws.OpText, after)
			expectFrame(t, obs, ws.OpText, after)
			expectFrame(t, py, ws.OpText, after)
		})
	}
}

// TestSlowConsumer: a client that never reads is cut off once it is more
// than max_queue_bytes behind, while a fast client and the sender get every
// message in order.
func TestSlowConsumer(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.write(sb.userFile(), `{"websocket": {"max_msg_size": 1, "max_queue_bytes": 1048576, "max_queue_messages": 1000, "write_timeout": 3}}`)
	sb.usePort()
	b := sb.start()

	slow := dialRaw(t, b.addr(), "/core", 0)
	sender, fast := dialGo(t, b.url(), nil), dialGo(t, b.url(), nil)
	connectAll(t, sender, fast)

	const n, size = 2000, 8 << 10 // 16 MB: far over the kernel buffers and the bound
	msg := func(i int) []byte {
		p := fmt.Appendf(nil, `{"type":"e2e.flood","data":{"i":%06d,"fill":"`, i)
		p = append(p, bytes.Repeat([]byte("y"), size-len(p)-len(`"},"context":{}}`))...)
		return append(p, `"},"context":{}}`...)
	}
	// The sender stays at most window messages (256 KiB) ahead of the
	// slower of the two reading clients, well within the bound: they are
	// fast clients by any measure, while the raw one reads nothing.
	const window = 32
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	stop := make(chan struct{})
	var received [2]atomic.Int64
	for k, c := range []*goClient{sender, fast} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				f, err := c.tryNext(recvTimeout)
				if err == nil && (f.end || !bytes.Equal(f.data, msg(i))) {
					err = fmt.Errorf("message %d: got %v", i, f)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %v", c.name(), err)
					close(stop)
					return
				}
				received[k].Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			for int64(i)-min(received[0].Load(), received[1].Load()) >= window {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Microsecond):
				}
			}
			if err := sender.c.WriteMessage(t.Context(), ws.OpText, msg(i)); err != nil {
				errs <- fmt.Errorf("send %d: %v", i, err)
				return
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("sender and fast client got all %d messages (%d MB) in %v", n, n*size>>20, elapsed.Round(time.Millisecond))

	// The slow client was cut off: the server ended the connection, after
	// a prefix of the messages.
	frames, err := slow.drain(t, 10*time.Second)
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the slow client is still connected after %d frames: it was not cut off", len(frames))
	}
	ending := fmt.Sprintf("%v", err)
	if len(frames) > 0 && frames[len(frames)-1].op == ws.OpClose {
		last := frames[len(frames)-1].data
		ending = fmt.Sprintf("close frame %x %q", last[:min(2, len(last))], last[min(2, len(last)):])
		frames = frames[:len(frames)-1]
	} else if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
		t.Errorf("slow client: unexpected read error %v", err)
	}
	if len(frames) == 0 || string(frames[0].data) != greeting {
		t.Fatalf("slow client: first frame is not the greeting")
	}
	got := frames[1:]
	// After the greeting come the join/barrier messages of the others.
	for len(got) > 0 && bytes.HasPrefix(got[0].data, []byte(`{"type":"e2e.`)) && !bytes.HasPrefix(got[0].data, []byte(`{"type":"e2e.flood`)) {
		got = got[1:]
	}
	for i, f := range got {
		if !bytes.Equal(f.data, msg(i)) {
			t.Fatalf("slow client: frame %d is not flood message %d: %.60q", i, i, f.data)
		}
	}
	if len(got) >= n {
		t.Fatalf("the slow client received all %d messages", n)
	}
	t.Logf("slow client cut off after %d of %d messages, %s", len(got), n, ending)
	b.waitLog(5*time.Second, "slow")

	// The bus carries on.
	after := []byte(`{"type":"e2e.after.slow","data":{},"context":{}}`)
	fast.send(ws.OpText, after)
	expectFrame(t, fast, ws.OpText, after)
	expectFrame(t, sender, ws.OpText, after)
}

func TestHealthAndPaths(t *testing.T) {
	t.Parallel()
	b := startDefault(t)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := hc.Get("http://" + b.addr() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(body)
	}
	if code, body := get("/health"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("GET /health = %d %q, want 200 ok", code, body)
	}
	for _, p := range []string{"/", "/core/", "/Core", "/health/x", "/metrics", "/core2", "/favicon.ico"} {
		if code, body := get(p); code != 404 {
			t.Errorf("GET %s = %d %q, want 404", p, code, body)
		}
	}
	// A WebSocket upgrade on another path is refused with 404 too.
	for _, p := range []string{"/", "/other", "/core/x"} {
		_, err := tryDialGo("ws://"+b.addr()+p, nil)
		var de *ws.DialError
		if !errors.As(err, &de) || de.StatusCode != 404 {
			t.Errorf("upgrade on %s: %v, want a 404 refusal", p, err)
		}
	}
	// The route still works.
	expectGreeting(t, dialGo(t, b.url(), nil))
}

// TestMetrics: metrics_address serves Prometheus metrics on a listener of
// its own; the bus port does not serve them.
func TestMetrics(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	maddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sb.env["OVOS_BUS_METRICS_ADDRESS"] = maddr
	sb.usePort()
	b := sb.start()
	g := dialGo(t, b.url(), nil)
	connectAll(t, g)
	body := getMetrics(t, maddr)
	for _, name := range []string{"ovbus_connections 1", "ovbus_relay_latency_seconds", "ovbus_closes_total", "ovbus_rejected_total"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// TestCompression: a client offering permessage-deflate gets it, with the
// bus's context kept (or server_no_context_takeover where
// compression_context is 0), and receives compressed frames it decodes in
// order; one that does not, and every client when compression is off, gets
// them uncompressed.
func TestCompression(t *testing.T) {
	t.Parallel()
	const offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
	msg := fmt.Appendf(nil, `{"type":"e2e.deflate","data":{"text":%q},"context":{}}`, strings.Repeat("compress me ", 1000))
	for _, c := range []struct {
		on      bool
		context string // compression_context; "" the default, which keeps it
	}{{true, ""}, {true, "0"}, {false, ""}} {
		on := c.on
		t.Run(fmt.Sprintf("compression=%v,context=%q", on, c.context), func(t *testing.T) {
			t.Parallel()
			sb := newSandbox(t)
			sb.env["OVOS_BUS_COMPRESSION"] = fmt.Sprint(on)
			if c.context != "" {
				sb.env["OVOS_BUS_COMPRESSION_CONTEXT"] = c.context
			}
			sb.usePort()
			b := sb.start()
			raw := dialRawWith(t, b.addr(), "/core", 0, offer)
			negotiated := ""
			for _, h := range raw.header {
				if strings.HasPrefix(h, "sec-websocket-extensions:") {
					negotiated = h
				}
			}
			if on != strings.Contains(negotiated, "permessage-deflate") {
				t.Fatalf("compression %v, but the handshake answered %q", on, negotiated)
			}
			// The raw client allows context takeover: the bus keeps its
			// context unless compression_context is 0.
			if kept := !strings.Contains(negotiated, "server_no_context_takeover"); on && kept != (c.context != "0") {
				t.Errorf("compression_context %q, context kept %v: %q", c.context, kept, negotiated)
			}
			var inf inflater
			if f := raw.readFrame(t, recvTimeout); f.op != ws.OpText || (f.rsv1 && string(inf.inflate(t, f.data)) != greeting) || (!f.rsv1 && string(f.data) != greeting) {
				t.Fatalf("raw client: first frame %v %q, want the greeting", f.op, f.data)
			}
			zc, err := tryDialGo(b.url(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { zc.CloseNow() })
			plain := &goClient{t: t, label: "go (no deflate)", c: zc}
			var deflater *goClient
			if on {
				ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
				defer cancel()
				dc, _, err := ws.Dial(ctx, b.url(), &ws.DialOptions{Proxy: ws.NoProxy, EnableCompression: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { dc.CloseNow() })
				if dc.Deflate() == nil {
					t.Fatal("our client offered permessage-deflate and did not get it")
				}
				deflater = &goClient{t: t, label: "go (deflate)", c: dc}
			}
			cs := []client{plain}
			if deflater != nil {
				cs = append(cs, deflater)
			}
			connectAll(t, cs...)
			relayText(t, cs[len(cs)-1], cs, msg)
			// The raw client: skip the join and barrier messages.
			for {
				f := raw.readFrame(t, recvTimeout)
				data := f.data
				if f.rsv1 {
					data = inf.inflate(t, f.data)
				}
				if !bytes.Contains(data, []byte("e2e.deflate")) {
					continue
				}
				if f.rsv1 != on {
					t.Errorf("compressed = %v, want %v", f.rsv1, on)
				}
				if !bytes.Equal(data, msg) {
					t.Errorf("the relayed frame differs from what was sent")
				}
				t.Logf("%d bytes relayed as a %d-byte frame", len(msg), len(f.data))
				break
			}
		})
	}
}

// inflate undoes permessage-deflate on one message (RFC 7692 §7.2.2).
// inflater decompresses a connection's permessage-deflate messages in
// order, with the server's context: the last 32 KiB it decompressed is the
// dictionary of the next (RFC 7692 §7.2.3.2), which a server that does not
// keep its context never refers to.
type inflater struct{ hist []byte }

func (inf *inflater) inflate(t *testing.T, p []byte) []byte {
	t.Helper()
	r := flate.NewReaderDict(io.MultiReader(bytes.NewReader(p), bytes.NewReader([]byte{0, 0, 0xff, 0xff})), inf.hist)
	out, err := io.ReadAll(r)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("inflate: %v", err)
	}
	inf.hist = append(inf.hist, out...)
	if n := len(inf.hist) - 32<<10; n > 0 {
		inf.hist = append(inf.hist[:0], inf.hist[n:]...)
	}
	return out
}
