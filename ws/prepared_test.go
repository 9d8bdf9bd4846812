package ws

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

func TestPreparedMessagePlain(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 65535, 65536} {
		payload := bytes.Repeat([]byte("x"), n)
		m, err := NewPreparedMessage(OpText, payload, CompressionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := NewProtocol(Config{Role: RoleServer})
		want, _ := s.AppendMessage(nil, OpText, payload)
		if !bytes.Equal(m.Frame(false), want) {
			t.Fatalf("%d: plain frame differs", n)
		}
		got, err := s.PreparedFrame(m)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d: PreparedFrame %v", n, err)
		}
		if !bytes.Equal(m.Payload(), payload) || m.Op() != OpText {
			t.Fatal("accessors")
		}
	}
	// Below the threshold the compressed form is the plain one.
	m, _ := NewPreparedMessage(OpBinary, []byte("short"), CompressionOptions{})
	if !bytes.Equal(m.Frame(true), m.Frame(false)) || !bytes.Equal(m.FrameWindow(9), m.Frame(false)) {
		t.Fatal("short message compressed")
	}
	if _, err := NewPreparedMessage(OpPing, make([]byte, 126), CompressionOptions{}); err == nil {
		t.Fatal("long ping accepted")
	}
	if _, err := NewPreparedMessage(OpContinuation, nil, CompressionOptions{}); err == nil {
		t.Fatal("continuation accepted")
	}
	c := NewProtocol(Config{Role: RoleClient})
	if _, err := c.PreparedFrame(m); err == nil {
		t.Fatal("client accepted prepared frame")
	}
}

func NewPrepared(t *testing.T) *PreparedMessage {
	m, err := NewPreparedMessage(OpText, bytes.Repeat([]byte("prepared message "), 50), CompressionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPreparedCompressed: the compressed frames decode on every client
// configuration, including clients whose window holds earlier messages,
// and interleave correctly with a server compressing with context
// takeover.
func TestPreparedCompressed(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	var msgs []*PreparedMessage
	var payloads [][]byte
	for i := 0; i < 20; i++ {
		p := testPayload(rng, 100+rng.IntN(50000), true)
		m, err := NewPreparedMessage(OpText, p, CompressionOptions{Level: []int{0, 1, 9, -2}[i%4]})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
		payloads = append(payloads, p)
	}
	for _, dp := range []DeflateParams{
		{ServerNoContextTakeover: true},
		{},
		{ServerMaxWindowBits: 10},
		{ServerMaxWindowBits: 8, ServerNoContextTakeover: true},
	} {
		s := NewProtocol(Config{Role: RoleServer, Deflate: &dp})
		c := NewProtocol(Config{Role: RoleClient, Deflate: &dp})
		var wire []byte
		var want []string
		for i, m := range msgs {
			// Interleave normal (context takeover) compressed messages.
			own := testPayload(rng, 200+rng.IntN(2000), false)
			wire, _ = s.AppendMessage(wire, OpBinary, own)
			want = append(want, string(own))
			f, err := s.PreparedFrame(m)
			if err != nil {
				t.Fatal(err)
			}
			if f[0]&0x40 == 0 {
				t.Fatal("prepared frame not compressed")
			}
			wire = append(wire, f...)
			want = append(want, string(payloads[i]))
		}
		res := feed(t, c, wire, func() int { return 1 + rng.IntN(5000) })
		if res.err != nil {
			t.Fatalf("%+v: %v", dp, res.err)
		}
		if len(res.events) != len(want) {
			t.Fatalf("%+v: %d events", dp, len(res.events))
		}
		for i := range want {
			if res.events[i].Data != want[i] {
				t.Fatalf("%+v: message %d differs", dp, i)
			}
		}
	}
}

func TestPreparedConcurrent(t *testing.T) {
	m := NewPrepared(t)
	var wg sync.WaitGroup
	frames := make([][]byte, 16)
	for i := range frames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 3 {
			case 0:
				frames[i] = m.Frame(true)
			case 1:
				frames[i] = m.FrameWindow(15)
			case 2:
				s := NewProtocol(Config{Role: RoleServer, Deflate: &DeflateParams{ServerNoContextTakeover: true}})
				frames[i], _ = s.PreparedFrame(m)
			}
		}()
	}
	wg.Wait()
	for i := range frames {
		if &frames[i][0] != &frames[0][0] {
			t.Fatal("compressed frame computed more than once")
		}
	}
}

func TestPreparedState(t *testing.T) {
	m := NewPrepared(t)
	s := NewProtocol(Config{Role: RoleServer})
	s.AppendFrame(nil, OpText, []byte("a"), false)
	if _, err := s.PreparedFrame(m); err == nil {
		t.Fatal("prepared frame inside a streamed message")
	}
	s.AppendFrame(nil, OpContinuation, nil, true)
	s.AppendClose(nil, 1000, "")
	if _, err := s.PreparedFrame(m); err == nil {
		t.Fatal("prepared frame after close")
	}
	// A prepared close records the state change.
	s = NewProtocol(Config{Role: RoleServer})
	cm, _ := NewPreparedMessage(OpClose, []byte{0x03, 0xe9}, CompressionOptions{})
	if f, err := s.PreparedFrame(cm); err != nil || s.State() != StateCloseSent || !bytes.Equal(f, []byte{0x88, 2, 3, 0xe9}) {
		t.Fatal(f, err, s.State())
	}
}

func ExamplePreparedMessage() {
	m, _ := NewPreparedMessage(OpText, []byte(`{"type":"speak"}`), CompressionOptions{})
	s := NewProtocol(Config{Role: RoleServer})
	f, _ := s.PreparedFrame(m)
	fmt.Printf("% x\n", f[:2])
	// Output: 81 10
}

// TestAppendPreparedMessage: messages appended to one buffer lie back to
// back, each its own frame as NewPreparedMessage makes it.
func TestAppendPreparedMessage(t *testing.T) {
	buf := make([]byte, 0, 1<<17)
	var want []byte
	for _, n := range []int{0, 1, 125, 126, 65535, 65536} {
		payload := bytes.Repeat([]byte{byte('a' + n%26)}, n)
		ref, _ := NewPreparedMessage(OpBinary, payload, CompressionOptions{})
		start := len(buf)
		var m *PreparedMessage
		var err error
		buf, m, err = AppendPreparedMessage(buf, OpBinary, payload, CompressionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f := m.Frame(false)
		if !bytes.Equal(f, ref.Frame(false)) || len(f) != PreparedFrameSize(n) {
			t.Fatalf("%d: frame differs from NewPreparedMessage's", n)
		}
		if &f[0] != &buf[start] || cap(f) != len(f) {
			t.Fatalf("%d: frame not at the end of the buffer, or may grow into what follows", n)
		}
		if !bytes.Equal(m.Payload(), payload) {
			t.Fatalf("%d: payload", n)
		}
		want = append(want, f...)
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("the buffer is not the frames back to back")
	}
	if _, _, err := AppendPreparedMessage(buf, OpContinuation, nil, CompressionOptions{}); err == nil {
		t.Fatal("continuation accepted")
	}
}

// TestAppendPreparedMessageTo: a message stored in the caller's
// PreparedMessage, fresh or used before, is the one AppendPreparedMessage
// makes, compressed forms included; on error it is left alone.
func TestAppendPreparedMessageTo(t *testing.T) {
	co := CompressionOptions{Threshold: -1}
	var ms [2]PreparedMessage
	buf := make([]byte, 0, 1<<12)
	for round := range 2 {
		for i := range ms {
			payload := bytes.Repeat([]byte{byte('a' + i + round)}, 200+i)
			ref, _ := NewPreparedMessage(OpText, payload, co)
			start := len(buf)
			var err error
			buf, err = AppendPreparedMessageTo(&ms[i], buf, OpText, payload, co)
			if err != nil {
				t.Fatal(err)
			}
			m := &ms[i]
			if f := m.Frame(false); !bytes.Equal(f, ref.Frame(false)) || &f[0] != &buf[start] {
				t.Fatalf("round %d, %d: plain frame differs or is not in the buffer", round, i)
			}
			if !bytes.Equal(m.Frame(true), ref.Frame(true)) || !bytes.Equal(m.FrameWindow(9), ref.FrameWindow(9)) {
				t.Fatalf("round %d, %d: compressed frames differ", round, i)
			}
		}
	}
	before := ms[0].Frame(false)
	if _, err := AppendPreparedMessageTo(&ms[0], buf, OpContinuation, nil, co); err == nil {
		t.Fatal("continuation accepted")
	}
	if f := ms[0].Frame(false); &f[0] != &before[0] {
		t.Fatal("a failed append changed the message")
	}
}
