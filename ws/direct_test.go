package ws

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// collector reassembles events as feed does.
type collector struct {
	t     testing.TB
	res   feedResult
	cur   []byte
	op    Opcode
	inMsg bool
}

// add records ev; it reports whether the stream ended (a Close).
func (c *collector) add(ev Event) bool {
	switch ev.Kind {
	case EventMessage:
		c.res.pieces++
		if !c.inMsg {
			c.inMsg, c.op, c.cur = true, ev.Op, nil
		} else if ev.Op != c.op {
			c.t.Fatalf("op changed within message: %v -> %v", c.op, ev.Op)
		}
		c.cur = append(c.cur, ev.Payload...)
		if ev.Fin {
			c.res.events = append(c.res.events, rec{Kind: EventMessage, Op: c.op, Data: string(c.cur)})
			c.inMsg = false
		}
	case EventPing, EventPong:
		c.res.events = append(c.res.events, rec{Kind: ev.Kind, Data: string(ev.Payload)})
	case EventClose:
		c.res.events = append(c.res.events, rec{Kind: ev.Kind, Code: ev.Code, Reason: ev.Reason})
		return true
	}
	return false
}

// feedDirect passes data to p the way Conn does: with ReadBuffer and
// Commit in chunks from chunk, and, where PayloadWanted allows and rng says
// so, payload bytes straight to ReceivePayload in the caller's memory.
func feedDirect(t testing.TB, p *Protocol, data []byte, rng *rand.Rand, chunk func() int) feedResult {
	t.Helper()
	c := &collector{t: t}
	fail := func(err error) feedResult {
		c.res.err = err
		return c.res
	}
	fed := 0
	for fed < len(data) {
		n := min(len(data)-fed, max(1, chunk()))
		if want := p.PayloadWanted(); want > 0 && rng.IntN(2) == 0 {
			n = int(min(int64(n), want))
			b := append([]byte(nil), data[fed:fed+n]...)
			fed += n
			ev, err := p.ReceivePayload(b)
			if err != nil {
				return fail(err)
			}
			if ev.Kind != EventMessage || !bytes.Equal(ev.Payload, b) {
				t.Fatalf("ReceivePayload returned %v with %d bytes for %d", ev.Kind, len(ev.Payload), len(b))
			}
			c.add(ev)
			continue
		}
		buf := p.ReadBuffer(1 + rng.IntN(64))
		n = copy(buf, data[fed:fed+n])
		p.Commit(n)
		fed += n
		for {
			ev, err := p.Next()
			if err != nil {
				return fail(err)
			}
			if ev.Kind == EventNone {
				break
			}
			if c.add(ev) {
				// Nothing after a Close is processed.
				copy(p.ReadBuffer(len(data)-fed), data[fed:])
				p.Commit(len(data) - fed)
				if _, err := p.Next(); !errors.Is(err, ErrClosed) {
					t.Fatalf("Next after close: %v", err)
				}
				return c.res
			}
		}
	}
	return c.res
}

// checkDirect compares feeding data whole with Receive to feeding it with
// ReadBuffer, Commit and ReceivePayload in random pieces.
func checkDirect(t *testing.T, cfg Config, data []byte, seed uint64) {
	t.Helper()
	want := feed(t, NewProtocol(cfg), data, nil)
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	got := feedDirect(t, NewProtocol(cfg), data, rng, func() int { return 1 + rng.IntN(1+int(seed%300)) })
	if len(got.events) != len(want.events) {
		t.Fatalf("seed %d: direct: %d events, whole: %d (errors %v, %v)", seed, len(got.events), len(want.events), got.err, want.err)
	}
	for i := range got.events {
		if got.events[i] != want.events[i] {
			t.Fatalf("seed %d: event %d differs: %+v, want %+v", seed, i, got.events[i], want.events[i])
		}
	}
	var pw, pg *ProtocolError
	if errors.As(want.err, &pw) != errors.As(got.err, &pg) || (pw != nil && pw.Code != pg.Code) {
		t.Fatalf("seed %d: errors differ: whole %v, direct %v", seed, want.err, got.err)
	}
}

// randomStream builds frames from a client (masked) or a server: messages
// in one or more frames, text and binary, control frames in between, and
// now and then a broken one (invalid UTF-8, a stray continuation).
func randomStream(rng *rand.Rand, masked bool) []byte {
	var key []byte
	if masked {
		key = testKey
	}
	var out []byte
	for range 1 + rng.IntN(8) {
		op := OpBinary
		size := rng.IntN(3000)
		if rng.IntN(8) == 0 {
			size = 20000 + rng.IntN(50000)
		}
		payload := make([]byte, size)
		if rng.IntN(2) == 0 {
			op = OpText
			text := []byte("héllo wörld, κόσμε ")
			for i := range payload {
				payload[i] = text[i%len(text)]
			}
			if size > 0 && rng.IntN(10) == 0 {
				payload[rng.IntN(size)] = 0xff
			}
		} else {
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
		}
		parts := 1 + rng.IntN(3)
		for i := range parts {
			lo, hi := i*size/parts, (i+1)*size/parts
			o := OpContinuation
			if i == 0 {
				o = op
			}
			out = append(out, frame(i == parts-1, 0, o, key, payload[lo:hi])...)
			if rng.IntN(4) == 0 {
				out = append(out, frame(true, 0, OpPing, key, []byte("ping"))...)
			}
		}
		if rng.IntN(40) == 0 {
			out = append(out, frame(true, 0, OpContinuation, key, []byte("stray"))...)
		}
	}
	if rng.IntN(3) == 0 {
		out = append(out, frame(true, 0, OpClose, key, []byte{0x03, 0xe8, 'b', 'y', 'e'})...)
		out = append(out, frame(true, 0, OpText, key, []byte("after close"))...)
	}
	return out
}

func TestDirectReceiveMatchesReceive(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 99))
		cfg := Config{Role: RoleServer}
		if seed%2 == 1 {
			cfg.Role = RoleClient
		}
		if seed%5 == 0 {
			cfg.MaxMessageSize = 30000
		}
		checkDirect(t, cfg, randomStream(rng, cfg.Role == RoleServer), seed)
	}
}

// TestDirectFuzzCorpus runs FuzzProtocol's seed corpus through the direct
// path.
func TestDirectFuzzCorpus(t *testing.T) {
	files, _ := filepath.Glob("testdata/fuzz/FuzzProtocol/*")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 4 {
			continue
		}
		arg := func(s, prefix string) string { return strings.TrimSuffix(strings.TrimPrefix(s, prefix+"("), ")") }
		data, err1 := strconv.Unquote(arg(lines[1], "[]byte"))
		seed, err2 := strconv.ParseUint(arg(lines[2], "uint64"), 0, 64)
		flagStr := arg(lines[3], "byte")
		var flags uint64
		var err3 error
		if strings.HasPrefix(flagStr, "'") {
			var r string
			r, err3 = strconv.Unquote(flagStr)
			if err3 == nil && len(r) > 0 {
				flags = uint64(r[0])
			}
		} else {
			flags, err3 = strconv.ParseUint(flagStr, 0, 8)
		}
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("%s: cannot parse: %v %v %v", name, err1, err2, err3)
		}
		cfg := Config{Role: RoleServer}
		if flags&1 != 0 {
			cfg.Role = RoleClient
		}
		if flags&2 != 0 {
			cfg.Deflate = &DeflateParams{ClientNoContextTakeover: flags&8 == 0, ServerNoContextTakeover: flags&8 == 0}
		}
		if flags&4 != 0 {
			cfg.MaxFrameSize = 200
			cfg.MaxMessageSize = 300
		}
		checkDirect(t, cfg, []byte(data), seed)
	}
}

func FuzzProtocolDirect(f *testing.F) {
	f.Add([]byte("\x81\x05Hello"), uint64(1), byte(1))
	f.Add([]byte("\x81\x857\xfa!=\x7f\x9fMQX"), uint64(2), byte(0))
	f.Add([]byte("\x01\x83\x00\x00\x00\x00\xce\xba\x80\x89\x80\x00\x00\x00\x00\x80\x81\x00\x00\x00\x00\xe2"), uint64(5), byte(0))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, flags byte) {
		cfg := Config{Role: RoleServer}
		if flags&1 != 0 {
			cfg.Role = RoleClient
		}
		if flags&2 != 0 {
			cfg.Deflate = &DeflateParams{ClientNoContextTakeover: flags&8 == 0, ServerNoContextTakeover: flags&8 == 0}
		}
		if flags&4 != 0 {
			cfg.MaxFrameSize = 200
			cfg.MaxMessageSize = 300
		}
		checkDirect(t, cfg, data, seed)
	})
}

func TestReceivePayloadLimits(t *testing.T) {
	p := NewProtocol(Config{Role: RoleServer})
	if p.PayloadWanted() != 0 {
		t.Fatal("PayloadWanted before any frame")
	}
	payload := bytes.Repeat([]byte("x"), 1000)
	wire := frame(true, 0, OpBinary, testKey, payload)
	copy(p.ReadBuffer(100), wire[:100])
	p.Commit(100)
	ev, err := p.Next()
	if err != nil || ev.Kind != EventMessage || len(ev.Payload) != 100-8 {
		t.Fatalf("Next: %v %v %d", ev.Kind, err, len(ev.Payload))
	}
	if w := p.PayloadWanted(); w != 1000-92 {
		t.Fatalf("PayloadWanted = %d, want %d", w, 1000-92)
	}
	if _, err := p.ReceivePayload(make([]byte, 1000)); err == nil {
		t.Fatal("ReceivePayload took more than the frame holds")
	}
	rest := append([]byte(nil), wire[100:]...)
	ev, err = p.ReceivePayload(rest)
	if err != nil || !ev.Fin || !bytes.Equal(ev.Payload, payload[92:]) {
		t.Fatalf("ReceivePayload: %v fin=%v", err, ev.Fin)
	}
	if p.PayloadWanted() != 0 {
		t.Fatal("PayloadWanted after the frame")
	}
	// Buffered bytes must go through Next first.
	copy(p.ReadBuffer(10), wire[:10])
	p.Commit(10)
	if p.PayloadWanted() != 0 {
		t.Fatal("PayloadWanted with unprocessed bytes")
	}
}

func TestReadBufferGrowsAndShrinks(t *testing.T) {
	p := NewProtocol(Config{Role: RoleClient, ReadBufferSize: 64})
	big := frame(true, 0, OpBinary, nil, make([]byte, 2<<20))
	b := p.ReadBuffer(10)
	if len(b) != 64 {
		t.Fatalf("first ReadBuffer: %d bytes, want 64", len(b))
	}
	// A partial header stays; asking for more than fits grows the buffer.
	b[0] = big[0]
	p.Commit(1)
	if b := p.ReadBuffer(2 << 20); len(b) < 2<<20 {
		t.Fatalf("ReadBuffer(2 MiB): %d bytes", len(b))
	}
	b = p.ReadBuffer(len(big))
	copy(b, big[1:])
	p.Commit(len(big) - 1)
	for {
		ev, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == EventNone || ev.Fin {
			break
		}
	}
	// Everything processed: the huge buffer is let go.
	if b := p.ReadBuffer(10); len(b) != 64 {
		t.Fatalf("ReadBuffer after the big message: %d bytes, want 64", len(b))
	}
}

func TestMaskCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 200 {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		key := [4]byte{byte(n), 0xfa, 0x21, 0x3d}
		want := append([]byte(nil), src...)
		maskRef(key, 0, want)
		got := make([]byte, n)
		maskCopy(got, src, binary.LittleEndian.Uint32(key[:]))
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: maskCopy differs from the reference", n)
		}
	}
}

func TestAppendMessageHeader(t *testing.T) {
	payload := bytes.Repeat([]byte("y"), 300)
	sv := NewProtocol(Config{Role: RoleServer})
	h, ok, err := sv.AppendMessageHeader(nil, OpText, len(payload))
	if err != nil || !ok {
		t.Fatalf("server: ok=%v err=%v", ok, err)
	}
	whole, _ := sv.AppendMessage(nil, OpText, payload)
	if !bytes.Equal(append(h, payload...), whole) {
		t.Fatal("header + payload differs from AppendMessage")
	}
	if _, ok, err := NewProtocol(Config{Role: RoleClient}).AppendMessageHeader(nil, OpText, 300); ok || err != nil {
		t.Fatalf("client: ok=%v err=%v, want false, nil", ok, err)
	}
	fl := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{ServerNoContextTakeover: true}})
	if _, ok, _ := fl.AppendMessageHeader(nil, OpText, 300); ok {
		t.Fatal("a message to compress got a plain header")
	}
	if _, ok, _ := fl.AppendMessageHeader(nil, OpText, 10); !ok {
		t.Fatal("a message under the compression threshold got no header")
	}
	if _, _, err := sv.AppendMessageHeader(nil, OpPing, 3); err == nil {
		t.Fatal("a control opcode was accepted")
	}
}

// bufferedEchoServer echoes with BufferMessage on a raw listener.
func bufferedEchoServer(t *testing.T, opts *AcceptOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c, _, err := UpgradeConn(nc, opts)
				if err != nil {
					return
				}
				defer c.CloseNow()
				var buf []byte
				for {
					op, msg, err := c.ReadMessageInto(context.Background(), buf[:0])
					if err != nil {
						return
					}
					buf = msg
					if err := c.BufferMessage(op, msg); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "ws://" + ln.Addr().String() + "/"
}

func TestBufferMessageEcho(t *testing.T) {
	for _, compress := range []bool{false, true} {
		url := bufferedEchoServer(t, &AcceptOptions{EnableCompression: compress, MaxMessageSize: 4 << 20})
		c := dialT(t, url, &DialOptions{EnableCompression: compress, MaxMessageSize: 4 << 20})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rng := rand.New(rand.NewPCG(7, 8))
		sizes := []int{0, 1, 200, 5000, 40000, 1 << 20}
		for range 50 {
			sizes = append(sizes, rng.IntN(3000))
		}
		msgs := make([][]byte, len(sizes))
		for i, n := range sizes {
			msgs[i] = make([]byte, n)
			for j := range msgs[i] {
				msgs[i][j] = byte(rng.Uint32())
			}
		}
		// Ping-pong: each echo must come back without another message
		// pushing it out.
		for i, m := range msgs {
			if err := c.WriteMessage(ctx, BinaryMessage, m); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.ReadMessage(ctx)
			if err != nil || !bytes.Equal(got, m) {
				t.Fatalf("compress=%v: echo %d (%d bytes): %v", compress, i, len(m), err)
			}
		}
		// Pipelined: all sent, then all read back in order.
		go func() {
			for _, m := range msgs {
				c.WriteMessage(ctx, BinaryMessage, m)
			}
		}()
		for i, m := range msgs {
			_, got, err := c.ReadMessage(ctx)
			if err != nil || !bytes.Equal(got, m) {
				t.Fatalf("compress=%v: pipelined echo %d (%d bytes): %v", compress, i, len(m), err)
			}
		}
		cancel()
	}
}

// TestBufferMessageOrder: buffered frames go out before a later
// WriteMessage, before a pong, with Flush, and before the close frame.
func TestBufferMessageOrder(t *testing.T) {
	srv, cli := net.Pipe()
	sc := newConn(srv, connConfig{role: RoleServer})
	cc := newConn(cli, connConfig{role: RoleClient})
	defer sc.CloseNow()
	defer cc.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		for {
			_, b, err := cc.ReadMessage(ctx)
			if err != nil {
				done <- err
				return
			}
			got <- string(b)
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case s := <-got:
			if s != want {
				t.Fatalf("got %q, want %q", s, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %q", want)
		}
	}
	if err := sc.BufferMessage(TextMessage, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := sc.BufferMessage(TextMessage, []byte("b")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		t.Fatalf("%q arrived before a flush", s)
	case <-time.After(50 * time.Millisecond):
	}
	if err := sc.WriteMessage(ctx, TextMessage, []byte("c")); err != nil {
		t.Fatal(err)
	}
	expect("a")
	expect("b")
	expect("c")

	sc.BufferMessage(BinaryMessage, []byte("d"))
	if err := sc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	expect("d")
	if err := sc.Flush(ctx); err != nil {
		t.Fatal("Flush with nothing buffered:", err)
	}

	// A read that has to wait writes what is buffered.
	sc.BufferMessage(BinaryMessage, []byte("e"))
	readDone := make(chan error, 1)
	go func() {
		_, _, err := sc.ReadMessage(ctx)
		readDone <- err
	}()
	expect("e")

	// Close sends the buffered frames first.
	sc.BufferMessage(BinaryMessage, []byte("f"))
	go sc.Close(StatusNormalClosure, "")
	expect("f")
	var ce *CloseError
	if err := <-done; !errors.As(err, &ce) || ce.Code != StatusNormalClosure {
		t.Fatalf("client read ended with %v, want a close 1000", err)
	}
	<-readDone
}

// TestBufferMessageFull: a buffer about to overflow is written at once.
func TestBufferMessageFull(t *testing.T) {
	srv, cli := net.Pipe()
	sc := newConn(srv, connConfig{role: RoleServer, writeBufferSize: 1024})
	cc := newConn(cli, connConfig{role: RoleClient})
	defer sc.CloseNow()
	defer cc.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		for range 3 {
			sc.BufferMessage(BinaryMessage, make([]byte, 400))
		}
	}()
	for i := range 2 {
		if _, b, err := cc.ReadMessage(ctx); err != nil || len(b) != 400 {
			t.Fatalf("message %d: %d bytes, %v", i, len(b), err)
		}
	}
}
