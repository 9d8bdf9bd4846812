package ws

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	lengths := []int64{0, 1, 125, 126, 127, 0xFFFF, 0x10000, 1 << 32, 1<<63 - 1}
	for _, l := range lengths {
		for _, masked := range []bool{false, true} {
			for _, op := range []Opcode{OpContinuation, OpText, OpBinary, OpClose, OpPing, OpPong} {
				if op.IsControl() && l > 125 {
					continue
				}
				h := Header{Fin: true, Op: op, Length: l, Masked: masked, Rsv1: l == 126, Rsv2: l == 127, Rsv3: l == 0}
				if masked {
					h.Mask = [4]byte{1, 2, 3, 4}
				}
				b := AppendHeader(nil, h)
				if len(b) != HeaderSize(h) {
					t.Fatalf("%+v: encoded %d bytes, HeaderSize %d", h, len(b), HeaderSize(h))
				}
				// Every proper prefix asks for more bytes.
				for i := 0; i < len(b); i++ {
					if _, n, err := ParseHeader(b[:i]); n != 0 || err != nil {
						t.Fatalf("%+v: prefix %d: n=%d err=%v", h, i, n, err)
					}
				}
				got, n, err := ParseHeader(append(b, 0xAA))
				if err != nil || n != len(b) || got != h {
					t.Fatalf("%+v: parsed %+v n=%d err=%v", h, got, n, err)
				}
				got, err = ReadHeader(bytes.NewReader(b))
				if err != nil || got != h {
					t.Fatalf("ReadHeader %+v: %+v %v", h, got, err)
				}
				var w bytes.Buffer
				if err := WriteHeader(&w, h); err != nil || !bytes.Equal(w.Bytes(), b) {
					t.Fatal("WriteHeader differs")
				}
			}
		}
	}
}

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name string
		wire []byte
	}{
		{"opcode 3", []byte{0x83, 0}},
		{"opcode 7", []byte{0x87, 0}},
		{"opcode B", []byte{0x8B, 0}},
		{"opcode F", []byte{0x8F, 0}},
		{"ping 126", []byte{0x89, 126, 0, 126}},
		{"ping not fin", []byte{0x09, 0}},
		{"close not fin", []byte{0x08, 0}},
		{"16-bit length 125", []byte{0x82, 126, 0, 125}},
		{"16-bit length 0", []byte{0x82, 126, 0, 0}},
		{"64-bit length 0xFFFF", []byte{0x82, 127, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}},
		{"64-bit length 1", []byte{0x82, 127, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"64-bit MSB", []byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}},
		{"64-bit all ones", []byte{0x82, 127, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
	}
	for _, tt := range tests {
		_, n, err := ParseHeader(tt.wire)
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Code != StatusProtocolError || n != 0 {
			t.Errorf("%s: n=%d err=%v, want 1002", tt.name, n, err)
		}
		if _, err := ReadHeader(bytes.NewReader(append(tt.wire, 0, 0, 0, 0))); !errors.As(err, &pe) {
			t.Errorf("%s: ReadHeader err=%v", tt.name, err)
		}
	}
}

func TestReadHeaderEOF(t *testing.T) {
	if _, err := ReadHeader(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty: %v", err)
	}
	if _, err := ReadHeader(bytes.NewReader([]byte{0x82})); err != io.ErrUnexpectedEOF {
		t.Fatalf("1 byte: %v", err)
	}
	if _, err := ReadHeader(bytes.NewReader([]byte{0x82, 0xFE, 1})); err != io.ErrUnexpectedEOF {
		t.Fatalf("partial: %v", err)
	}
}

func TestOpcodeString(t *testing.T) {
	for op := Opcode(0); op < 16; op++ {
		reserved := (op >= 3 && op <= 7) || op >= 0xB
		if op.IsReserved() != reserved {
			t.Errorf("%v reserved=%v", op, op.IsReserved())
		}
		if op.IsControl() != (op >= 8) {
			t.Errorf("%v control", op)
		}
		if op.String() == "" {
			t.Error("empty string")
		}
	}
}

// TestAppendMessageMatchesAppendHeader: the frames AppendMessage and
// AppendFrame encode themselves (smallHeader) are the header AppendHeader
// writes followed by the payload, masked with the key in the header, for
// every length around the encodings' limits and behind bytes already in
// dst.
func TestAppendMessageMatchesAppendHeader(t *testing.T) {
	var sizes []int
	for n := 0; n <= 300; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 16<<10-1, 16<<10, 16<<10+1, 0xFFFF, 0x10000, 0x10001)
	payload := make([]byte, 0x10001)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	for _, role := range []Role{RoleServer, RoleClient} {
		p := NewProtocol(Config{Role: role})
		for _, n := range sizes {
			for _, fin := range []bool{true, false} {
				prefix := []byte("xyz")
				var got []byte
				var err error
				op := OpText
				if fin {
					got, err = p.AppendMessage(prefix, OpBinary, payload[:n])
					op = OpBinary
				} else {
					got, err = p.AppendFrame(prefix, OpText, payload[:n], false)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got[:3], prefix) {
					t.Fatalf("%v %d: prefix overwritten", role, n)
				}
				h, hn, err := ParseHeader(got[3:])
				if err != nil || hn == 0 {
					t.Fatalf("%v %d: %v", role, n, err)
				}
				want := Header{Fin: fin, Op: op, Length: int64(n), Masked: role == RoleClient, Mask: h.Mask}
				if h != want || !bytes.Equal(got[3:3+hn], AppendHeader(nil, want)) {
					t.Fatalf("%v %d: header %+v % x, want %+v", role, n, h, got[3:3+hn], want)
				}
				body := slices.Clone(got[3+hn:])
				if h.Masked {
					MaskBytes(h.Mask, 0, body)
				}
				if !bytes.Equal(body, payload[:n]) {
					t.Fatalf("%v %d: payload differs", role, n)
				}
				if !fin {
					if _, err := p.AppendFrame(nil, OpContinuation, nil, true); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}
