package ws

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// The differential tests of Next's fast path and of the
// one-shot validUTF8: every input gives, Next call by Next call, the same
// events, the same errors and the same receive state with the fast path as
// with the general path alone (next), fed whole, byte by byte and in
// random chunks; and validUTF8 agrees with the incremental UTF8Validator.

// recvState is the receive-side state that the fast path must leave as the
// general path does. The state of a frame (hdr, remaining, maskPos) counts
// only while the frame is being received, the state of a message (msgOp,
// msgCompressed, utf8; msgSize of an uncompressed message) only while the
// message is open or being inflated, and neither after a failure or a Close frame: nothing reads it
// then, and the fast path does not write it for a frame and message that
// end where they start.
type recvState struct {
	st                                State
	r, buffered                       int
	inFrame                           bool
	hdr                               Header
	remaining                         int64
	maskPos                           int
	msgOpen, msgCompressed, inflating bool
	msgOp                             Opcode
	msgSize                           int64
	utf8                              UTF8Validator
}

func snapshot(p *Protocol) recvState {
	s := recvState{st: p.State(), r: p.r, buffered: p.Buffered()}
	if s.st == StateClosed || s.st == StateCloseReceived {
		return s
	}
	s.inFrame, s.msgOpen, s.inflating = p.inFrame, p.msgOpen, p.inflating
	if p.inFrame {
		s.hdr, s.remaining, s.maskPos = p.hdr, p.remaining, p.maskPos
	}
	if p.msgOpen || p.inflating {
		s.msgOp, s.msgCompressed, s.utf8 = p.msgOp, p.msgCompressed, p.utf8
		if !p.msgCompressed {
			s.msgSize = p.msgSize // counted for uncompressed messages only
		}
	}
	return s
}

// lockstep feeds data in the chunks chunk draws (nil: whole) to a Protocol
// with the fast path and to one without, calls Next on both after every
// chunk until either needs more input, and fails t at the first
// difference. It returns the number of events and whether the connection
// failed.
func lockstep(t *testing.T, cfg Config, data []byte, chunk func() int) (events int, failed bool) {
	t.Helper()
	fast, gen := NewProtocol(cfg), NewProtocol(cfg)
	// The fast side's Event is reused, as a receive loop does with
	// NextInto, and starts with every field set: NextInto must overwrite
	// them all.
	fe := Event{Kind: EventClose, Op: OpBinary, Payload: []byte("stale"), Fin: true, Code: StatusGoingAway, Reason: "stale"}
	for fed := 0; fed < len(data); {
		n := len(data) - fed
		if chunk != nil {
			n = min(n, max(1, chunk()))
		}
		fast.Receive(data[fed : fed+n])
		gen.Receive(data[fed : fed+n])
		fed += n
		for {
			ferr := fast.NextInto(&fe)
			ge, gerr := gen.next()
			if (ferr == nil) != (gerr == nil) || (ferr != nil && ferr.Error() != gerr.Error()) {
				t.Fatalf("event %d: error %v, general path %v", events, ferr, gerr)
			}
			if fe.Kind != ge.Kind || fe.Op != ge.Op || fe.Fin != ge.Fin || fe.Code != ge.Code ||
				fe.Reason != ge.Reason || !bytes.Equal(fe.Payload, ge.Payload) || cap(fe.Payload)-len(fe.Payload) != cap(ge.Payload)-len(ge.Payload) {
				t.Fatalf("event %d: %+v, general path %+v", events, fe, ge)
			}
			if fs, gs := snapshot(fast), snapshot(gen); fs != gs {
				t.Fatalf("event %d: state %+v, general path %+v", events, fs, gs)
			}
			if fast.HasPendingClose() != gen.HasPendingClose() {
				t.Fatalf("event %d: pending close differs", events)
			}
			if ferr != nil {
				return events, !errors.Is(ferr, ErrClosed)
			}
			if fe.Kind == EventNone {
				break
			}
			events++
		}
	}
	return events, false
}

// randomWire builds a stream of frames for a receiver of the given role:
// mostly well-formed small text and binary messages (the fast path's
// case), mixed with what it must leave to the general path: 16- and 64-bit
// lengths, fragments with control frames between them, compressed
// messages, wrongly masked frames, reserved bits and opcodes, non-minimal
// lengths, invalid UTF-8 and close frames.
func randomWire(rng *rand.Rand, role Role, deflate bool) []byte {
	var w []byte
	key := func() []byte {
		if role == RoleServer {
			return []byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
		}
		return nil
	}
	wrongKey := func() []byte {
		if role == RoleServer {
			return nil
		}
		return []byte{1, 2, 3, 4}
	}
	text := func(n int) []byte {
		b := make([]byte, 0, n+4)
		for len(b) < n {
			switch rng.IntN(8) {
			case 0:
				b = append(b, "é"...)
			case 1:
				b = append(b, "你"...)
			case 2:
				b = append(b, "🙂"...)
			default:
				b = append(b, byte('a'+rng.IntN(26)))
			}
		}
		return b
	}
	bin := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	size := func() int {
		switch rng.IntN(10) {
		case 0:
			return 0
		case 1:
			return 126 + rng.IntN(400)
		case 2:
			return 125
		default:
			return rng.IntN(126)
		}
	}
	for range 1 + rng.IntN(12) {
		switch k := rng.IntN(40); {
		case k < 14:
			w = append(w, frame(true, 0, OpText, key(), text(size()))...)
		case k < 26:
			w = append(w, frame(true, 0, OpBinary, key(), bin(size()))...)
		case k < 28: // fragmented, a ping between the fragments
			op := OpText
			if rng.IntN(2) == 0 {
				op = OpBinary
			}
			msg := text(size() + 4)
			cut := rng.IntN(len(msg) + 1)
			w = append(w, frame(false, 0, op, key(), msg[:cut])...)
			if rng.IntN(2) == 0 {
				w = append(w, frame(true, 0, OpPing, key(), bin(rng.IntN(10)))...)
			}
			w = append(w, frame(true, 0, OpContinuation, key(), msg[cut:])...)
		case k < 29:
			w = append(w, frame(true, 0, OpPong, key(), bin(rng.IntN(126)))...)
		case k < 30: // a 64-bit length (minimal from 65536 on)
			w = append(w, frame(true, 0, OpBinary, key(), bin(65536+rng.IntN(10)))...)
		case k < 31: // compressed, or RSV1 without the extension
			if deflate {
				w = append(w, frame(true, 4, OpText, key(), []byte("\xf2\x48\xcd\xc9\xc9\x07\x00"))...)
			} else {
				w = append(w, frame(true, 4, OpBinary, key(), bin(3))...)
			}
		case k < 32:
			w = append(w, frame(true, 0, OpText, wrongKey(), text(5))...)
		case k < 33:
			w = append(w, frame(true, byte(1+rng.IntN(3)), OpText, key(), text(5))...)
		case k < 34:
			w = append(w, frame(true, 0, Opcode(3+rng.IntN(5)), key(), bin(3))...)
		case k < 35: // invalid UTF-8: an overlong encoding, a surrogate, a cut sequence
			bad := [][]byte{{0xc0, 0xaf}, {0xed, 0xa0, 0x80}, {0xe4, 0xbd}, {0xff}}[rng.IntN(4)]
			msg := append(text(rng.IntN(40)), bad...)
			w = append(w, frame(true, 0, OpText, key(), append(msg, text(rng.IntN(40))...))...)
		case k < 36: // a non-minimal 16-bit length
			b1 := byte(126)
			if role == RoleServer {
				b1 |= bitMask
			}
			w = append(w, 0x82, b1, 0, 5)
			w = append(append(w, key()...), bin(5)...)
		case k < 37: // a continuation without a message, or a new message inside one
			if rng.IntN(2) == 0 {
				w = append(w, frame(true, 0, OpContinuation, key(), text(3))...)
			} else {
				w = append(w, frame(false, 0, OpText, key(), text(3))...)
				w = append(w, frame(true, 0, OpBinary, key(), bin(3))...)
			}
		case k < 38:
			w = append(w, frame(true, 0, OpClose, key(), []byte{0x03, 0xe8, 'o', 'k'})...)
		default: // text at the ends of the ASCII fast path's words
			w = append(w, frame(true, 0, OpText, key(), append(bytes.Repeat([]byte{'x'}, rng.IntN(70)), 0xe2, 0x82, 0xac))...)
		}
	}
	return w
}

func TestNextWholeMatchesGeneralPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 500))
	fastEvents := 0
	for iter := range 3000 {
		role := Role(iter & 1)
		deflate := iter&2 != 0
		cfg := Config{Role: role}
		if deflate {
			cfg.Deflate = &DeflateParams{}
		}
		if iter&4 != 0 {
			cfg.MaxFrameSize, cfg.MaxMessageSize = 100, 200
		}
		w := randomWire(rng, role, deflate)
		for ci, chunk := range []func() int{nil, byteByByte, func() int { return 1 + rng.IntN(40) }} {
			if ci == 1 && len(w) > 4096 {
				continue // a 64-bit frame: byte by byte costs seconds
			}
			t.Run(fmt.Sprintf("%d/%d", iter, ci), func(t *testing.T) {
				n, _ := lockstep(t, cfg, w, chunk)
				if chunk == nil {
					fastEvents += n
				}
			})
		}
	}
	if fastEvents == 0 {
		t.Fatal("no events decoded")
	}
}

// TestNextWholeTaken checks that the fast path is taken where it is meant
// to be, and only there. It tells the two paths apart by a limit that only
// the general path sees: maxFrame and maxMsg set to 0 after NewProtocol
// (which derived wholeMax from the defaults) make the general path fail
// every data frame with a payload, while the fast path delivers it.
func TestNextWholeTaken(t *testing.T) {
	generalOnlyLimits := func(p *Protocol) *Protocol {
		p.maxFrame, p.maxMsg = 0, 0
		return p
	}
	for _, role := range []Role{RoleServer, RoleClient} {
		var key []byte
		if role == RoleServer {
			key = testKey
		}
		for _, n := range []int{1, 7, 8, 125, 126, 127, 4096, 0xFFFF} {
			for _, op := range []Opcode{OpText, OpBinary} {
				p := generalOnlyLimits(NewProtocol(Config{Role: role}))
				p.Receive(frame(true, 0, op, key, bytes.Repeat([]byte{'a'}, n)))
				if ev, err := p.Next(); err != nil || ev.Kind != EventMessage || len(ev.Payload) != n || !ev.Fin {
					t.Errorf("%v %v %d bytes: fast path not taken: %+v, %v", role, op, n, ev, err)
				}
			}
		}
		for name, w := range map[string][]byte{
			"64-bit length": frame(true, 0, OpBinary, key, make([]byte, 0x10000)),
			"fragment":      frame(false, 0, OpBinary, key, []byte("ab")),
			"rsv1":          frame(true, 4, OpBinary, key, []byte("ab")),
		} {
			p := generalOnlyLimits(NewProtocol(Config{Role: role, Deflate: &DeflateParams{}}))
			p.Receive(w)
			if _, err := p.Next(); err != errFrameTooBig {
				t.Errorf("%v %s: %v, want the general path's %v", role, name, err, errFrameTooBig)
			}
		}
		// A frame not yet whole (one byte short) is the general path's.
		p := generalOnlyLimits(NewProtocol(Config{Role: role}))
		w := frame(true, 0, OpBinary, key, []byte("abc"))
		p.Receive(w[:len(w)-1])
		if _, err := p.Next(); err != errFrameTooBig {
			t.Errorf("%v incomplete frame: %v, want the general path's %v", role, err, errFrameTooBig)
		}
	}
	// wholeMax follows the configured limits: above them the general path
	// fails the connection.
	p := NewProtocol(Config{Role: RoleClient, MaxMessageSize: 10})
	p.Receive(frame(true, 0, OpBinary, nil, make([]byte, 11)))
	if _, err := p.Next(); err != errMsgTooBig {
		t.Errorf("above the message limit: %v", err)
	}
}

// FuzzNextWhole: arbitrary bytes, in chunks drawn from seed, to a Protocol
// configured by flags (bit 0: client, bit 1: deflate, bit 2: small limits)
// give the same events and state with and without the fast path.
func FuzzNextWhole(f *testing.F) {
	f.Add([]byte("\x81\x05Hello\x82\x00\x81\x02\xc3\xa9"), uint64(0), byte(1))
	f.Add([]byte("\x81\x857\xfa!=\x7f\x9fMQX\x82\x80\x01\x02\x03\x04"), uint64(3), byte(0))
	f.Add([]byte("\x82\x7e\x00\x05hello\x81\x03\xed\xa0\x80"), uint64(1), byte(5))
	f.Add([]byte("\x01\x01a\x81\x01b\x80\x01c"), uint64(7), byte(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, flags byte) {
		cfg := Config{Role: RoleServer}
		if flags&1 != 0 {
			cfg.Role = RoleClient
		}
		if flags&2 != 0 {
			cfg.Deflate = &DeflateParams{}
		}
		if flags&4 != 0 {
			cfg.MaxFrameSize, cfg.MaxMessageSize = 20, 30
		}
		lockstep(t, cfg, data, nil)
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		lockstep(t, cfg, data, func() int { return 1 + rng.IntN(1+int(seed%64)) })
	})
}

// TestValidUTF8Lengths holds validUTF8 against the incremental validator
// for every length around its word boundaries, with one non-ASCII
// character (valid or not) at every position, and against utf8.Valid's
// verdicts through FuzzUTF8.
func TestValidUTF8Lengths(t *testing.T) {
	seqs := [][]byte{[]byte("é"), []byte("€"), []byte("🙂"), {0xc0, 0x80}, {0xed, 0xb0, 0x80}, {0xf4, 0x90, 0x80, 0x80}, {0x80}, {0xe2, 0x82}}
	for n := 0; n <= 80; n++ {
		base := bytes.Repeat([]byte{'a'}, n)
		if !validUTF8(base) {
			t.Fatalf("%d ASCII bytes rejected", n)
		}
		for _, s := range seqs {
			for at := 0; at <= n; at++ {
				b := append(append(append([]byte(nil), base[:at]...), s...), base[at:]...)
				var v UTF8Validator
				want := v.Write(b) && v.Complete()
				if got := validUTF8(b); got != want {
					t.Fatalf("%x: validUTF8 %v, validator %v", b, got, want)
				}
			}
		}
	}
}

// TestASCIIPrefix checks asciiPrefix's contract for every length up to 200
// and a byte >= 0x80 at every position (or none): b[:i] is ASCII, and the
// first such byte is within 32 bytes after i.
func TestASCIIPrefix(t *testing.T) {
	buf := make([]byte, 308)
	for n := 0; n <= 300; n++ { // every path of asciiPrefixAsm, up to its 256-byte one and beyond
		for at := -1; at < n; at++ {
			for off := 0; off < 8; off += 7 { // also at an odd address
				b := buf[off : off+n]
				for i := range b {
					b[i] = 'a' + byte(i%26)
				}
				if at >= 0 {
					b[at] = 0x80 | byte(at)
				}
				i := asciiPrefix(b)
				if at < 0 && i != n || at >= 0 && (i > at || at-i >= 32) {
					t.Fatalf("len %d, byte >= 0x80 at %d: asciiPrefix %d", n, at, i)
				}
			}
		}
	}
}
