package ws

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// Table tests modelled on the Autobahn|Testsuite cases 1-7 and 9 (the
// fuzzingclient cases a server must pass). Each case is run for both roles
// (frames masked when the receiver is a server) and with the input fed all
// at once, byte by byte, and in random chunks.

type fr struct {
	fin     bool
	rsv     byte // RSV1<<2 | RSV2<<1 | RSV3, as Autobahn numbers it
	op      Opcode
	payload string
}

func txt(s string) fr            { return fr{fin: true, op: OpText, payload: s} }
func bin(s string) fr            { return fr{fin: true, op: OpBinary, payload: s} }
func ping(s string) fr           { return fr{fin: true, op: OpPing, payload: s} }
func pong(s string) fr           { return fr{fin: true, op: OpPong, payload: s} }
func cont(fin bool, s string) fr { return fr{fin: fin, op: OpContinuation, payload: s} }
func closeFr(code StatusCode, reason string) fr {
	b := binary.BigEndian.AppendUint16(nil, uint16(code))
	return fr{fin: true, op: OpClose, payload: string(b) + reason}
}

func msgT(s string) rec   { return rec{Kind: EventMessage, Op: OpText, Data: s} }
func msgB(s string) rec   { return rec{Kind: EventMessage, Op: OpBinary, Data: s} }
func evPing(s string) rec { return rec{Kind: EventPing, Data: s} }
func evPong(s string) rec { return rec{Kind: EventPong, Data: s} }
func evClose(c StatusCode, r string) rec {
	return rec{Kind: EventClose, Code: c, Reason: r}
}

type pcase struct {
	name   string
	frames []fr
	want   []rec      // events before the end or before the failure
	code   StatusCode // expected failure code, 0 for none
	cfg    Config     // Role is set by the harness
}

func encodeFrames(frames []fr, masked bool) []byte {
	var b []byte
	for _, f := range frames {
		var key []byte
		if masked {
			key = testKey
		}
		b = append(b, frame(f.fin, f.rsv, f.op, key, []byte(f.payload))...)
	}
	return b
}

func runCase(t *testing.T, tc pcase) {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
	for _, role := range []Role{RoleServer, RoleClient} {
		wire := encodeFrames(tc.frames, role == RoleServer)
		chunkers := map[string]func() int{
			"whole":  nil,
			"bytes":  byteByByte,
			"random": func() int { return 1 + rng.IntN(20) },
		}
		if len(wire) > 1<<20 {
			chunkers = map[string]func() int{"whole": nil, "4k": func() int { return 4096 }, "random": func() int { return 1 + rng.IntN(100000) }}
		}
		for cname, ch := range chunkers {
			cfg := tc.cfg
			cfg.Role = role
			p := NewProtocol(cfg)
			res := feed(t, p, wire, ch)
			where := fmt.Sprintf("%s/%v/%s", tc.name, role, cname)
			if tc.code == 0 && res.err != nil {
				t.Fatalf("%s: unexpected error %v", where, res.err)
			}
			if tc.code != 0 {
				var pe *ProtocolError
				if !errors.As(res.err, &pe) || pe.Code != tc.code {
					t.Fatalf("%s: error %v, want code %d (events %+v)", where, res.err, tc.code, res.events)
				}
				checkPendingClose(t, where, p, tc.code)
			}
			if len(res.events) != len(tc.want) {
				t.Fatalf("%s: got %d events %s, want %d %s", where, len(res.events), short(res.events), len(tc.want), short(tc.want))
			}
			for i := range tc.want {
				if res.events[i] != tc.want[i] {
					t.Fatalf("%s: event %d = %s, want %s", where, i, short(res.events[i:i+1]), short(tc.want[i:i+1]))
				}
			}
		}
	}
}

func short(rs []rec) string {
	var sb strings.Builder
	for _, r := range rs {
		d := r.Data
		if len(d) > 20 {
			d = fmt.Sprintf("%q...(%d)", d[:20], len(d))
		} else {
			d = fmt.Sprintf("%q", d)
		}
		fmt.Fprintf(&sb, "[%v %v %s %d %q]", r.Kind, r.Op, d, r.Code, r.Reason)
	}
	return sb.String()
}

// checkPendingClose verifies that a failed Protocol queued exactly one
// close frame with the code, decodable by the peer.
func checkPendingClose(t *testing.T, where string, p *Protocol, code StatusCode) {
	t.Helper()
	if p.State() != StateClosed {
		t.Fatalf("%s: state %v after failure", where, p.State())
	}
	if _, err := p.AppendClose(nil, StatusNormalClosure, ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("%s: AppendClose after failure: %v", where, err)
	}
	if !p.HasPendingClose() {
		t.Fatalf("%s: no pending close", where)
	}
	out := p.AppendPendingClose(nil)
	if p.HasPendingClose() || len(p.AppendPendingClose(nil)) != 0 {
		t.Fatalf("%s: pending close not cleared", where)
	}
	peerRole := RoleClient
	if p.Role() == RoleClient {
		peerRole = RoleServer
	}
	peer := NewProtocol(Config{Role: peerRole})
	peer.Receive(out)
	ev, err := peer.Next()
	if err != nil || ev.Kind != EventClose || ev.Code != code {
		t.Fatalf("%s: pending close decodes to %+v %v", where, ev, err)
	}
}

func rep(s string, n int) string { return strings.Repeat(s, n) }

func TestAutobahnFraming(t *testing.T) { // cases 1.x
	var cases []pcase
	for _, n := range []int{0, 125, 126, 127, 128, 65535, 65536} {
		s := rep("*", n)
		cases = append(cases,
			pcase{name: fmt.Sprintf("1.1 text %d", n), frames: []fr{txt(s)}, want: []rec{msgT(s)}},
			pcase{name: fmt.Sprintf("1.2 binary %d", n), frames: []fr{bin("\xfe" + s)}, want: []rec{msgB("\xfe" + s)}},
		)
	}
	for _, tc := range cases {
		runCase(t, tc)
	}
}

func TestAutobahnPingPong(t *testing.T) { // cases 2.x
	p125 := rep("\xfe", 125)
	cases := []pcase{
		{name: "2.1 ping empty", frames: []fr{ping("")}, want: []rec{evPing("")}},
		{name: "2.2 ping text", frames: []fr{ping("Hello, world!")}, want: []rec{evPing("Hello, world!")}},
		{name: "2.3 ping binary", frames: []fr{ping("\x00\xff\xfe\xfd\xfc\xfb\x00\xff")}, want: []rec{evPing("\x00\xff\xfe\xfd\xfc\xfb\x00\xff")}},
		{name: "2.4 ping 125", frames: []fr{ping(p125)}, want: []rec{evPing(p125)}},
		{name: "2.5 ping 126", frames: []fr{ping(p125 + "x")}, code: StatusProtocolError},
		{name: "2.7 unsolicited pong", frames: []fr{pong("")}, want: []rec{evPong("")}},
		{name: "2.8 unsolicited pong payload", frames: []fr{pong("unsolicited pong payload")}, want: []rec{evPong("unsolicited pong payload")}},
		{name: "2.9 pong then ping", frames: []fr{pong("unsolicited"), ping("ping payload")}, want: []rec{evPong("unsolicited"), evPing("ping payload")}},
	}
	var ten []fr
	var tenWant []rec
	for i := range 10 {
		ten = append(ten, ping(fmt.Sprint("payload-", i)))
		tenWant = append(tenWant, evPing(fmt.Sprint("payload-", i)))
	}
	cases = append(cases, pcase{name: "2.10 ten pings", frames: ten, want: tenWant})
	for _, tc := range cases {
		runCase(t, tc)
	}
}

func TestAutobahnReservedBits(t *testing.T) { // cases 3.x
	hello := "Hello, world!"
	cases := []pcase{
		{name: "3.1 RSV=1", frames: []fr{{fin: true, rsv: 1, op: OpText, payload: hello}}, code: StatusProtocolError},
		{name: "3.2 RSV=2 after text", frames: []fr{txt(hello), {fin: true, rsv: 2, op: OpText, payload: hello}, ping("")}, want: []rec{msgT(hello)}, code: StatusProtocolError},
		{name: "3.3 RSV=3 after text", frames: []fr{txt(hello), {fin: true, rsv: 3, op: OpText, payload: hello}, ping("")}, want: []rec{msgT(hello)}, code: StatusProtocolError},
		{name: "3.4 RSV=4 text", frames: []fr{txt(hello), {fin: true, rsv: 4, op: OpText, payload: hello}}, want: []rec{msgT(hello)}, code: StatusProtocolError},
		{name: "3.5 RSV=5 binary", frames: []fr{{fin: true, rsv: 5, op: OpBinary, payload: "\x00\xff"}}, code: StatusProtocolError},
		{name: "3.6 RSV=6 ping", frames: []fr{{fin: true, rsv: 6, op: OpPing, payload: hello}}, code: StatusProtocolError},
		{name: "3.7 RSV=7 close", frames: []fr{{fin: true, rsv: 7, op: OpClose}}, code: StatusProtocolError},
		// With permessage-deflate, RSV1 is only allowed on the first
		// frame of a data message (RFC 7692 §6.1).
		{name: "RSV1 ping with deflate", cfg: Config{Deflate: &DeflateParams{}}, frames: []fr{{fin: true, rsv: 4, op: OpPing}}, code: StatusProtocolError},
		{name: "RSV1 close with deflate", cfg: Config{Deflate: &DeflateParams{}}, frames: []fr{{fin: true, rsv: 4, op: OpClose}}, code: StatusProtocolError},
		{name: "RSV1 continuation with deflate", cfg: Config{Deflate: &DeflateParams{}}, frames: []fr{{fin: false, op: OpText, payload: "a"}, {fin: true, rsv: 4, op: OpContinuation, payload: "b"}}, code: StatusProtocolError},
		{name: "RSV2 with deflate", cfg: Config{Deflate: &DeflateParams{}}, frames: []fr{{fin: true, rsv: 2, op: OpText, payload: "a"}}, code: StatusProtocolError},
	}
	for _, tc := range cases {
		runCase(t, tc)
	}
}

func TestAutobahnOpcodes(t *testing.T) { // cases 4.x
	var cases []pcase
	for _, op := range []Opcode{3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF} {
		cases = append(cases,
			pcase{name: fmt.Sprintf("4.x opcode %d", op), frames: []fr{{fin: true, op: op}}, code: StatusProtocolError},
			pcase{name: fmt.Sprintf("4.x opcode %d with payload after text", op), frames: []fr{txt("a"), {fin: true, op: op, payload: "reserved"}, ping("")}, want: []rec{msgT("a")}, code: StatusProtocolError},
		)
	}
	for _, tc := range cases {
		runCase(t, tc)
	}
}

func TestAutobahnFragmentation(t *testing.T) { // cases 5.x
	cases := []pcase{
		{name: "5.1 fragmented ping", frames: []fr{{fin: false, op: OpPing, payload: "frag1"}, cont(true, "frag2")}, code: StatusProtocolError},
		{name: "5.2 fragmented pong", frames: []fr{{fin: false, op: OpPong, payload: "frag1"}, cont(true, "frag2")}, code: StatusProtocolError},
		{name: "5.3 text 2 fragments", frames: []fr{{op: OpText, payload: "frag1"}, cont(true, "frag2")}, want: []rec{msgT("frag1frag2")}},
		{name: "5.6 text with ping between", frames: []fr{{op: OpText, payload: "frag1"}, ping("ping"), cont(true, "frag2")}, want: []rec{evPing("ping"), msgT("frag1frag2")}},
		{name: "5.9 continuation without start", frames: []fr{cont(true, "non-continuation payload"), txt("Hello, world!")}, code: StatusProtocolError},
		{name: "5.12 continuation fin=0 without start", frames: []fr{cont(false, "non-continuation payload"), txt("Hello, world!")}, code: StatusProtocolError},
		{name: "5.15 continuation after finished message", frames: []fr{{op: OpText, payload: "fragment1"}, cont(true, "fragment2"), cont(false, "fragment3"), txt("fragment4")}, want: []rec{msgT("fragment1fragment2")}, code: StatusProtocolError},
		{name: "5.18 text while fragmented text open", frames: []fr{{op: OpText, payload: "fragment1"}, txt("fragment2")}, code: StatusProtocolError},
		{name: "5.19 text in 5 fragments with pings", frames: []fr{{op: OpText, payload: "fragment1"}, cont(false, "fragment2"), ping("pongme 1!"), cont(false, "fragment3"), cont(false, "fragment4"), ping("pongme 2!"), cont(true, "fragment5")},
			want: []rec{evPing("pongme 1!"), evPing("pongme 2!"), msgT("fragment1fragment2fragment3fragment4fragment5")}},
		{name: "binary while fragmented binary open", frames: []fr{{op: OpBinary, payload: "a"}, bin("b")}, code: StatusProtocolError},
		{name: "empty fragments", frames: []fr{{op: OpText}, cont(false, ""), cont(true, "")}, want: []rec{msgT("")}},
		{name: "fragmented binary then text", frames: []fr{{op: OpBinary, payload: "\x00"}, cont(true, "\x01"), txt("t")}, want: []rec{msgB("\x00\x01"), msgT("t")}},
	}
	for _, tc := range cases {
		runCase(t, tc)
	}
}

func TestAutobahnUTF8(t *testing.T) { // cases 6.x
	kosme := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	cases := []pcase{
		{name: "6.1.1 empty text", frames: []fr{txt("")}, want: []rec{msgT("")}},
		{name: "6.1.2 empty fragments", frames: []fr{{op: OpText}, cont(false, ""), cont(true, "")}, want: []rec{msgT("")}},
		{name: "6.1.3 empty fragments with payload", frames: []fr{{op: OpText}, cont(false, "middle frame payload"), cont(true, "")}, want: []rec{msgT("middle frame payload")}},
		{name: "6.2.1 valid utf8", frames: []fr{txt("Hello-µ@ßöäüàá-UTF-8!!")}, want: []rec{msgT("Hello-µ@ßöäüàá-UTF-8!!")}},
		{name: "6.2.3 split inside rune", frames: []fr{{op: OpText, payload: "Hello-\xc2"}, cont(true, "\xb5@")}, want: []rec{msgT("Hello-µ@")}},
		{name: "6.2.4 kosme byte frames", frames: func() []fr {
			var f []fr
			for i := 0; i < len(kosme); i++ {
				f = append(f, fr{fin: i == len(kosme)-1, op: map[bool]Opcode{true: OpText, false: OpContinuation}[i == 0], payload: kosme[i : i+1]})
			}
			return f
		}(), want: []rec{msgT(kosme)}},
		{name: "6.3.1 invalid utf8", frames: []fr{txt(kosme + "\xed\xa0\x80edited")}, code: StatusInvalidFramePayloadData},
		{name: "6.3.2 invalid utf8 fragmented", frames: []fr{{op: OpText, payload: kosme}, cont(false, "\xed\xa0\x80"), cont(true, "edited")}, code: StatusInvalidFramePayloadData},
		{name: "6.4.1 fail fast", frames: []fr{{op: OpText, payload: kosme}, cont(false, "\xf4\x90\x80\x80"), cont(true, "edited")}, code: StatusInvalidFramePayloadData},
		{name: "6.4.2 fail fast 2", frames: []fr{{op: OpText, payload: kosme + "\xf4"}, cont(false, "\x90"), cont(true, "\x80\x80edited")}, code: StatusInvalidFramePayloadData},
		{name: "6.x truncated at end", frames: []fr{txt("abc\xe2\x82")}, code: StatusInvalidFramePayloadData},
		{name: "6.x truncated at fragment end", frames: []fr{{op: OpText, payload: "abc\xe2"}, cont(true, "")}, code: StatusInvalidFramePayloadData},
		{name: "6.x binary not validated", frames: []fr{bin("\xff\xfe")}, want: []rec{msgB("\xff\xfe")}},
	}
	for _, s := range utf8Samples {
		c := pcase{name: fmt.Sprintf("6.x sample %q", s), frames: []fr{txt(s)}}
		if validUTF8([]byte(s)) {
			c.want = []rec{msgT(s)}
		} else {
			c.code = StatusInvalidFramePayloadData
		}
		cases = append(cases, c)
	}
	for _, tc := range cases {
		runCase(t, tc)
	}
}

// TestFailFastPosition checks that the error comes with the byte that makes
// the text invalid, not later (Autobahn 6.4.3/6.4.4 send the frame in
// chops and expect the close before the rest arrives).
func TestFailFastPosition(t *testing.T) {
	kosme := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	for _, tc := range []struct {
		payload string
		bad     int // index of the first invalid byte
	}{
		{kosme + "\xf4\x90\x80\x80edited", len(kosme) + 1},
		{"ab\xc0\xafcd", 2},
		{"ab\xed\xa0\x80", 3},
		{"a\xffb", 1},
		{rep("x", 300) + "\xf5" + rep("y", 300), 300},
	} {
		for _, role := range []Role{RoleServer, RoleClient} {
			var key []byte
			if role == RoleServer {
				key = testKey
			}
			wire := frame(true, 0, OpText, key, []byte(tc.payload))
			hdr := len(wire) - len(tc.payload)
			p := NewProtocol(Config{Role: role})
			res := feed(t, p, wire, byteByByte)
			if res.err == nil || res.atErr != hdr+tc.bad+1 {
				t.Fatalf("%q %v: error %v after %d bytes, want after %d", tc.payload, role, res.err, res.atErr, hdr+tc.bad+1)
			}
		}
	}
}

func TestAutobahnClose(t *testing.T) { // cases 7.x
	cases := []pcase{
		{name: "7.1.1 echo then close", frames: []fr{txt("Hello World!"), closeFr(StatusNormalClosure, "")}, want: []rec{msgT("Hello World!"), evClose(StatusNormalClosure, "")}},
		{name: "7.1.2 close twice", frames: []fr{closeFr(StatusNormalClosure, ""), closeFr(StatusNormalClosure, "")}, want: []rec{evClose(StatusNormalClosure, "")}},
		{name: "7.1.3 ping after close", frames: []fr{closeFr(StatusNormalClosure, ""), ping("")}, want: []rec{evClose(StatusNormalClosure, "")}},
		{name: "7.1.4 text after close", frames: []fr{closeFr(StatusNormalClosure, ""), txt("x")}, want: []rec{evClose(StatusNormalClosure, "")}},
		{name: "7.1.5 fragment close continuation", frames: []fr{{op: OpText, payload: "fragment1"}, closeFr(StatusNormalClosure, ""), cont(true, "fragment2")}, want: []rec{evClose(StatusNormalClosure, "")}},
		{name: "7.1.6 garbage after close", frames: []fr{closeFr(StatusNormalClosure, ""), {fin: true, op: 0xB}}, want: []rec{evClose(StatusNormalClosure, "")}},
		{name: "7.3.1 empty close", frames: []fr{{fin: true, op: OpClose}}, want: []rec{evClose(StatusNoStatusRcvd, "")}},
		{name: "7.3.2 close 1 byte", frames: []fr{{fin: true, op: OpClose, payload: "a"}}, code: StatusProtocolError},
		{name: "7.3.3 close code only", frames: []fr{closeFr(StatusNormalClosure, "")}, want: []rec{evClose(StatusNormalClosure, "")}},
		{name: "7.3.4 close with reason", frames: []fr{closeFr(StatusNormalClosure, "Hello World!")}, want: []rec{evClose(StatusNormalClosure, "Hello World!")}},
		{name: "7.3.5 close reason 123", frames: []fr{closeFr(StatusNormalClosure, rep("*", 123))}, want: []rec{evClose(StatusNormalClosure, rep("*", 123))}},
		{name: "7.3.6 close reason 124", frames: []fr{closeFr(StatusNormalClosure, rep("*", 124))}, code: StatusProtocolError},
		{name: "7.5.1 invalid utf8 reason", frames: []fr{closeFr(StatusNormalClosure, "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64")}, code: StatusInvalidFramePayloadData},
	}
	for _, c := range []StatusCode{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999} {
		cases = append(cases, pcase{name: fmt.Sprintf("7.7 valid code %d", c), frames: []fr{closeFr(c, "")}, want: []rec{evClose(c, "")}})
	}
	for _, c := range []StatusCode{0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535} {
		cases = append(cases, pcase{name: fmt.Sprintf("7.9 invalid code %d", c), frames: []fr{closeFr(c, "")}, code: StatusProtocolError})
	}
	for _, tc := range cases {
		runCase(t, tc)
	}
}

func TestAutobahnLimitedMessages(t *testing.T) { // cases 9.x, scaled
	sizes := []int{64 << 10, 256 << 10, 1 << 20, 4 << 20}
	if !testing.Short() {
		sizes = append(sizes, 16<<20)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		s := string(b)
		t8 := rep("a", n)
		cases := []pcase{
			{name: fmt.Sprintf("9.1 text %d", n), frames: []fr{txt(t8)}, want: []rec{msgT(t8)}},
			{name: fmt.Sprintf("9.2 binary %d", n), frames: []fr{bin(s)}, want: []rec{msgB(s)}},
		}
		var frag []fr
		for i := 0; i < n; i += 64 << 10 {
			f := fr{fin: i+64<<10 >= n, op: OpContinuation, payload: s[i:min(n, i+64<<10)]}
			if i == 0 {
				f.op = OpBinary
			}
			frag = append(frag, f)
		}
		cases = append(cases, pcase{name: fmt.Sprintf("9.4 fragmented binary %d", n), frames: frag, want: []rec{msgB(s)}})
		for _, tc := range cases {
			runCase(t, tc)
		}
	}
}

func TestLimits(t *testing.T) {
	big := rep("x", 1000)
	cases := []pcase{
		{name: "frame at limit", cfg: Config{MaxFrameSize: 1000}, frames: []fr{txt(big)}, want: []rec{msgT(big)}},
		{name: "frame over limit", cfg: Config{MaxFrameSize: 999}, frames: []fr{txt(big)}, code: StatusMessageTooBig},
		{name: "message at limit", cfg: Config{MaxMessageSize: 1000}, frames: []fr{{op: OpText, payload: big[:500]}, cont(true, big[500:])}, want: []rec{msgT(big)}},
		{name: "message over limit", cfg: Config{MaxMessageSize: 999}, frames: []fr{{op: OpText, payload: big[:500]}, cont(true, big[500:])}, code: StatusMessageTooBig},
		{name: "unlimited", cfg: Config{MaxMessageSize: -1, MaxFrameSize: -1}, frames: []fr{bin(big)}, want: []rec{msgB(big)}},
		{name: "limits per message", cfg: Config{MaxMessageSize: 1000}, frames: []fr{bin(big), bin(big)}, want: []rec{msgB(big), msgB(big)}},
	}
	for _, tc := range cases {
		runCase(t, tc)
	}
	// Default limits are on.
	p := NewProtocol(Config{Role: RoleClient})
	p.Receive(AppendHeader(nil, Header{Fin: true, Op: OpBinary, Length: DefaultMaxFrameSize + 1}))
	if _, err := p.Next(); err == nil {
		t.Fatal("default frame limit not enforced")
	}
	p = NewProtocol(Config{Role: RoleClient, MaxFrameSize: -1})
	p.Receive(AppendHeader(nil, Header{Fin: true, Op: OpBinary, Length: DefaultMaxMessageSize + 1}))
	if _, err := p.Next(); err == nil {
		t.Fatal("default message limit not enforced")
	}
}

func TestMasking(t *testing.T) {
	// RFC 6455 §5.1: the server fails on unmasked frames, the client on
	// masked ones.
	for _, f := range []fr{txt("hi"), ping(""), closeFr(1000, "")} {
		s := NewProtocol(Config{Role: RoleServer})
		res := feed(t, s, encodeFrames([]fr{f}, false), nil)
		var pe *ProtocolError
		if !errors.As(res.err, &pe) || pe.Code != StatusProtocolError {
			t.Fatalf("server accepted unmasked %v: %v", f.op, res.err)
		}
		c := NewProtocol(Config{Role: RoleClient})
		res = feed(t, c, encodeFrames([]fr{f}, true), nil)
		if !errors.As(res.err, &pe) || pe.Code != StatusProtocolError {
			t.Fatalf("client accepted masked %v: %v", f.op, res.err)
		}
	}
	// A client masks with fresh keys; a server does not mask.
	c := NewProtocol(Config{Role: RoleClient})
	a, _ := c.AppendMessage(nil, OpBinary, []byte("same"))
	b, _ := c.AppendMessage(nil, OpBinary, []byte("same"))
	if a[1]&0x80 == 0 || bytes.Equal(a, b) {
		t.Fatalf("client frames %x %x", a, b)
	}
	s := NewProtocol(Config{Role: RoleServer})
	if f, _ := s.AppendMessage(nil, OpBinary, []byte("x")); !bytes.Equal(f, []byte{0x82, 1, 'x'}) {
		t.Fatalf("server frame %x", f)
	}
}

func TestRawHeaderViolations(t *testing.T) {
	for name, wire := range map[string][]byte{
		"non-minimal 16":  {0x82, 126, 0, 5, 1, 2, 3, 4, 5},
		"non-minimal 64":  {0x82, 127, 0, 0, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4, 5},
		"64-bit MSB":      {0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1},
		"close len 126":   {0x88, 126, 0, 126},
		"control not fin": {0x09, 0},
	} {
		p := NewProtocol(Config{Role: RoleClient, MaxFrameSize: -1, MaxMessageSize: -1})
		res := feed(t, p, wire, byteByByte)
		var pe *ProtocolError
		if !errors.As(res.err, &pe) || pe.Code != StatusProtocolError {
			t.Errorf("%s: %v", name, res.err)
		}
	}
}

// TestStreaming checks that a large frame is delivered in pieces as bytes
// arrive, with Fin only on the last byte of the last frame.
func TestStreaming(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 10000)
	wire := frame(false, 0, OpText, testKey, payload[:60000])
	wire = append(wire, frame(true, 0, OpContinuation, testKey, payload[60000:])...)
	p := NewProtocol(Config{Role: RoleServer})
	var got []byte
	pieces := 0
	for i := 0; i < len(wire); i += 1000 {
		p.Receive(wire[i:min(len(wire), i+1000)])
		for {
			ev, err := p.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == EventNone {
				break
			}
			pieces++
			got = append(got, ev.Payload...)
			if ev.Fin != (len(got) == len(payload)) {
				t.Fatalf("Fin=%v after %d of %d bytes", ev.Fin, len(got), len(payload))
			}
			if ev.Op != OpText {
				t.Fatalf("op %v", ev.Op)
			}
		}
		// Everything received so far has been delivered (minus headers).
		if len(got) < i+1000-20 && i+1000 < len(wire) {
			t.Fatalf("after %d bytes only %d delivered", i+1000, len(got))
		}
	}
	if !bytes.Equal(got, payload) || pieces < 90 {
		t.Fatalf("pieces %d, equal %v", pieces, bytes.Equal(got, payload))
	}
}

func TestZeroAllocs(t *testing.T) {
	c := NewProtocol(Config{Role: RoleClient})
	s := NewProtocol(Config{Role: RoleServer})
	msg := bytes.Repeat([]byte("a"), 200)
	var wire, back []byte
	run := func() {
		wire, _ = c.AppendMessage(wire[:0], OpText, msg)
		wire = c.AppendPing(wire, []byte("x"))
		s.Receive(wire)
		for {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == EventNone {
				break
			}
			if ev.Kind == EventPing {
				back = s.AppendPong(back[:0], ev.Payload)
			} else {
				back, _ = s.AppendMessage(back, OpBinary, ev.Payload)
			}
		}
		c.Receive(back)
		for {
			ev, err := c.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == EventNone {
				break
			}
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("%v allocs per round trip", n)
	}
}

func TestAppendErrors(t *testing.T) {
	p := NewProtocol(Config{Role: RoleServer})
	if _, err := p.AppendMessage(nil, OpPing, nil); err == nil {
		t.Error("AppendMessage accepted ping")
	}
	if _, err := p.AppendFrame(nil, OpContinuation, nil, true); err == nil {
		t.Error("continuation without start")
	}
	if _, err := p.AppendFrame(nil, OpText, []byte("a"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendMessage(nil, OpText, nil); err == nil {
		t.Error("message while streaming")
	}
	if _, err := p.AppendFrame(nil, OpBinary, nil, true); err == nil {
		t.Error("new message while streaming")
	}
	if _, err := p.AppendFrame(nil, OpPing, []byte("interleaved"), true); err != nil {
		t.Error(err)
	}
	if _, err := p.AppendFrame(nil, OpContinuation, []byte("b"), true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []StatusCode{1004, 1005, 1006, 1015, 999, 2000, 5000} {
		if _, err := p.AppendClose(nil, c, "x"); err == nil {
			t.Errorf("AppendClose(%d) accepted", c)
		}
	}
	if _, err := p.AppendClose(nil, 1000, rep("x", 124)); err == nil {
		t.Error("long reason accepted")
	}
	if _, err := p.AppendClose(nil, 1000, "\xff"); err == nil {
		t.Error("invalid reason accepted")
	}
	if p.State() != StateOpen {
		t.Fatal("state changed by failed AppendClose")
	}
	out, err := p.AppendClose(nil, StatusNoStatusRcvd, "")
	if err != nil || !bytes.Equal(out, []byte{0x88, 0}) {
		t.Fatalf("empty close %x %v", out, err)
	}
	if _, err := p.AppendClose(nil, 1000, ""); !errors.Is(err, ErrClosed) {
		t.Error("second close")
	}
	if _, err := p.AppendMessage(nil, OpText, nil); !errors.Is(err, ErrClosed) {
		t.Error("data after close")
	}
	if got := p.AppendPing(nil, make([]byte, 200)); len(got) != 2+125 {
		t.Error("ping not truncated")
	}
}

func TestStateMachine(t *testing.T) {
	// Peer closes first.
	s := NewProtocol(Config{Role: RoleServer})
	s.Receive(frame(true, 0, OpClose, testKey, []byte{0x03, 0xe8}))
	if ev, err := s.Next(); err != nil || ev.Kind != EventClose {
		t.Fatal(ev, err)
	}
	if s.State() != StateCloseReceived {
		t.Fatal(s.State())
	}
	// Data may still be sent before the echo.
	if _, err := s.AppendMessage(nil, OpText, []byte("last")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendClose(nil, StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	if s.State() != StateClosed {
		t.Fatal(s.State())
	}
	if _, err := s.Next(); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	// We close first; data frames still arrive until the peer's close.
	c := NewProtocol(Config{Role: RoleClient})
	if _, err := c.AppendClose(nil, StatusGoingAway, "bye"); err != nil {
		t.Fatal(err)
	}
	if c.State() != StateCloseSent {
		t.Fatal(c.State())
	}
	res := feed(t, c, encodeFrames([]fr{txt("late"), closeFr(StatusGoingAway, "")}, false), nil)
	if res.err != nil || len(res.events) != 2 || c.State() != StateClosed {
		t.Fatalf("%+v %v", res, c.State())
	}
	// Failure after our close queues no second close.
	c = NewProtocol(Config{Role: RoleClient})
	c.AppendClose(nil, StatusGoingAway, "")
	res = feed(t, c, []byte{0x83, 0}, nil)
	if res.err == nil || c.HasPendingClose() || c.State() != StateClosed {
		t.Fatal("failure after close sent")
	}
	if _, err := c.Next(); err != res.err {
		t.Fatal("error not sticky")
	}
}
