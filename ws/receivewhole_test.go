package ws

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// The tests of Receive's decoding of a whole frame (the frame that Next's
// fast path would take, received alone into the empty buffer): it must
// give what the general path gives, and every other use of the receive
// buffer must see the bytes as they were received.

// TestMaskCopyHi holds maskCopyHi against the reference mask for every
// length up to 300 (every block of mask_amd64.s's paths) and a few longer,
// with a byte of the result >= 0x80 at every position or none: the result
// is the masked source, nothing is written past n, and the returned value
// is 0 exactly when no such byte is there.
func TestMaskCopyHi(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range append(simdLengthsAll(), 383, 384, 385, 511, 512, 513, 1000, 4099) {
		if n == 0 {
			continue // maskCopyHi takes n > 0
		}
		for _, key := range [][4]byte{{0, 0, 0, 0}, {0x37, 0xfa, 0x21, 0x3d}, {byte(n), 1, 2, 3}} {
			k32 := binary.LittleEndian.Uint32(key[:])
			ats := []int{-1, 0, n - 1, n / 2, rng.IntN(n)}
			if n <= 300 {
				ats = ats[:0]
				for at := -1; at < n; at++ {
					ats = append(ats, at)
				}
			}
			for _, at := range ats {
				// The result (masked source) is ASCII but for position
				// at: build it and mask it to get the source.
				want := make([]byte, n)
				for i := range want {
					want[i] = byte(rng.UintN(0x80))
				}
				if at >= 0 {
					want[at] = 0x80 | byte(rng.Uint32())
				}
				src := append([]byte(nil), want...)
				maskRef(key, 0, src)
				dst := make([]byte, n+1)
				dst[n] = 0xAA
				hi := maskCopyHi(&dst[0], &src[0], n, k32)
				if !bytes.Equal(dst[:n], want) || dst[n] != 0xAA {
					t.Fatalf("n=%d key=%x: result differs from the reference mask", n, key)
				}
				if (hi == 0) != (at < 0) {
					t.Fatalf("n=%d key=%x byte >= 0x80 at %d: maskCopyHi returned %#x", n, key, at, hi)
				}
			}
		}
	}
}

func simdLengthsAll() []int {
	ns := make([]int, 300)
	for i := range ns {
		ns[i] = i
	}
	return ns
}

// frameChunks returns a chunker for lockstep that cuts w at its frames'
// ends (one Receive per frame, Receive's decoding case), as far as
// ParseHeader can tell where a frame ends; the rest goes in one piece.
func frameChunks(w []byte) func() int {
	rest := w
	return func() int {
		h, n, err := ParseHeader(rest)
		if err != nil || n == 0 || int64(len(rest)-n) < h.Length {
			return len(rest)
		}
		l := n + int(h.Length)
		rest = rest[l:]
		return l
	}
}

// TestReceiveWholeMatchesGeneralPath: randomWire's streams fed a frame per
// Receive, so that every well-formed small frame is decoded by Receive,
// give the general path's events, errors and state, Next call by Next
// call; and so do streams in which a frame is decoded by Receive and more
// bytes follow (another frame, a piece of one) before Next is called, or
// the general path itself is asked (next).
func TestReceiveWholeMatchesGeneralPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 6455))
	decoded := 0
	for iter := range 2000 {
		role := Role(iter & 1)
		cfg := Config{Role: role}
		if iter&2 != 0 {
			cfg.Deflate = &DeflateParams{}
		}
		if iter&4 != 0 {
			cfg.MaxFrameSize, cfg.MaxMessageSize = 100, 200
		}
		w := randomWire(rng, role, cfg.Deflate != nil)
		t.Run(fmt.Sprint(iter), func(t *testing.T) {
			n, _ := lockstep(t, cfg, w, frameChunks(w))
			decoded += n
		})
	}
	if decoded == 0 {
		t.Fatal("no events decoded")
	}
}

// TestReceiveWholeTaken: Receive decodes exactly the frames it is meant to
// (ready set) and leaves the rest, with the bytes as received.
func TestReceiveWholeTaken(t *testing.T) {
	for _, role := range []Role{RoleServer, RoleClient} {
		var key, wrongKey []byte
		if role == RoleServer {
			key = testKey
		} else {
			wrongKey = testKey
		}
		text := func(n int) []byte { return bytes.Repeat([]byte{'a'}, n) }
		for _, c := range []struct {
			name  string
			w     []byte
			ready bool
		}{
			{"text 125", frame(true, 0, OpText, key, text(125)), true},
			{"text 126", frame(true, 0, OpText, key, text(126)), true},
			{"binary 0xFFFF", frame(true, 0, OpBinary, key, make([]byte, 0xFFFF)), true},
			{"binary 8", frame(true, 0, OpBinary, key, make([]byte, 8)), true},
			{"non-ASCII text", frame(true, 0, OpText, key, []byte("héllo wörld, 你好 🙂")), true},
			{"empty text", frame(true, 0, OpText, key, nil), false},
			{"2 bytes of payload", frame(true, 0, OpBinary, key, make([]byte, 2)), role == RoleServer},
			{"6 bytes", frame(true, 0, OpBinary, nil, make([]byte, 4)), false},
			{"non-minimal 16-bit length", append([]byte{0x82, 126 | byte(len(key))<<5, 0, 10}, append(append([]byte(nil), key...), text(10)...)...), false},
			{"binary 0x10000 (64-bit length)", frame(true, 0, OpBinary, key, make([]byte, 0x10000)), false},
			{"fragment", frame(false, 0, OpText, key, text(10)), false},
			{"continuation", frame(true, 0, OpContinuation, key, text(10)), false},
			{"rsv1", frame(true, 4, OpText, key, text(10)), false},
			{"rsv3", frame(true, 1, OpBinary, key, text(10)), false},
			{"ping", frame(true, 0, OpPing, key, text(10)), false},
			{"close", frame(true, 0, OpClose, key, []byte{3, 0xe8, 'o', 'k'}), false},
			{"reserved opcode", frame(true, 0, Opcode(3), key, text(10)), false},
			{"wrongly masked", frame(true, 0, OpBinary, wrongKey, text(10)), false},
			{"invalid UTF-8", frame(true, 0, OpText, key, []byte("abc\xed\xa0\x80defgh")), false},
			{"one byte short", frame(true, 0, OpBinary, key, text(20))[:len(frame(true, 0, OpBinary, key, text(20)))-1], false},
			{"one byte more", append(frame(true, 0, OpBinary, key, text(20)), 0x81), false},
			{"two frames", append(frame(true, 0, OpBinary, key, text(20)), frame(true, 0, OpBinary, key, text(3))...), false},
		} {
			p := NewProtocol(Config{Role: role})
			data := append([]byte(nil), c.w...)
			p.Receive(data)
			if got := p.ready != 0; got != c.ready {
				t.Errorf("%v %s: decoded by Receive %v, want %v", role, c.name, got, c.ready)
			}
			if p.Buffered() != len(c.w) {
				t.Errorf("%v %s: Buffered %d, want %d", role, c.name, p.Buffered(), len(c.w))
			}
			if !c.ready && !bytes.Equal(p.buf[p.r:], c.w) {
				t.Errorf("%v %s: not decoded, but the buffer does not hold the bytes received", role, c.name)
			}
			if c.ready {
				_, hn, _ := ParseHeader(c.w)
				clear(data) // Receive copied: the caller may reuse data
				ev, err := p.Next()
				want := c.w[hn:]
				if key != nil {
					want = append([]byte(nil), want...)
					MaskBytes([4]byte(key), 0, want)
				}
				if err != nil || ev.Kind != EventMessage || !ev.Fin || ev.Op != Opcode(c.w[0]&0xF) || !bytes.Equal(ev.Payload, want) {
					t.Errorf("%v %s: %v %v op %v fin %v, %d bytes, want %d", role, c.name, err, ev.Kind, ev.Op, ev.Fin, len(ev.Payload), len(want))
				}
				if p.ready != 0 || p.Buffered() != 0 {
					t.Errorf("%v %s: after Next ready %d, %d bytes buffered", role, c.name, p.ready, p.Buffered())
				}
			}
		}
	}
	// Above a configured limit (wholeMax) Receive leaves the frame to the
	// general path, which fails the connection.
	p := NewProtocol(Config{Role: RoleClient, MaxMessageSize: 10})
	p.Receive(frame(true, 0, OpBinary, nil, make([]byte, 11)))
	if p.ready != 0 {
		t.Error("a frame above the message limit was decoded by Receive")
	}
	if _, err := p.Next(); err != errMsgTooBig {
		t.Errorf("above the message limit: %v, want %v", err, errMsgTooBig)
	}
	// Invalid UTF-8 fails as RFC 6455 §8.1 wants, with 1007 queued.
	p = NewProtocol(Config{Role: RoleServer})
	p.Receive(frame(true, 0, OpText, testKey, []byte("abcdefgh\xc0\xaf")))
	if _, err := p.Next(); err != errBadUTF8 {
		t.Errorf("invalid UTF-8: %v, want %v", err, errBadUTF8)
	}
	if cl := p.AppendPendingClose(nil); len(cl) < 4 || binary.BigEndian.Uint16(cl[2:]) != uint16(StatusInvalidFramePayloadData) {
		t.Errorf("invalid UTF-8: pending close %x, want code 1007", cl)
	}
}

// TestReceiveWholeThenMore: after Receive decoded a frame, whatever comes
// before Next (another Receive, ReadBuffer and Commit, a failure of the
// general path, the general path itself) sees the frame as it was
// received, and the events are those of the bytes received.
func TestReceiveWholeThenMore(t *testing.T) {
	msg := []byte("hello, this is a frame of the fast path")
	for _, role := range []Role{RoleServer, RoleClient} {
		var key []byte
		if role == RoleServer {
			key = testKey
		}
		first := frame(true, 0, OpText, key, msg)
		second := frame(true, 0, OpBinary, key, []byte("second frame"))
		for _, c := range []struct {
			name string
			feed func(p *Protocol)
		}{
			{"Receive", func(p *Protocol) { p.Receive(second) }},
			{"Receive byte by byte", func(p *Protocol) {
				for i := range second {
					p.Receive(second[i : i+1])
				}
			}},
			{"ReadBuffer and Commit", func(p *Protocol) {
				b := p.ReadBuffer(len(second))
				p.Commit(copy(b, second))
			}},
			{"ReadBuffer that grows the buffer", func(p *Protocol) {
				b := p.ReadBuffer(1 << 16)
				p.Commit(copy(b, second))
			}},
		} {
			p := NewProtocol(Config{Role: role, ReadBufferSize: 128})
			p.Receive(first)
			if p.ready == 0 {
				t.Fatalf("%v %s: the first frame was not decoded by Receive", role, c.name)
			}
			c.feed(p)
			if p.ready != 0 {
				t.Fatalf("%v %s: still marked decoded", role, c.name)
			}
			if p.Buffered() != len(first)+len(second) {
				t.Fatalf("%v %s: %d bytes buffered, want %d", role, c.name, p.Buffered(), len(first)+len(second))
			}
			for i, want := range []struct {
				op      Opcode
				payload string
			}{{OpText, string(msg)}, {OpBinary, "second frame"}} {
				ev, err := p.Next()
				if err != nil || ev.Kind != EventMessage || ev.Op != want.op || string(ev.Payload) != want.payload {
					t.Fatalf("%v %s: event %d: %v %+v, want %v %q", role, c.name, i, err, ev, want.op, want.payload)
				}
			}
			if ev, err := p.Next(); err != nil || ev.Kind != EventNone {
				t.Fatalf("%v %s: after both frames %v %+v", role, c.name, err, ev)
			}
		}
		// The general path called directly decodes the frame itself.
		p := NewProtocol(Config{Role: role})
		p.Receive(first)
		if ev, err := p.next(); err != nil || string(ev.Payload) != string(msg) || p.ready != 0 {
			t.Fatalf("%v general path after Receive's decoding: %v %q", role, err, ev.Payload)
		}
		// A Close queued by our side in the meantime (CloseSent) does not
		// stop the frame: data may still arrive (RFC 6455 §5.5.1).
		p = NewProtocol(Config{Role: role})
		p.Receive(first)
		if _, err := p.AppendClose(nil, StatusNormalClosure, ""); err != nil {
			t.Fatal(err)
		}
		if ev, err := p.Next(); err != nil || string(ev.Payload) != string(msg) {
			t.Fatalf("%v after our Close: %v %q", role, err, ev.Payload)
		}
		// After the peer's Close, Receive discards what follows.
		p = NewProtocol(Config{Role: role})
		p.Receive(frame(true, 0, OpClose, key, nil))
		if ev, err := p.Next(); err != nil || ev.Kind != EventClose {
			t.Fatalf("%v close: %v %+v", role, err, ev)
		}
		p.Receive(first)
		if p.ready != 0 || p.Buffered() != 0 {
			t.Fatalf("%v: a frame after the peer's Close was kept", role)
		}
		if _, err := p.Next(); !errors.Is(err, ErrClosed) {
			t.Fatalf("%v: after the peer's Close: %v", role, err)
		}
	}
}

// TestMaskKeys: a client's masking keys come from its own generator,
// seeded per Protocol: consecutive keys differ, two Protocols start apart,
// and each frame carries the key its payload was masked with.
func TestMaskKeys(t *testing.T) {
	a, b := NewProtocol(Config{Role: RoleClient}), NewProtocol(Config{Role: RoleClient})
	if a.keys == b.keys {
		t.Fatalf("two Protocols start with the same generator state %#x", a.keys)
	}
	seen := map[uint32]bool{}
	for i := range 1000 {
		k := a.maskKey()
		if seen[k] {
			t.Fatalf("key %#x repeated within %d keys", k, i)
		}
		seen[k] = true
	}
	sv := NewProtocol(Config{Role: RoleServer})
	payload := []byte("a payload to mask and unmask")
	for range 10 {
		w, err := b.AppendMessage(nil, OpText, payload)
		if err != nil {
			t.Fatal(err)
		}
		h, n, err := ParseHeader(w)
		if err != nil || !h.Masked {
			t.Fatalf("client frame: %+v %v", h, err)
		}
		got := append([]byte(nil), w[n:]...)
		MaskBytes(h.Mask, 0, got)
		if !bytes.Equal(got, payload) {
			t.Fatalf("unmasked with its header's key: %q", got)
		}
		sv.Receive(w)
		if ev, err := sv.Next(); err != nil || !bytes.Equal(ev.Payload, payload) {
			t.Fatalf("server: %v %q", err, ev.Payload)
		}
	}
}

// TestAppendMessageSmall: a server's AppendMessage (copySmall up to 256
// bytes under AVX2, copy above) encodes what AppendFrame encodes for every
// payload length around those paths, behind bytes already in dst.
func TestAppendMessageSmall(t *testing.T) {
	payload := benchPayload(600)
	p := NewProtocol(Config{Role: RoleServer})
	for n := 0; n <= 600; n++ {
		for _, op := range []Opcode{OpText, OpBinary} {
			got, err := p.AppendMessage([]byte("prefix"), op, payload[:n])
			if err != nil {
				t.Fatal(err)
			}
			want, err := p.AppendFrame([]byte("prefix"), op, payload[:n], true)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%v %d bytes: AppendMessage %x, AppendFrame %x", op, n, got, want)
			}
		}
	}
}

// TestReceiveOwnBuffer: data that lies in the receive buffer itself (an
// Event's Payload handed back, a frame inside a frame) is received as a
// copy of it would be: Receive copies it as copy does, overlap and all.
func TestReceiveOwnBuffer(t *testing.T) {
	for _, role := range []Role{RoleServer, RoleClient} {
		var key []byte
		if role == RoleServer {
			key = testKey
		}
		for _, n := range []int{6, 7, 20, 125, 126, 300} {
			inner := frame(true, 0, OpBinary, key, bytes.Repeat([]byte("0123456789"), n)[:n])
			outer := frame(true, 0, OpBinary, key, inner)
			p := NewProtocol(Config{Role: role})
			p.Receive(outer)
			ev, err := p.Next()
			if err != nil || !bytes.Equal(ev.Payload, inner) {
				t.Fatalf("%v %d: outer frame: %v", role, n, err)
			}
			p.Receive(ev.Payload) // a piece of p's own buffer
			ev, err = p.Next()
			if err != nil || ev.Kind != EventMessage || !bytes.Equal(ev.Payload, bytes.Repeat([]byte("0123456789"), n)[:n]) {
				t.Fatalf("%v %d: inner frame from the buffer itself: %v %q", role, n, err, ev.Payload)
			}
		}
	}
}
