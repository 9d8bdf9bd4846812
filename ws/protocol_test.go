package ws

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rec is an event as recorded by feed: messages are reassembled.
type rec struct {
	Kind   EventKind
	Op     Opcode
	Data   string
	Code   StatusCode
	Reason string
}

// feedResult is what feeding a byte stream into a Protocol produced.
type feedResult struct {
	events []rec
	err    error
	// pieces counts EventMessage pieces; atErr is the number of input
	// bytes fed when the error was returned.
	pieces int
	atErr  int
}

// feed passes data to p in chunks of the sizes produced by chunk (nil: all
// at once) and collects the events, reassembling message pieces. It checks
// the invariants: Op is constant within a message, and text pieces form a
// valid UTF-8 prefix.
func feed(t testing.TB, p *Protocol, data []byte, chunk func() int) feedResult {
	t.Helper()
	var res feedResult
	var cur []byte
	var curOp Opcode
	inMsg := false
	var v UTF8Validator
	fed := 0
	for fed < len(data) || fed == 0 {
		n := len(data) - fed
		if chunk != nil {
			n = min(n, max(1, chunk()))
		}
		p.Receive(data[fed : fed+n])
		fed += n
		for {
			ev, err := p.Next()
			if err != nil {
				if !errors.Is(err, ErrClosed) || res.err == nil {
					res.err = err
					res.atErr = fed
				}
				return res
			}
			if ev.Kind == EventNone {
				break
			}
			switch ev.Kind {
			case EventMessage:
				res.pieces++
				if !inMsg {
					inMsg, curOp, cur = true, ev.Op, nil
					v.Reset()
				} else if ev.Op != curOp {
					t.Fatalf("op changed within message: %v -> %v", curOp, ev.Op)
				}
				if ev.Op == OpText && !v.Write(ev.Payload) {
					t.Fatalf("invalid UTF-8 delivered: %x", ev.Payload)
				}
				cur = append(cur, ev.Payload...)
				if ev.Fin {
					if ev.Op == OpText && !v.Complete() {
						t.Fatalf("incomplete UTF-8 at Fin")
					}
					res.events = append(res.events, rec{Kind: EventMessage, Op: curOp, Data: string(cur)})
					inMsg = false
				}
			case EventPing, EventPong:
				res.events = append(res.events, rec{Kind: ev.Kind, Data: string(ev.Payload)})
			case EventClose:
				res.events = append(res.events, rec{Kind: ev.Kind, Code: ev.Code, Reason: ev.Reason})
				// Nothing after a Close is processed.
				p.Receive(data[fed:])
				if _, err := p.Next(); !errors.Is(err, ErrClosed) {
					t.Fatalf("Next after close: %v", err)
				}
				return res
			}
		}
		if len(data) == 0 {
			break
		}
	}
	return res
}

func byteByByte() int { return 1 }

// frame builds a frame; key nil means unmasked.
func frame(fin bool, rsv byte, op Opcode, key []byte, payload []byte) []byte {
	h := Header{Fin: fin, Rsv1: rsv&4 != 0, Rsv2: rsv&2 != 0, Rsv3: rsv&1 != 0, Op: op, Length: int64(len(payload))}
	if key != nil {
		h.Masked = true
		copy(h.Mask[:], key)
	}
	b := AppendHeader(nil, h)
	s := len(b)
	b = append(b, payload...)
	if key != nil {
		MaskBytes(h.Mask, 0, b[s:])
	}
	return b
}

var testKey = []byte{0x37, 0xfa, 0x21, 0x3d}

// RFC 6455 §5.7 examples.
func TestRFC6455Examples(t *testing.T) {
	big256 := make([]byte, 256)
	big64k := make([]byte, 65536)
	tests := []struct {
		name string
		role Role // role of the receiver
		wire string
		want []rec
	}{
		{"single unmasked text", RoleClient, "81 05 48 65 6c 6c 6f", []rec{{Kind: EventMessage, Op: OpText, Data: "Hello"}}},
		{"single masked text", RoleServer, "81 85 37 fa 21 3d 7f 9f 4d 51 58", []rec{{Kind: EventMessage, Op: OpText, Data: "Hello"}}},
		{"fragmented unmasked text", RoleClient, "01 03 48 65 6c 80 02 6c 6f", []rec{{Kind: EventMessage, Op: OpText, Data: "Hello"}}},
		{"unmasked ping", RoleClient, "89 05 48 65 6c 6c 6f", []rec{{Kind: EventPing, Data: "Hello"}}},
		{"masked pong", RoleServer, "8a 85 37 fa 21 3d 7f 9f 4d 51 58", []rec{{Kind: EventPong, Data: "Hello"}}},
		{"256 bytes binary", RoleClient, "82 7E 01 00" + hex.EncodeToString(big256), []rec{{Kind: EventMessage, Op: OpBinary, Data: string(big256)}}},
		{"64KiB binary", RoleClient, "82 7F 00 00 00 00 00 01 00 00" + hex.EncodeToString(big64k), []rec{{Kind: EventMessage, Op: OpBinary, Data: string(big64k)}}},
	}
	for _, tt := range tests {
		for _, bb := range []bool{false, true} {
			t.Run(tt.name, func(t *testing.T) {
				p := NewProtocol(Config{Role: tt.role})
				var ch func() int
				if bb {
					ch = byteByByte
				}
				res := feed(t, p, unhex(t, tt.wire), ch)
				if res.err != nil {
					t.Fatal(res.err)
				}
				if len(res.events) != len(tt.want) {
					t.Fatalf("events %+v, want %+v", res.events, tt.want)
				}
				for i := range tt.want {
					if res.events[i] != tt.want[i] {
						t.Fatalf("event %d: %+v, want %+v", i, res.events[i], tt.want[i])
					}
				}
			})
		}
	}
	// Encoding side: the same examples must come out of AppendHeader.
	if got := AppendHeader(nil, Header{Fin: true, Op: OpBinary, Length: 256}); !bytes.Equal(got, unhex(t, "827E0100")) {
		t.Errorf("256 header %x", got)
	}
	if got := AppendHeader(nil, Header{Fin: true, Op: OpBinary, Length: 65536}); !bytes.Equal(got, unhex(t, "827F0000000000010000")) {
		t.Errorf("64k header %x", got)
	}
	if got := frame(true, 0, OpText, testKey, []byte("Hello")); !bytes.Equal(got, unhex(t, "81 85 37 fa 21 3d 7f 9f 4d 51 58")) {
		t.Errorf("masked hello %x", got)
	}
}

func TestRoundTripBasic(t *testing.T) {
	c := NewProtocol(Config{Role: RoleClient})
	s := NewProtocol(Config{Role: RoleServer})
	var wire []byte
	var err error
	wire, err = c.AppendMessage(wire, OpText, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	wire = c.AppendPing(wire, []byte("p"))
	wire, _ = c.AppendFrame(wire, OpBinary, []byte("ab"), false)
	wire = c.AppendPong(wire, nil)
	wire, _ = c.AppendFrame(wire, OpContinuation, []byte("cd"), true)
	wire, _ = c.AppendClose(wire, StatusGoingAway, "bye")
	res := feed(t, s, wire, byteByByte)
	if res.err != nil {
		t.Fatal(res.err)
	}
	want := []rec{
		{Kind: EventMessage, Op: OpText, Data: "hello"},
		{Kind: EventPing, Data: "p"},
		{Kind: EventPong},
		{Kind: EventMessage, Op: OpBinary, Data: "abcd"},
		{Kind: EventClose, Code: StatusGoingAway, Reason: "bye"},
	}
	if len(res.events) != len(want) {
		t.Fatalf("got %+v", res.events)
	}
	for i := range want {
		if res.events[i] != want[i] {
			t.Fatalf("event %d: %+v want %+v", i, res.events[i], want[i])
		}
	}
	if c.State() != StateCloseSent || s.State() != StateCloseReceived {
		t.Fatalf("states %v %v", c.State(), s.State())
	}
	out, err := s.AppendClose(nil, StatusGoingAway, "")
	if err != nil {
		t.Fatal(err)
	}
	res = feed(t, c, out, nil)
	if res.err != nil || len(res.events) != 1 || res.events[0].Code != StatusGoingAway {
		t.Fatalf("%+v", res)
	}
	if c.State() != StateClosed || s.State() != StateClosed {
		t.Fatalf("states %v %v", c.State(), s.State())
	}
	if _, err := c.AppendMessage(nil, OpText, nil); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	_ = rand.IntN
}

// TestConcurrentSides: the receive side and the send side may be used by
// two goroutines at once (run with -race).
func TestConcurrentSides(t *testing.T) {
	c := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{}})
	var in []byte
	for i := 0; i < 500; i++ {
		in, _ = c.AppendMessage(in, OpText, bytes.Repeat([]byte("message "), i%50))
	}
	in, _ = c.AppendClose(in, StatusNormalClosure, "")
	s := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{}})
	done := make(chan error, 1)
	go func() {
		for i := 0; i < len(in); i += 100 {
			s.Receive(in[i:min(len(in), i+100)])
			for {
				ev, err := s.Next()
				if err != nil {
					done <- err
					return
				}
				if ev.Kind == EventNone {
					break
				}
				if ev.Kind == EventClose {
					done <- nil
					return
				}
			}
		}
		done <- errors.New("no close")
	}()
	var out []byte
	var err error
	for i := 0; err == nil; i++ {
		out, err = s.AppendMessage(out[:0], OpBinary, bytes.Repeat([]byte("x"), i%300))
		if i == 2000 {
			_, err = s.AppendClose(nil, StatusGoingAway, "")
		}
		_ = s.State()
	}
	if rerr := <-done; rerr != nil {
		t.Fatal(rerr)
	}
	if s.State() != StateClosed && s.State() != StateCloseSent {
		t.Fatal(s.State())
	}
}
