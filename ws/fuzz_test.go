package ws

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/klauspost/compress/flate"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/, so plain `go test`
// replays them. Run a fuzzer with e.g.
//
//	go test -run '^$' -fuzz '^FuzzProtocol$' -fuzztime 60s ./ws/

func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{0x81, 0x05})
	f.Add([]byte{0x82, 0xFE, 0x01, 0x00, 1, 2, 3, 4})
	f.Add([]byte{0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, n, err := ParseHeader(data)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != StatusProtocolError || n != 0 {
				t.Fatalf("error %v n %d", err, n)
			}
			if _, rerr := ReadHeader(bytes.NewReader(data)); rerr == nil {
				t.Fatal("ReadHeader accepted what ParseHeader rejected")
			}
			return
		}
		if n == 0 {
			if len(data) >= MaxHeaderSize {
				t.Fatal("need more bytes after 14")
			}
			return
		}
		if n > MaxHeaderSize || n != HeaderSize(h) || h.Length < 0 {
			t.Fatalf("n %d for %+v", n, h)
		}
		if enc := AppendHeader(nil, h); !bytes.Equal(enc, data[:n]) {
			t.Fatalf("re-encoding %x != %x", enc, data[:n])
		}
		if rh, err := ReadHeader(bytes.NewReader(data)); err != nil || rh != h {
			t.Fatalf("ReadHeader %+v %v", rh, err)
		}
	})
}

// FuzzProtocol feeds arbitrary bytes, in chunks drawn from seed, to a
// Protocol configured by flags (bit 0: client, bit 1: deflate, bit 2: small
// limits, bit 3: peer context takeover). It must not panic, must not hand
// out invalid UTF-8 as text (checked by feed), and must reach the same
// result as when the input is fed at once.
func FuzzProtocol(f *testing.F) {
	f.Add([]byte("\x81\x05Hello"), uint64(1), byte(1))
	f.Add([]byte("\x81\x857\xfa!=\x7f\x9fMQX"), uint64(2), byte(0))
	f.Add([]byte("\xc1\x07\xf2\x48\xcd\xc9\xc9\x07\x00"), uint64(3), byte(3))
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
		whole := NewProtocol(cfg)
		want := feed(t, whole, data, nil)
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		chunked := NewProtocol(cfg)
		got := feed(t, chunked, data, func() int { return 1 + rng.IntN(1+int(seed%64)) })
		if len(got.events) != len(want.events) {
			t.Fatalf("chunked: %d events, whole: %d", len(got.events), len(want.events))
		}
		for i := range got.events {
			if got.events[i] != want.events[i] {
				t.Fatalf("event %d differs", i)
			}
		}
		var pw, pg *ProtocolError
		if errors.As(want.err, &pw) != errors.As(got.err, &pg) || (pw != nil && pw.Code != pg.Code) {
			t.Fatalf("errors differ: whole %v, chunked %v", want.err, got.err)
		}
		if pw != nil {
			checkPendingClose(t, "fuzz", chunked, pw.Code)
		}
		// The receive side must still be able to encode.
		if _, err := chunked.AppendMessage(nil, OpText, data); err != nil && !errors.Is(err, ErrClosed) {
			t.Fatal(err)
		}
	})
}

// FuzzDeflate inflates arbitrary data as the payload of a compressed
// message under a size limit and compares with a fresh klauspost inflater
// (the Protocol inflates with the standard library's).
func FuzzDeflate(f *testing.F) {
	f.Add([]byte("\xf2\x48\xcd\xc9\xc9\x07\x00"), uint16(100), false)
	f.Add([]byte("\x00\x05\x00\xfa\xffHello\x00"), uint16(3), true)
	f.Fuzz(func(t *testing.T, data []byte, limit uint16, text bool) {
		op := OpBinary
		if text {
			op = OpText
		}
		wire := frame(true, 4, op, nil, data)
		p := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}, MaxMessageSize: int64(limit) + 1, MaxFrameSize: -1})
		res := feed(t, p, wire, nil)

		ref, rerr := io.ReadAll(io.LimitReader(flate.NewReader(io.MultiReader(bytes.NewReader(data), bytes.NewReader(deflateTail))), int64(limit)+2))
		var pe *ProtocolError
		switch {
		case len(ref) > int(limit)+1:
			// Which is detected first, the limit or corrupt data further
			// on, depends on the inflater's read-ahead.
			if !errors.As(res.err, &pe) || (pe.Code != StatusMessageTooBig && pe.Code != StatusInvalidFramePayloadData) {
				t.Fatalf("reference exceeds limit, got %v", res.err)
			}
		case rerr != nil:
			if !errors.As(res.err, &pe) {
				t.Fatalf("reference error %v, got none", rerr)
			}
		case text && !validUTF8(ref):
			if !errors.As(res.err, &pe) || pe.Code != StatusInvalidFramePayloadData {
				t.Fatalf("invalid text, got %v", res.err)
			}
		default:
			if res.err != nil {
				t.Fatalf("reference ok (%d bytes), got %v", len(ref), res.err)
			}
			if len(res.events) != 1 || res.events[0].Data != string(ref) {
				t.Fatal("inflated data differs")
			}
		}
	})
}

// FuzzUTF8 checks the incremental validator against unicode/utf8 and the
// reference fail-fast position over random splits.
func FuzzUTF8(f *testing.F) {
	for _, s := range utf8Samples {
		f.Add([]byte(s), uint64(len(s)))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		if len(data) > 4096 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		at, complete := validateSplit(rng, data, 1+int(seed%32))
		if want := refFirstInvalid(data); at != want {
			t.Fatalf("failed after %d bytes, want %d", at, want)
		}
		if at == -1 && complete != utf8.Valid(data) {
			t.Fatalf("complete=%v, utf8.Valid=%v", complete, utf8.Valid(data))
		}
		if validUTF8(data) != utf8.Valid(data) {
			t.Fatal("validUTF8 differs from utf8.Valid")
		}
	})
}

// FuzzDeflateBudget inflates arbitrary data as a compressed message under a
// size limit and a Budget that counts every byte: a message whose compressed
// bytes pass the limit's bound fails with 1009, else one they take past the
// Budget with 1013, else the outcome is the one without a Budget; a message
// that inflates past the limit fails with 1009 before any of it is handed
// out (it is measured first: below 1032 bytes of limit every message is);
// and whatever happens, the Budget is given back in full.
func FuzzDeflateBudget(f *testing.F) {
	f.Add([]byte("\xf2\x48\xcd\xc9\xc9\x07\x00"), uint16(100), uint16(3))
	f.Add([]byte("\xf2\x48\xcd\xc9\xc9\x07\x00"), uint16(100), uint16(7))
	f.Add([]byte("\x00\x05\x00\xfa\xffHello\x00"), uint16(3), uint16(64))
	// The counting path (startInflate's measure): a bomb, and a message of
	// exactly the limit, both compressed past limit/1032 bytes.
	f.Add(compressRaw(f, make([]byte, 64<<10)), uint16(5000), uint16(2000))
	f.Add(compressRaw(f, bytes.Repeat([]byte("ab"), 2500)), uint16(4999), uint16(2000))
	f.Fuzz(func(t *testing.T, data []byte, limit, budget uint16) {
		cfg := Config{Role: RoleClient, Deflate: &DeflateParams{}, MaxMessageSize: int64(limit) + 1, MaxFrameSize: -1}
		wire := frame(true, 4, OpBinary, nil, data)
		want := feed(t, NewProtocol(cfg), wire, nil)
		b := NewBudget(int64(budget) + 1)
		b.free = 0
		cfg.Budget = b
		p := NewProtocol(cfg)
		got := feed(t, p, wire, nil)
		var pe *ProtocolError
		switch {
		case int64(len(data)) > cfg.MaxMessageSize+cfg.MaxMessageSize>>8+1024:
			if !errors.As(got.err, &pe) || pe.Code != StatusMessageTooBig {
				t.Fatalf("compressed bytes past the limit, got %v", got.err)
			}
		case len(data) > int(budget)+1:
			if !errors.As(got.err, &pe) || pe.Code != StatusTryAgainLater {
				t.Fatalf("compressed bytes past the Budget, got %v", got.err)
			}
			checkPendingClose(t, "budget", p, StatusTryAgainLater)
		default:
			if (want.err == nil) != (got.err == nil) || len(want.events) != len(got.events) {
				t.Fatalf("with a Budget: %v, %d events; without: %v, %d events", got.err, len(got.events), want.err, len(want.events))
			}
			var pw *ProtocolError
			if errors.As(want.err, &pw) && (!errors.As(got.err, &pe) || pe.Code != pw.Code) {
				t.Fatalf("with a Budget: %v; without: %v", got.err, want.err)
			}
			if pw != nil && pw.Code == StatusMessageTooBig && (want.pieces != 0 || got.pieces != 0) {
				t.Fatalf("too big after %d pieces (%d with a Budget)", want.pieces, got.pieces)
			}
		}
		p.Release()
		if n := b.InUse(); n != 0 {
			t.Fatalf("%d bytes of the Budget not given back", n)
		}
	})
}
