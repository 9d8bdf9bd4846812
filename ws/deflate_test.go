package ws

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/klauspost/compress/flate"
)

// RFC 7692 §7.2.3 examples, received by a client (unmasked server frames)
// and by a server (the same frames masked).
func TestRFC7692Examples(t *testing.T) {
	tests := []struct {
		name   string
		frames []string // hex, unmasked
		want   []string
		params DeflateParams
	}{
		{"7.2.3.1 Hello", []string{"c1 07 f2 48 cd c9 c9 07 00"}, []string{"Hello"}, DeflateParams{}},
		{"7.2.3.1 Hello fragmented", []string{"41 03 f2 48 cd", "80 04 c9 c9 07 00"}, []string{"Hello"}, DeflateParams{}},
		{"7.2.3.2 shared window", []string{"c1 07 f2 48 cd c9 c9 07 00", "c1 05 f2 00 11 00 00"}, []string{"Hello", "Hello"}, DeflateParams{}},
		{"7.2.3.2 no takeover", []string{"c1 07 f2 48 cd c9 c9 07 00", "c1 07 f2 48 cd c9 c9 07 00"}, []string{"Hello", "Hello"}, DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
		{"7.2.3.3 stored block", []string{"c1 0b 00 05 00 fa ff 48 65 6c 6c 6f 00"}, []string{"Hello"}, DeflateParams{}},
		{"7.2.3.4 BFINAL", []string{"c1 08 f3 48 cd c9 c9 07 00 00"}, []string{"Hello"}, DeflateParams{}},
		{"7.2.3.5 two blocks", []string{"c1 0d f2 48 05 00 00 00 ff ff ca c9 c9 07 00"}, []string{"Hello"}, DeflateParams{}},
		{"7.2.3.6 empty", []string{"c1 01 00"}, []string{""}, DeflateParams{}},
		{"uncompressed with deflate", []string{"81 05 48 65 6c 6c 6f"}, []string{"Hello"}, DeflateParams{}},
		{"compressed binary then plain", []string{"c2 07 f2 48 cd c9 c9 07 00", "82 01 00"}, []string{"Hello", "\x00"}, DeflateParams{}},
		{"control inside compressed fragments", []string{"41 03 f2 48 cd", "89 00", "80 04 c9 c9 07 00"}, []string{"Hello"}, DeflateParams{}},
	}
	for _, tt := range tests {
		for _, role := range []Role{RoleClient, RoleServer} {
			var wire []byte
			for _, f := range tt.frames {
				b := unhex(t, f)
				if role == RoleServer {
					h, n, err := ParseHeader(b)
					if err != nil || n == 0 {
						t.Fatal(f, err)
					}
					wire = append(wire, frame(h.Fin, map[bool]byte{true: 4}[h.Rsv1], h.Op, testKey, b[n:])...)
				} else {
					wire = append(wire, b...)
				}
			}
			for _, ch := range []func() int{nil, byteByByte} {
				p := NewProtocol(Config{Role: role, Deflate: &tt.params})
				res := feed(t, p, wire, ch)
				if res.err != nil {
					t.Fatalf("%s %v: %v", tt.name, role, res.err)
				}
				var got []string
				for _, e := range res.events {
					if e.Kind == EventMessage {
						got = append(got, e.Data)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Fatalf("%s %v: got %q want %q", tt.name, role, got, tt.want)
				}
			}
		}
	}
}

// The encoder side of RFC 7692 §7.2.3.1/2: "Hello" twice with context
// takeover; the second message must refer back into the first.
func TestCompressContextTakeover(t *testing.T) {
	msg := []byte("Hello, Hello, Hello! This is a message long enough to compress.")
	for _, noTakeover := range []bool{false, true} {
		s := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{ServerNoContextTakeover: noTakeover}, Compression: CompressionOptions{Threshold: -1}})
		a, err := s.AppendMessage(nil, OpText, msg)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := s.AppendMessage(nil, OpText, msg)
		if a[0] != 0xC1 || b[0] != 0xC1 {
			t.Fatalf("RSV1 not set: %x %x", a[0], b[0])
		}
		if noTakeover != bytes.Equal(a, b) {
			t.Fatalf("noTakeover=%v: frames %x %x", noTakeover, a, b)
		}
		if !noTakeover && len(b) >= len(a) {
			t.Fatalf("second message not shorter with takeover: %d >= %d", len(b), len(a))
		}
		c := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{ServerNoContextTakeover: noTakeover}})
		res := feed(t, c, append(a, b...), byteByByte)
		if res.err != nil || len(res.events) != 2 || res.events[1].Data != string(msg) {
			t.Fatalf("%+v", res)
		}
	}
	// Empty message compressed is a single 0x00 (RFC 7692 §7.2.3.6).
	s := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{}, Compression: CompressionOptions{Threshold: -1}})
	if f, _ := s.AppendMessage(nil, OpBinary, nil); !bytes.Equal(f, []byte{0xC2, 0x01, 0x00}) {
		t.Fatalf("empty compressed %x", f)
	}
}

func TestCompressionThreshold(t *testing.T) {
	s := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{}})
	f, _ := s.AppendMessage(nil, OpText, bytes.Repeat([]byte("a"), DefaultCompressionThreshold-1))
	if f[0] != 0x81 {
		t.Fatalf("small message compressed: %x", f[0])
	}
	f, _ = s.AppendMessage(nil, OpText, bytes.Repeat([]byte("a"), DefaultCompressionThreshold))
	if f[0] != 0xC1 {
		t.Fatalf("message at threshold not compressed: %x", f[0])
	}
	// Streamed frames are never compressed.
	f, _ = s.AppendFrame(nil, OpText, bytes.Repeat([]byte("a"), 1000), true)
	if f[0] != 0x81 {
		t.Fatalf("streamed frame compressed: %x", f[0])
	}
}

func testPayload(rng *rand.Rand, n int, text bool) []byte {
	if text {
		b := randomUTF8ish(rng, n)
		if !validUTF8(b) {
			b = bytes.ToValidUTF8(b, []byte("?"))
		}
		return b
	}
	b := make([]byte, n)
	words := [][]byte{[]byte("alpha "), []byte("beta "), {0, 1, 2, 3}, []byte("gamma delta ")}
	for i := 0; i < n; {
		if rng.IntN(3) == 0 {
			b[i] = byte(rng.UintN(256))
			i++
		} else {
			i += copy(b[i:], words[rng.IntN(len(words))])
		}
	}
	return b
}

// TestDeflateMatrix round-trips messages between a client and a server for
// the parameter combinations of Autobahn cases 12 and 13.
func TestDeflateMatrix(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	params := []DeflateParams{
		{},
		{ClientNoContextTakeover: true},
		{ServerNoContextTakeover: true},
		{ServerNoContextTakeover: true, ClientNoContextTakeover: true},
		{ServerMaxWindowBits: 8, ClientMaxWindowBits: 8},
		{ServerMaxWindowBits: 9, ClientMaxWindowBits: 15},
		{ServerMaxWindowBits: 15, ClientMaxWindowBits: 9, ClientNoContextTakeover: true},
		{ServerMaxWindowBits: 12, ServerNoContextTakeover: true},
	}
	sizes := []int{0, 16, 64, 127, 128, 256, 1024, 4096, 8192, 16384, 32768, 65536, 131072}
	for i := range len(params) * 2 {
		pi, dp, context := i%len(params), params[i%len(params)], (i/len(params))*4096
		for _, level := range []int{0, 5, 9, -2} {
			if level == 9 && (pi%4 != 0 || context > 0) {
				continue // slow
			}
			co := CompressionOptions{Level: level, Threshold: 64, Context: context}
			c := NewProtocol(Config{Role: RoleClient, Deflate: &dp, Compression: co})
			s := NewProtocol(Config{Role: RoleServer, Deflate: &dp, Compression: co})
			for round := 0; round < 2; round++ {
				for _, n := range sizes {
					text := rng.IntN(2) == 0
					op := OpBinary
					if text {
						op = OpText
					}
					msg := testPayload(rng, n, text)
					for _, dir := range []struct{ from, to *Protocol }{{c, s}, {s, c}} {
						wire, err := dir.from.AppendMessage(nil, op, msg)
						if err != nil {
							t.Fatal(err)
						}
						if (wire[0]&0x40 != 0) != (n >= 64) {
							t.Fatalf("RSV1 %x for %d bytes", wire[0], n)
						}
						res := feed(t, dir.to, wire, func() int { return 1 + rng.IntN(3000) })
						if res.err != nil {
							t.Fatalf("params %d %+v level %d context %d size %d: %v", pi, dp, level, context, n, res.err)
						}
						if len(res.events) != 1 || res.events[0].Data != string(msg) || res.events[0].Op != op {
							t.Fatalf("params %+v level %d context %d size %d: payload differs", dp, level, context, n)
						}
					}
				}
			}
		}
	}
}

func compressRaw(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(data)
	w.Flush()
	b := buf.Bytes()
	return b[:len(b)-4]
}

// TestInflateLimit: a small compressed message that inflates beyond
// MaxMessageSize fails with 1009 without being inflated into memory.
func TestInflateLimit(t *testing.T) {
	const limit = 1 << 20
	bomb := compressRaw(t, make([]byte, 64<<20)) // 64 MiB of zeros, ~64 KiB compressed
	wire := frame(true, 4, OpBinary, nil, bomb)
	p := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}, MaxMessageSize: limit})
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	p.Receive(wire)
	total := 0
	var err error
	for {
		var ev Event
		ev, err = p.Next()
		if err != nil || ev.Kind == EventNone {
			break
		}
		total += len(ev.Payload)
	}
	runtime.ReadMemStats(&ms1)
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Code != StatusMessageTooBig {
		t.Fatalf("err %v", err)
	}
	if total > limit {
		t.Fatalf("delivered %d bytes beyond the limit", total)
	}
	if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("allocated %d bytes to reject the message", alloc)
	}
	checkPendingClose(t, "bomb", p, StatusMessageTooBig)

	// Exactly at the limit is fine, in several pieces of at most 32 KiB.
	exact := compressRaw(t, bytes.Repeat([]byte("ab"), limit/2))
	p = NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}, MaxMessageSize: limit})
	p.Receive(frame(true, 4, OpBinary, nil, exact))
	total, pieces := 0, 0
	for {
		ev, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == EventNone {
			break
		}
		pieces++
		total += len(ev.Payload)
		if len(ev.Payload) > inflateChunk {
			t.Fatalf("piece of %d bytes", len(ev.Payload))
		}
		// The last piece may be empty if the data ended exactly at a
		// piece boundary.
		if ev.Fin && total != limit {
			t.Fatalf("Fin at %d", total)
		}
	}
	if total != limit || pieces < limit/inflateChunk {
		t.Fatalf("total %d pieces %d", total, pieces)
	}
	// The compressed size is limited too.
	p = NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}, MaxMessageSize: 1000})
	p.Receive(frame(false, 4, OpBinary, nil, make([]byte, 1500)))
	p.Receive(frame(true, 0, OpContinuation, nil, make([]byte, 1500)))
	if _, err := p.Next(); !errors.As(err, &pe) || pe.Code != StatusMessageTooBig {
		t.Fatalf("compressed size limit: %v", err)
	}
}

func TestInflateErrors(t *testing.T) {
	cases := []struct {
		name  string
		frame []byte
		code  StatusCode
	}{
		{"garbage", unhex(t, "c2 04 ff ff ff ff"), StatusInvalidFramePayloadData},
		{"reserved block type", unhex(t, "c2 01 07"), StatusInvalidFramePayloadData},
		{"invalid utf8 text", frame(true, 4, OpText, nil, compressRaw(t, []byte("ab\xed\xa0\x80cd"))), StatusInvalidFramePayloadData},
		{"truncated utf8 text", frame(true, 4, OpText, nil, compressRaw(t, []byte("ab\xe2\x82"))), StatusInvalidFramePayloadData},
		{"rsv1 without deflate", unhex(t, "c1 07 f2 48 cd c9 c9 07 00"), StatusProtocolError},
	}
	for _, tc := range cases {
		cfg := Config{Role: RoleClient, Deflate: &DeflateParams{}}
		if tc.name == "rsv1 without deflate" {
			cfg.Deflate = nil
		}
		p := NewProtocol(cfg)
		res := feed(t, p, tc.frame, nil)
		var pe *ProtocolError
		if !errors.As(res.err, &pe) || pe.Code != tc.code {
			t.Errorf("%s: %v", tc.name, res.err)
		}
	}
	// Invalid UTF-8 in a large compressed text fails at the piece that
	// contains it, before the rest is inflated.
	text := append(bytes.Repeat([]byte("a"), 40000), 0xff)
	text = append(text, bytes.Repeat([]byte("b"), 100000)...)
	p := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}})
	p.Receive(frame(true, 4, OpText, nil, compressRaw(t, text)))
	n := 0
	for {
		ev, err := p.Next()
		if err != nil {
			break
		}
		n += len(ev.Payload)
		if ev.Kind == EventNone {
			t.Fatal("no error")
		}
	}
	if n >= 40000 {
		t.Fatalf("%d bytes delivered before the error", n)
	}
}

// TestDeflateZeroAllocsUncompressed: negotiating deflate does not cost
// allocations for messages below the threshold.
func TestDeflateSteadyState(t *testing.T) {
	c := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}})
	s := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}})
	msg := bytes.Repeat([]byte("hello world "), 40)
	var wire []byte
	run := func() {
		var err error
		wire, err = c.AppendMessage(wire[:0], OpText, msg)
		if err != nil {
			t.Fatal(err)
		}
		s.Receive(wire)
		for {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == EventNone {
				break
			}
		}
	}
	run()
	if n := testing.AllocsPerRun(50, run); n > 0 {
		t.Logf("%v allocs per compressed round trip", n)
	}
}

// TestContextTakeoverLong sends many messages with context takeover in both
// directions, so that the receiver's 32 KiB window slides many times.
func TestContextTakeoverLong(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	c := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}, Compression: CompressionOptions{Threshold: -1}})
	s := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{}, Compression: CompressionOptions{Threshold: -1}})
	var history [][]byte
	for i := 0; i < 400; i++ {
		var msg []byte
		if len(history) > 0 && rng.IntN(2) == 0 {
			// Repeat an earlier message so the compressor refers back.
			msg = append([]byte(nil), history[len(history)-1-rng.IntN(min(len(history), 20))]...)
		} else {
			msg = testPayload(rng, 1+rng.IntN(3000), false)
		}
		history = append(history, msg)
		for _, dir := range []struct{ from, to *Protocol }{{c, s}, {s, c}} {
			wire, err := dir.from.AppendMessage(nil, OpBinary, msg)
			if err != nil {
				t.Fatal(err)
			}
			res := feed(t, dir.to, wire, nil)
			if res.err != nil || len(res.events) != 1 || res.events[0].Data != string(msg) {
				t.Fatalf("message %d: %v", i, res.err)
			}
		}
	}
}

// TestInflateMeasured: a compressed message whose compressed bytes could
// inflate past the limit (more than limit/1032) is measured before it is
// inflated: one too big fails with 1009 before any of it is handed out, one
// of exactly the limit passes whole, and with the peer's context takeover
// the measure reads the same dictionary as the inflation.
func TestInflateMeasured(t *testing.T) {
	const limit = 100_000
	text := variedPayload(limit + 1)
	for _, tc := range []struct {
		name string
		msg  []byte
		code StatusCode // 0: passes
	}{
		{"bomb", make([]byte, 64<<20), StatusMessageTooBig},
		{"limit+1", text, StatusMessageTooBig},
		{"limit", text[:limit], 0},
	} {
		z := compressRaw(t, tc.msg)
		if !mayExceed(len(z), limit) {
			t.Fatalf("%s: %d bytes compressed are not measured", tc.name, len(z))
		}
		p := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}, MaxMessageSize: limit})
		res := feed(t, p, frame(true, 4, OpText, nil, z), nil)
		var pe *ProtocolError
		switch {
		case tc.code == 0:
			if res.err != nil || len(res.events) != 1 || res.events[0].Data != string(tc.msg) {
				t.Errorf("%s: %d events, %v", tc.name, len(res.events), res.err)
			}
		case !errors.As(res.err, &pe) || pe.Code != tc.code || res.pieces != 0:
			t.Errorf("%s: %v after %d pieces, want %d before any", tc.name, res.err, res.pieces, tc.code)
		default:
			checkPendingClose(t, tc.name, p, tc.code)
		}
	}

	// Context takeover: the second message refers back into the first.
	cp := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}, Compression: CompressionOptions{Threshold: -1}})
	sp := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{}, MaxMessageSize: limit})
	msg := text[:20000]
	for i := range 3 {
		wire, err := cp.AppendMessage(nil, OpText, msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, n, _ := ParseHeader(wire); i > 0 && !mayExceed(len(wire)-n, limit) {
			t.Fatalf("message %d: %d bytes compressed are not measured", i, len(wire)-n)
		}
		res := feed(t, sp, wire, nil)
		if res.err != nil || len(res.events) != 1 || res.events[0].Data != string(msg) {
			t.Fatalf("message %d with context takeover: %d events, %v", i, len(res.events), res.err)
		}
	}
}

// ovosLike returns n OVOS-shaped JSON messages of a few kinds, sizes of a
// few hundred bytes: what a bus relays most.
func ovosLike(rng *rand.Rand, n int) [][]byte {
	kinds := []string{
		`{"type": "recognizer_loop:utterance", "data": {"utterances": ["what time is it %d"], "lang": "en-us"}, "context": {"source": "audio", "destination": ["skills"], "session": {"session_id": "default", "lang": "en-us"}}}`,
		`{"type": "speak", "data": {"utterance": "It is %d minutes past ten.", "expect_response": false, "meta": {"skill": "skill-date-time.openvoiceos"}}, "context": {"source": ["skills"], "destination": "audio", "session": {"session_id": "default"}}}`,
		`{"type": "mycroft.skill.handler.start", "data": {"name": "TimeSkill.handle_query_time", "id": %d}, "context": {"skill_id": "skill-date-time.openvoiceos", "session": {"session_id": "default"}}}`,
		`{"type": "ovos.common_play.status", "data": {"state": %d, "media_type": "music", "position": 12345}, "context": {"source": "ocp", "session": {"session_id": "default"}}}`,
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf(kinds[rng.IntN(len(kinds))], rng.IntN(100000)))
	}
	return out
}

// TestCompressionContext: a server keeping a context (CompressionOptions.
// Context) compresses each message against the bytes of the compressed
// messages before it, its own and prepared ones alike, holds no compressor
// and at most Context bytes between messages, and a client decodes every
// message; the same messages take fewer bytes than without a context.
func TestCompressionContext(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	msgs := ovosLike(rng, 400)
	wire := func(context int) (int, *Protocol) {
		dp := DeflateParams{ServerNoContextTakeover: context == 0} // as Accept negotiates it
		s := NewProtocol(Config{Role: RoleServer, Deflate: &dp, Compression: CompressionOptions{Context: context}})
		c := NewProtocol(Config{Role: RoleClient, Deflate: &dp})
		total := 0
		for i, m := range msgs {
			var f []byte
			var err error
			switch i % 3 {
			case 0:
				f, err = s.AppendMessage(nil, OpText, m)
			case 1: // a broadcast: compressed for this connection when it keeps a context
				pm, _ := NewPreparedMessage(OpText, m, CompressionOptions{})
				if s.fl.contextual() {
					f, err = s.appendContextFrame(nil, pm)
				} else {
					f, err = s.PreparedFrame(pm)
				}
			case 2: // the shared, context-free frame: joins the context all the same
				pm, _ := NewPreparedMessage(OpText, m, CompressionOptions{})
				f, err = s.PreparedFrame(pm)
			}
			if err != nil {
				t.Fatal(err)
			}
			total += len(f)
			res := feed(t, c, f, func() int { return 1 + rng.IntN(500) })
			if res.err != nil || len(res.events) != 1 || res.events[0].Data != string(m) {
				t.Fatalf("context %d, message %d: %+v", context, i, res)
			}
			if s.fl.w != nil || len(s.fl.ctx) > context {
				t.Fatalf("context %d: a compressor kept (%v) or %d bytes of context", context, s.fl.w != nil, len(s.fl.ctx))
			}
		}
		return total, s
	}
	plain, _ := wire(0)
	small, s := wire(4096)
	if len(s.fl.ctx) != 4096 {
		t.Fatalf("context holds %d bytes, want 4096", len(s.fl.ctx))
	}
	if small >= plain*3/4 {
		t.Fatalf("%d bytes with a 4 KiB context, %d without: not a quarter less", small, plain)
	}
	t.Logf("%d messages: %d bytes without a context, %d with 4 KiB", len(msgs), plain, small)
	// A peer that limits the window gets no context: a dictionary could
	// reach past it.
	w := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{ServerMaxWindowBits: 12}, Compression: CompressionOptions{Context: 4096}})
	if w.fl.contextual() || w.fl.takeover {
		t.Fatal("a context with server_max_window_bits 12")
	}
}

// BenchmarkCompressContext: compressing OVOS-shaped messages without a
// context and against contexts of a few sizes (CompressionOptions.Context),
// with the bytes each takes on the wire per message.
func BenchmarkCompressContext(b *testing.B) {
	msgs := ovosLike(rand.New(rand.NewPCG(7, 8)), 256)
	for _, context := range []int{0, 1 << 10, 4 << 10, 8 << 10, 32 << 10} {
		b.Run(fmt.Sprintf("context=%d", context), func(b *testing.B) {
			dp := DeflateParams{ServerNoContextTakeover: context == 0}
			p := NewProtocol(Config{Role: RoleServer, Deflate: &dp, Compression: CompressionOptions{Context: context}})
			var dst []byte
			wire, plain := 0, 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m := msgs[i%len(msgs)]
				var err error
				if dst, err = p.AppendMessage(dst[:0], OpText, m); err != nil {
					b.Fatal(err)
				}
				wire += len(dst)
				plain += len(m)
			}
			b.ReportMetric(float64(wire)/float64(b.N), "wire-B/msg")
			b.ReportMetric(float64(plain)/float64(wire), "ratio")
		})
	}
}
