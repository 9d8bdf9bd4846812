package ws_test

// Autobahn|Testsuite cases 1-7, 9, 10, 12 and 13, run at the connection
// level over loopback TCP, for both roles:
//
//   - server: the echo server of examples/echoserver (ws.Accept with
//     permessage-deflate, client context takeover, 16 MiB limits), driven by
//     a scripted raw client (the fuzzingclient's part);
//   - client: the echo loop of examples/echoclient (ws.Dial with
//     permessage-deflate), driven by a scripted raw server (the
//     fuzzingserver's part).
//
// Each case sends what the Autobahn case sends (from
// crossbario/autobahn-testsuite, autobahntestsuite/case/case*.py) and judges
// the outcome as Autobahn does: the events received must be the case's "OK"
// events (matching its "NON-STRICT" events fails the test too), the close
// must come from the expected endpoint with an expected code. Timeouts are
// scaled down (Autobahn waits 1 s where nothing should happen; we wait
// 100 ms) and so are the sizes of cases 9, 12 and 13.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ovbus/ovbus/ws"
)

type acase struct {
	id  string
	run func(p *peer)
}

var roles = []string{"server", "client"}

// runCases runs every case against both roles. offer is the scripted
// client's extension offer (server role); accept answers the echo client's
// offer (client role).
func runCases(t *testing.T, offer string, accept func(string) string, cases []acase) {
	srv := startEchoServer(t)
	for _, role := range roles {
		t.Run(role, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.id, func(t *testing.T) {
					t.Parallel()
					c.run(connect(t, srv, role, offer, accept))
				})
			}
		})
	}
}

func rep(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// frameWise writes each frame in its own write, with a pause (Autobahn's
// sync=True, "frame-wise chops").
func (p *peer) frameWise(frames ...[]byte) {
	for i, f := range frames {
		if i > 0 {
			time.Sleep(chopDelay)
		}
		p.write(f)
	}
}

// octetWise writes the frames one octet per write (Autobahn's chopsize=1).
func (p *peer) octetWise(frames ...[]byte) {
	p.writeChopped(bytes.Join(frames, nil), 1, chopDelay)
}

// ---- 1 Framing ----

func TestConformance1Framing(t *testing.T) {
	var cases []acase
	sizes := []int{0, 125, 126, 127, 128, 65535, 65536}
	for i, n := range sizes {
		text := strings.Repeat("*", n)
		cases = append(cases, acase{fmt.Sprintf("1.1.%d", i+1), func(p *peer) {
			p.sendFrame(true, 0, ws.OpText, []byte(text))
			p.finish(okClose(msgT(text)))
		}})
	}
	cases = append(cases, acase{"1.1.8", func(p *peer) {
		text := strings.Repeat("*", 65536)
		p.sendFrameChopped(true, 0, ws.OpText, []byte(text), 997)
		p.finish(okClose(msgT(text)))
	}})
	for i, n := range sizes {
		data := rep(0xfe, n)
		cases = append(cases, acase{fmt.Sprintf("1.2.%d", i+1), func(p *peer) {
			p.sendFrame(true, 0, ws.OpBinary, data)
			p.finish(okClose(msgB(data)))
		}})
	}
	cases = append(cases, acase{"1.2.8", func(p *peer) {
		data := rep(0xfe, 65536)
		p.sendFrameChopped(true, 0, ws.OpBinary, data, 997)
		p.finish(okClose(msgB(data)))
	}})
	runCases(t, "", nil, cases)
}

// ---- 2 Pings/Pongs ----

func TestConformance2PingPong(t *testing.T) {
	bin := []byte{0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff}
	tenPings := func(p *peer, chop bool) {
		var frames [][]byte
		var want []ev
		for i := range 10 {
			payload := fmt.Sprintf("payload-%d", i)
			frames = append(frames, p.encode(true, 0, ws.OpPing, []byte(payload)))
			want = append(want, pongS(payload))
		}
		if chop {
			p.octetWise(frames...)
		} else {
			p.sendFrames(frames...)
		}
		p.finish(okClose(want...))
	}
	cases := []acase{
		{"2.1", func(p *peer) {
			p.sendFrame(true, 0, ws.OpPing, nil)
			p.finish(okClose(pongEv(nil)))
		}},
		{"2.2", func(p *peer) {
			p.sendFrame(true, 0, ws.OpPing, []byte("Hello, world!"))
			p.finish(okClose(pongS("Hello, world!")))
		}},
		{"2.3", func(p *peer) {
			p.sendFrame(true, 0, ws.OpPing, bin)
			p.finish(okClose(pongEv(bin)))
		}},
		{"2.4", func(p *peer) {
			p.sendFrame(true, 0, ws.OpPing, rep(0xfe, 125))
			p.finish(okClose(pongEv(rep(0xfe, 125))))
		}},
		{"2.5", func(p *peer) {
			p.sendFrame(true, 0, ws.OpPing, rep(0xfe, 126))
			p.finish(failWith(ws.StatusProtocolError))
		}},
		{"2.6", func(p *peer) {
			p.sendFrameChopped(true, 0, ws.OpPing, rep(0xfe, 125), 1)
			p.finish(okClose(pongEv(rep(0xfe, 125))))
		}},
		{"2.7", func(p *peer) {
			p.sendFrame(true, 0, ws.OpPong, nil)
			p.finish(okClose())
		}},
		{"2.8", func(p *peer) {
			p.sendFrame(true, 0, ws.OpPong, []byte("unsolicited pong payload"))
			p.finish(okClose())
		}},
		{"2.9", func(p *peer) {
			p.sendFrames(p.encode(true, 0, ws.OpPong, []byte("unsolicited pong payload")),
				p.encode(true, 0, ws.OpPing, []byte("ping payload")))
			p.finish(okClose(pongS("ping payload")))
		}},
		{"2.10", func(p *peer) { tenPings(p, false) }},
		{"2.11", func(p *peer) { tenPings(p, true) }},
	}
	runCases(t, "", nil, cases)
}

// ---- 3 Reserved bits ----

func TestConformance3ReservedBits(t *testing.T) {
	hello := []byte("Hello, world!")
	// echoThenFail: a valid text message, the same with reserved bits, a
	// ping; the echo arrives, then the failure, and no pong.
	echoThenFail := func(rsv byte, send func(p *peer, frames ...[]byte)) func(p *peer) {
		return func(p *peer) {
			send(p, p.encode(true, 0, ws.OpText, hello), p.encode(true, rsv, ws.OpText, hello), p.encode(true, 0, ws.OpPing, nil))
			exp := failWith(ws.StatusProtocolError, msgT(string(hello)))
			exp.nonStrict = []ev{}
			p.finish(exp)
		}
	}
	cases := []acase{
		{"3.1", func(p *peer) {
			p.sendFrame(true, 1, ws.OpText, hello)
			p.finish(failWith(ws.StatusProtocolError))
		}},
		{"3.2", echoThenFail(2, (*peer).sendFrames)},
		{"3.3", echoThenFail(3, (*peer).frameWise)},
		{"3.4", echoThenFail(4, (*peer).octetWise)},
		{"3.5", func(p *peer) {
			p.sendFrame(true, 5, ws.OpBinary, []byte{0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff})
			p.finish(failWith(ws.StatusProtocolError))
		}},
		{"3.6", func(p *peer) {
			p.sendFrame(true, 6, ws.OpPing, hello)
			p.finish(failWith(ws.StatusProtocolError))
		}},
		{"3.7", func(p *peer) {
			p.sendFrame(true, 7, ws.OpClose, nil)
			p.finish(failWith(ws.StatusProtocolError))
		}},
	}
	runCases(t, "", nil, cases)
}

// ---- 4 Opcodes ----

func TestConformance4Opcodes(t *testing.T) {
	hello := []byte("Hello, world!")
	alone := func(op ws.Opcode, payload []byte) func(p *peer) {
		return func(p *peer) {
			p.sendFrame(true, 0, op, payload)
			p.finish(failWith(ws.StatusProtocolError))
		}
	}
	afterText := func(op ws.Opcode, payload []byte) func(p *peer) {
		return func(p *peer) {
			p.sendFrames(p.encode(true, 0, ws.OpText, hello), p.encode(true, 0, op, payload), p.encode(true, 0, ws.OpPing, nil))
			exp := failWith(ws.StatusProtocolError, msgT(string(hello)))
			exp.nonStrict = []ev{}
			p.finish(exp)
		}
	}
	cases := []acase{
		{"4.1.1", alone(3, nil)},
		{"4.1.2", alone(4, []byte("reserved opcode payload"))},
		{"4.1.3", afterText(5, nil)},
		{"4.1.4", afterText(6, hello)},
		{"4.1.5", afterText(7, hello)},
		{"4.2.1", alone(11, nil)},
		{"4.2.2", alone(12, []byte("reserved opcode payload"))},
		{"4.2.3", afterText(13, nil)},
		{"4.2.4", afterText(14, hello)},
		{"4.2.5", afterText(15, hello)},
	}
	runCases(t, "", nil, cases)
}

// ---- 5 Fragmentation ----

func TestConformance5Fragmentation(t *testing.T) {
	f1, f2 := []byte("fragment1"), []byte("fragment2")
	type sender func(p *peer, frames ...[]byte)
	oneChop, frameChops, octetChops := sender((*peer).sendFrames), sender((*peer).frameWise), sender((*peer).octetWise)

	fragmentedControl := func(op ws.Opcode) func(p *peer) {
		return func(p *peer) {
			p.sendFrames(p.encode(false, 0, op, f1), p.encode(true, 0, ws.OpContinuation, f2))
			p.finish(failWith(ws.StatusProtocolError))
		}
	}
	twoFragments := func(send sender) func(p *peer) {
		return func(p *peer) {
			send(p, p.encode(false, 0, ws.OpText, f1), p.encode(true, 0, ws.OpContinuation, f2))
			p.finish(okClose(msgT("fragment1fragment2")))
		}
	}
	pingBetween := func(send sender) func(p *peer) {
		return func(p *peer) {
			send(p, p.encode(false, 0, ws.OpText, f1), p.encode(true, 0, ws.OpPing, []byte("ping payload")),
				p.encode(true, 0, ws.OpContinuation, f2))
			p.finish(okClose(pongS("ping payload"), msgT("fragment1fragment2")))
		}
	}
	nothingToContinue := func(fin bool, send sender) func(p *peer) {
		return func(p *peer) {
			send(p, p.encode(fin, 0, ws.OpContinuation, []byte("non-continuation payload")),
				p.encode(true, 0, ws.OpText, []byte("Hello, world!")))
			p.finish(failWith(ws.StatusProtocolError))
		}
	}
	repeatedNothingToContinue := func(fin bool) func(p *peer) {
		return func(p *peer) {
			var frames [][]byte
			for range 2 {
				frames = append(frames, p.encode(fin, 0, ws.OpContinuation, f1),
					p.encode(false, 0, ws.OpText, f2), p.encode(true, 0, ws.OpContinuation, []byte("fragment3")))
			}
			p.sendFrames(frames...)
			p.finish(failWith(ws.StatusProtocolError))
		}
	}
	// 5.19/5.20: the first pong must come before the rest of the message is
	// sent.
	pingsInMessage := func(send sender) func(p *peer) {
		return func(p *peer) {
			frag := func(i int) []byte { return []byte(fmt.Sprintf("fragment%d", i)) }
			send(p, p.encode(false, 0, ws.OpText, frag(1)), p.encode(false, 0, ws.OpContinuation, frag(2)),
				p.encode(true, 0, ws.OpPing, []byte("pongme 1!")))
			if !p.waitEvents([]ev{pongS("pongme 1!")}) {
				p.t.Errorf("FAILED: no pong for the ping sent in the middle of a fragmented message")
			}
			send(p, p.encode(false, 0, ws.OpContinuation, frag(3)), p.encode(false, 0, ws.OpContinuation, frag(4)),
				p.encode(true, 0, ws.OpPing, []byte("pongme 2!")), p.encode(true, 0, ws.OpContinuation, frag(5)))
			p.finish(okClose(pongS("pongme 1!"), pongS("pongme 2!"), msgT("fragment1fragment2fragment3fragment4fragment5")))
		}
	}
	cases := []acase{
		{"5.1", fragmentedControl(ws.OpPing)},
		{"5.2", fragmentedControl(ws.OpPong)},
		{"5.3", twoFragments(oneChop)},
		{"5.4", twoFragments(frameChops)},
		{"5.5", twoFragments(octetChops)},
		{"5.6", pingBetween(oneChop)},
		{"5.7", pingBetween(frameChops)},
		{"5.8", pingBetween(octetChops)},
		{"5.9", nothingToContinue(true, oneChop)},
		{"5.10", nothingToContinue(true, frameChops)},
		{"5.11", nothingToContinue(true, octetChops)},
		{"5.12", nothingToContinue(false, oneChop)},
		{"5.13", nothingToContinue(false, frameChops)},
		{"5.14", nothingToContinue(false, octetChops)},
		{"5.15", func(p *peer) {
			p.sendFrames(p.encode(false, 0, ws.OpText, f1), p.encode(true, 0, ws.OpContinuation, f2),
				p.encode(false, 0, ws.OpContinuation, []byte("fragment3")), p.encode(true, 0, ws.OpText, []byte("fragment4")))
			exp := failWith(ws.StatusProtocolError, msgT("fragment1fragment2"))
			exp.nonStrict = []ev{}
			p.finish(exp)
		}},
		{"5.16", repeatedNothingToContinue(false)},
		{"5.17", repeatedNothingToContinue(true)},
		{"5.18", func(p *peer) {
			p.sendFrames(p.encode(false, 0, ws.OpText, f1), p.encode(true, 0, ws.OpText, f2))
			p.finish(failWith(ws.StatusProtocolError))
		}},
		{"5.19", pingsInMessage(oneChop)},
		{"5.20", pingsInMessage(frameChops)},
	}
	runCases(t, "", nil, cases)
}

// ---- 6 UTF-8 handling ----

// utf8Sequences are the test sequences of Autobahn's case6_x_x.py
// (createUtf8TestSequences, after Markus Kuhn's UTF-8-test.txt): cases 6.5
// to 6.23, each a (valid, payload) list.
func utf8Sequences() [][]struct {
	valid   bool
	payload string
} {
	type seq = struct {
		valid   bool
		payload string
	}
	var groups [][]seq
	add := func(valid bool, ps ...string) []seq {
		var g []seq
		for _, s := range ps {
			g = append(g, seq{valid, s})
		}
		return g
	}
	vss := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	// 6.5 some valid UTF-8 sequences
	groups = append(groups, add(true, "hello\x24world", "hello\xC2\xA2world", "hello\xE2\x82\xACworld", "hello\xF0\xA4\xAD\xA2world", vss))
	// 6.6 all prefixes of a valid string with multi-byte code points
	var prefixes []seq
	for i := 1; i <= len(vss); i++ {
		prefixes = append(prefixes, seq{utf8.ValidString(vss[:i]), vss[:i]})
	}
	groups = append(groups, prefixes)
	// 6.7 first possible sequence of a certain length
	groups = append(groups, add(true, "\x00", "\xc2\x80", "\xe0\xa0\x80", "\xf0\x90\x80\x80"))
	// 6.8 first possible sequence length 5/6 (invalid code points)
	groups = append(groups, add(false, "\xf8\x88\x80\x80\x80", "\xfc\x84\x80\x80\x80\x80"))
	// 6.9 last possible sequence of a certain length
	groups = append(groups, add(true, "\x7f", "\xdf\xbf", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"))
	// 6.10 last possible sequence length 4/5/6 (invalid code points)
	groups = append(groups, add(false, "\xf7\xbf\xbf\xbf", "\xfb\xbf\xbf\xbf\xbf", "\xfd\xbf\xbf\xbf\xbf\xbf"))
	// 6.11 other boundary conditions
	groups = append(groups, append(add(true, "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbd", "\xf4\x8f\xbf\xbf"), add(false, "\xf4\x90\x80\x80")...))
	// 6.12 unexpected continuation bytes
	var all []byte
	for c := 0x80; c < 0xbf; c++ {
		all = append(all, byte(c))
	}
	groups = append(groups, add(false, "\x80", "\xbf", "\x80\xbf", "\x80\xbf\x80", "\x80\xbf\x80\xbf", "\x80\xbf\x80\xbf\x80", "\x80\xbf\x80\xbf\x80\xbf", string(all)))
	// 6.13 lonely start characters
	var lonely []string
	for _, r := range [][2]int{{0xc0, 0xdf}, {0xe0, 0xef}, {0xf0, 0xf7}, {0xf8, 0xfb}, {0xfc, 0xfd}} {
		var s []byte
		for c := r[0]; c < r[1]; c++ {
			s = append(s, byte(c), 0x20)
		}
		lonely = append(lonely, string(s))
	}
	groups = append(groups, add(false, lonely...))
	// 6.14 sequences with the last continuation byte missing
	k := []string{"\xc0", "\xe0\x80", "\xf0\x80\x80", "\xf8\x80\x80\x80", "\xfc\x80\x80\x80\x80",
		"\xdf", "\xef\xbf", "\xf7\xbf\xbf", "\xfb\xbf\xbf\xbf", "\xfd\xbf\xbf\xbf\xbf"}
	groups = append(groups, add(false, k...))
	// 6.15 concatenation of incomplete sequences
	groups = append(groups, add(false, strings.Join(k, "")))
	// 6.16 impossible bytes
	groups = append(groups, add(false, "\xfe", "\xff", "\xfe\xfe\xff\xff"))
	// 6.17 overlong ASCII character
	groups = append(groups, add(false, "\xc0\xaf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf", "\xf8\x80\x80\x80\xaf", "\xfc\x80\x80\x80\x80\xaf"))
	// 6.18 maximum overlong sequences
	groups = append(groups, add(false, "\xc1\xbf", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf", "\xf8\x87\xbf\xbf\xbf", "\xfc\x83\xbf\xbf\xbf\xbf"))
	// 6.19 overlong NUL
	groups = append(groups, add(false, "\xc0\x80", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\xf8\x80\x80\x80\x80", "\xfc\x80\x80\x80\x80\x80"))
	// 6.20 single UTF-16 surrogates
	groups = append(groups, add(false, "\xed\xa0\x80", "\xed\xad\xbf", "\xed\xae\x80", "\xed\xaf\xbf", "\xed\xb0\x80", "\xed\xbe\x80", "\xed\xbf\xbf"))
	// 6.21 paired UTF-16 surrogates
	groups = append(groups, add(false, "\xed\xa0\x80\xed\xb0\x80", "\xed\xa0\x80\xed\xbf\xbf", "\xed\xad\xbf\xed\xb0\x80", "\xed\xad\xbf\xed\xbf\xbf",
		"\xed\xae\x80\xed\xb0\x80", "\xed\xae\x80\xed\xbf\xbf", "\xed\xaf\xbf\xed\xb0\x80", "\xed\xaf\xbf\xed\xbf\xbf"))
	// 6.22 non-character code points (valid UTF-8)
	nonchars := []string{"\xef\xbf\xbe", "\xef\xbf\xbf"}
	for _, z1 := range []string{"\xf0", "\xf1", "\xf2", "\xf3", "\xf4"} {
		for _, z2 := range []string{"\x8f", "\x9f", "\xaf", "\xbf"} {
			if z1 == "\xf4" && z2 != "\x8f" {
				continue
			}
			for _, z3 := range []string{"\xbe", "\xbf"} {
				zz := z1 + z2 + "\xbf" + z3
				if zz != "\xf0\x8f\xbf\xbe" && zz != "\xf0\x8f\xbf\xbf" {
					nonchars = append(nonchars, zz)
				}
			}
		}
	}
	groups = append(groups, add(true, nonchars...))
	// 6.23 Unicode specials
	groups = append(groups, add(true, "\xef\xbf\xb9", "\xef\xbf\xba", "\xef\xbf\xbb", "\xef\xbf\xbc", "\xef\xbf\xbd", "\xef\xbf\xbe", "\xef\xbf\xbf"))
	return groups
}

func TestConformance6UTF8(t *testing.T) {
	hello := "Hello-\u00b5@\u00df\u00f6\u00e4\u00fc\u00e0\u00e1-UTF-8!!"
	kosme := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	invalid := kosme + "\xed\xa0\x80" + "\x65\x64\x69\x74\x65\x64"
	bytewise := func(op ws.Opcode, s string) func(p *peer) [][]byte {
		return func(p *peer) [][]byte {
			var frames [][]byte
			for i := range len(s) {
				o := ws.OpContinuation
				if i == 0 {
					o = op
				}
				frames = append(frames, p.encode(i == len(s)-1, 0, o, []byte{s[i]}))
			}
			return frames
		}
	}
	// failFast sends parts 1-3 of an invalid text message (as separate
	// frames, or as chops of one frame) and requires the connection to be
	// failed right after part 2, before part 3 is sent (cases 6.4.x).
	failFast := func(p1, p2, p3 string, oneFrame bool) func(p *peer) {
		return func(p *peer) {
			var parts [][]byte
			if oneFrame {
				full := p.encode(true, 0, ws.OpText, []byte(p1+p2+p3))
				h := len(full) - len(p1+p2+p3)
				parts = [][]byte{full[:h+len(p1)], full[h+len(p1) : h+len(p1+p2)], full[h+len(p1+p2):]}
			} else {
				parts = [][]byte{p.encode(false, 0, ws.OpText, []byte(p1)), p.encode(false, 0, ws.OpContinuation, []byte(p2)),
					p.encode(true, 0, ws.OpContinuation, []byte(p3))}
			}
			p.write(parts[0])
			if p.closedWithin(quiet) {
				p.t.Errorf("FAILED: connection closed after the valid first part %x", p1)
			}
			if p.open() {
				p.write(parts[1])
				if !p.closedWithin(patience) {
					p.t.Errorf("NON-STRICT: not failed right after the invalid part %x", p2)
				}
			}
			if p.open() {
				p.write(parts[2])
			}
			p.finish(failWith(ws.StatusInvalidFramePayloadData))
		}
	}
	cases := []acase{
		{"6.1.1", func(p *peer) {
			p.sendFrame(true, 0, ws.OpText, nil)
			p.finish(okClose(msgT("")))
		}},
		{"6.1.2", func(p *peer) {
			p.sendFrames(p.encode(false, 0, ws.OpText, nil), p.encode(false, 0, ws.OpContinuation, nil), p.encode(true, 0, ws.OpContinuation, nil))
			p.finish(okClose(msgT("")))
		}},
		{"6.1.3", func(p *peer) {
			p.sendFrames(p.encode(false, 0, ws.OpText, nil), p.encode(false, 0, ws.OpContinuation, []byte("middle frame payload")),
				p.encode(true, 0, ws.OpContinuation, nil))
			p.finish(okClose(msgT("middle frame payload")))
		}},
		{"6.2.1", func(p *peer) {
			p.sendFrame(true, 0, ws.OpText, []byte(hello))
			p.finish(okClose(msgT(hello)))
		}},
		{"6.2.2", func(p *peer) {
			p.sendFrames(p.encode(false, 0, ws.OpText, []byte(hello[:15])), p.encode(true, 0, ws.OpContinuation, []byte(hello[15:])))
			p.finish(okClose(msgT(hello)))
		}},
		{"6.2.3", func(p *peer) {
			p.sendFrames(bytewise(ws.OpText, hello)(p)...)
			p.finish(okClose(msgT(hello)))
		}},
		{"6.2.4", func(p *peer) {
			p.sendFrames(bytewise(ws.OpText, kosme)(p)...)
			p.finish(okClose(msgT(kosme)))
		}},
		{"6.3.1", func(p *peer) {
			p.sendFrame(true, 0, ws.OpText, []byte(invalid))
			p.finish(failWith(ws.StatusInvalidFramePayloadData))
		}},
		{"6.3.2", func(p *peer) {
			p.sendFrames(bytewise(ws.OpText, invalid)(p)...)
			p.finish(failWith(ws.StatusInvalidFramePayloadData))
		}},
		{"6.4.1", failFast(kosme, "\xf4\x90\x80\x80", "\x65\x64\x69\x74\x65\x64", false)},
		{"6.4.2", failFast(kosme+"\xf4", "\x90", "\x80\x80\x65\x64\x69\x74\x65\x64", false)},
		{"6.4.3", failFast(kosme, "\xf4\x90\x80\x80", "\x65\x64\x69\x74\x65\x64", true)},
		{"6.4.4", failFast(kosme+"\xf4", "\x90", "\x80\x80\x65\x64\x69\x74\x65\x64", true)},
	}
	if hello[:15] != "Hello-\u00b5@\u00df\u00f6\u00e4" {
		t.Fatal("6.2.2 split")
	}
	for gi, g := range utf8Sequences() {
		for si, s := range g {
			if s.valid != utf8.ValidString(s.payload) {
				t.Fatalf("6.%d.%d: sequence %x marked valid=%v", gi+5, si+1, s.payload, s.valid)
			}
			cases = append(cases, acase{fmt.Sprintf("6.%d.%d", gi+5, si+1), func(p *peer) {
				p.sendFrame(true, 0, ws.OpText, []byte(s.payload))
				if s.valid {
					p.finish(okClose(msgT(s.payload)))
				} else {
					p.finish(failWith(ws.StatusInvalidFramePayloadData))
				}
			}})
		}
	}
	runCases(t, "", nil, cases)
}

// ---- 7 Close handling ----

func TestConformance7Close(t *testing.T) {
	hello := []byte("Hello World!")
	invalidUTF8 := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64"
	// closeWith: we start the closing handshake with body; the
	// implementation answers with one of codes (or no code when codes
	// includes 1000, as Autobahn allows "or empty").
	closeWith := func(body []byte, clean bool, codes ...ws.StatusCode) func(p *peer) {
		return func(p *peer) {
			p.sendCloseRaw(body)
			p.finish(expect{ok: []ev{}, closedByMe: true, codes: codes, clean: clean})
		}
	}
	cases := []acase{
		{"7.1.1", func(p *peer) {
			p.sendFrame(true, 0, ws.OpText, hello)
			p.sendClose(ws.StatusNormalClosure, "")
			p.finish(okClose(msgT(string(hello))))
		}},
		{"7.1.2", func(p *peer) {
			p.sendClose(ws.StatusNormalClosure, "")
			p.sendFrame(true, 0, ws.OpClose, nil)
			p.finish(okClose())
		}},
		{"7.1.3", func(p *peer) {
			p.sendClose(ws.StatusNormalClosure, "")
			p.sendFrame(true, 0, ws.OpPing, nil)
			p.finish(okClose())
		}},
		{"7.1.4", func(p *peer) {
			p.sendClose(ws.StatusNormalClosure, "")
			p.sendFrame(true, 0, ws.OpText, hello)
			p.finish(okClose())
		}},
		{"7.1.5", func(p *peer) {
			p.sendFrame(false, 0, ws.OpText, []byte("fragment1"))
			p.sendClose(ws.StatusNormalClosure, "")
			p.sendFrame(true, 0, ws.OpContinuation, []byte("fragment2"))
			p.finish(okClose())
		}},
		{"7.1.6", func(p *peer) {
			big := bytes.Repeat([]byte("BAsd7&jh23"), 256<<10/10+1)[:256<<10]
			p.sendFrame(true, 0, ws.OpText, big)
			p.sendFrame(true, 0, ws.OpText, hello)
			p.sendClose(ws.StatusNormalClosure, "")
			p.sendFrame(true, 0, ws.OpPing, nil)
			exp := okClose(msgT(string(big)), msgT(string(hello)))
			exp.informational = true
			p.finish(exp)
			if events, _, _ := p.snapshot(); !evsEqual(events, exp.ok) {
				p.t.Logf("7.1.6 (informational): close processed before the messages were echoed")
			}
		}},
		{"7.3.1", closeWith(nil, true, ws.StatusNormalClosure)},
		{"7.3.2", closeWith([]byte("a"), true, ws.StatusProtocolError)},
		{"7.3.3", closeWith(closePayload(1000, ""), true, ws.StatusNormalClosure)},
		{"7.3.4", closeWith(closePayload(1000, "Hello World!"), true, ws.StatusNormalClosure)},
		{"7.3.5", closeWith(closePayload(1000, strings.Repeat("*", 123)), true, ws.StatusNormalClosure)},
		{"7.3.6", func(p *peer) {
			// A 126-byte close payload: too long for a control frame.
			p.sendCloseRaw(closePayload(1000, strings.Repeat("*", 124)))
			p.finish(expect{ok: []ev{}, closedByMe: true, codes: []ws.StatusCode{ws.StatusProtocolError}, clean: true})
		}},
		{"7.5.1", closeWith(closePayload(1000, invalidUTF8), true, ws.StatusProtocolError, ws.StatusInvalidFramePayloadData)},
	}
	for i, code := range []ws.StatusCode{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		// Autobahn accepts 1000 or the code; we require the echo (RFC 6455
		// §5.5.1: "typically echos the status code it received").
		cases = append(cases, acase{fmt.Sprintf("7.7.%d", i+1), closeWith(closePayload(code, ""), true, code)})
	}
	for i, code := range []ws.StatusCode{0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999} {
		body := binary.BigEndian.AppendUint16(nil, uint16(code))
		cases = append(cases, acase{fmt.Sprintf("7.9.%d", i+1), closeWith(body, true, ws.StatusProtocolError)})
	}
	for i, code := range []int{5000, 65535} {
		cases = append(cases, acase{fmt.Sprintf("7.13.%d", i+1), func(p *peer) {
			p.sendCloseRaw(binary.BigEndian.AppendUint16(nil, uint16(code)))
			p.finish(expect{ok: []ev{}, closedByMe: true, codes: []ws.StatusCode{1000, 1002}, informational: true})
			if _, ci, _ := p.snapshot(); ci == nil || ci.code != ws.StatusProtocolError {
				p.t.Errorf("close code %d answered with %v, want 1002", code, ci)
			}
		}})
	}
	runCases(t, "", nil, cases)
}

// ---- 9 Limits/Performance (scaled down) ----

func TestConformance9Limits(t *testing.T) {
	textOf := func(n int) []byte { return bytes.Repeat([]byte("BAsd7&jh23"), n/10+1)[:n] }
	binOf := func(n int) []byte {
		if n <= 64<<10 {
			return binaryData(n, uint64(n))
		}
		return bytes.Repeat(binaryData(64<<10, uint64(n)), n/(64<<10)+1)[:n]
	}
	one := func(op ws.Opcode, data []byte, frag int) func(p *peer) {
		return func(p *peer) {
			p.sendMessage(op, data, frag)
			p.finish(okClose(ev{kind: evMessage, binary: op == ws.OpBinary, data: data}))
		}
	}
	chopped := func(op ws.Opcode, data []byte, chop int) func(p *peer) {
		return func(p *peer) {
			p.writeChopped(p.encode(true, 0, op, data), chop, 0)
			p.finish(okClose(ev{kind: evMessage, binary: op == ws.OpBinary, data: data}))
		}
	}
	roundTrips := func(op ws.Opcode, size, count int) func(p *peer) {
		return func(p *peer) {
			var want []ev
			for i := range count {
				var data []byte
				if op == ws.OpText {
					data = textOf(size)
				} else {
					data = binOf(size)
				}
				p.sendFrame(true, 0, op, data)
				want = append(want, ev{kind: evMessage, binary: op == ws.OpBinary, data: data})
				if !p.waitEventCount(i + 1) {
					break
				}
			}
			p.finish(okClose(want...))
		}
	}
	var cases []acase
	// 9.1/9.2: single-frame messages of 64 KiB .. 4 MiB (Autobahn: up to
	// 16 MiB; one 16 MiB binary message is sent in 9.2.6).
	for i, n := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20} {
		cases = append(cases, acase{fmt.Sprintf("9.1.%d", i+1), one(ws.OpText, textOf(n), 0)})
		cases = append(cases, acase{fmt.Sprintf("9.2.%d", i+1), one(ws.OpBinary, binOf(n), 0)})
	}
	cases = append(cases, acase{"9.2.6", one(ws.OpBinary, binOf(16<<20), 0)})
	// 9.3/9.4: a fragmented message (Autobahn 4 MiB; here 256 KiB) in
	// frames of 64 B .. 256 KiB.
	for i, frag := range []int{64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10} {
		cases = append(cases, acase{fmt.Sprintf("9.3.%d", i+1), one(ws.OpText, textOf(256<<10), frag)})
		cases = append(cases, acase{fmt.Sprintf("9.4.%d", i+1), one(ws.OpBinary, binOf(256<<10), frag)})
	}
	// 9.5/9.6: one frame (Autobahn 1 MiB; here 256 KiB) written in chops of
	// 64 B .. 2 KiB.
	for i, chop := range []int{64, 128, 256, 512, 1024, 2048} {
		cases = append(cases, acase{fmt.Sprintf("9.5.%d", i+1), chopped(ws.OpText, textOf(256<<10), chop)})
		cases = append(cases, acase{fmt.Sprintf("9.6.%d", i+1), chopped(ws.OpBinary, binOf(256<<10), chop)})
	}
	// 9.7/9.8: round trips of small messages (Autobahn 1000 each; here 100).
	for i, size := range []int{0, 16, 64, 256, 1024, 4096} {
		cases = append(cases, acase{fmt.Sprintf("9.7.%d", i+1), roundTrips(ws.OpText, size, 100)})
		cases = append(cases, acase{fmt.Sprintf("9.8.%d", i+1), roundTrips(ws.OpBinary, size, 100)})
	}
	// Beyond Autobahn: a frame one byte over the limit is refused with 1009
	// as soon as its header arrives.
	cases = append(cases, acase{"9.limit", func(p *peer) {
		limit := int64(16 << 20) // echoserver
		if p.role == "client" {
			limit = 64 << 20 // echoclient
		}
		h := ws.Header{Fin: true, Op: ws.OpBinary, Length: limit + 1, Masked: p.isClient}
		p.write(ws.AppendHeader(nil, h))
		p.finish(failWith(ws.StatusMessageTooBig))
	}})
	runCases(t, "", nil, cases)
}

// ---- 10 Misc ----

func TestConformance10AutoFragmentation(t *testing.T) {
	text := strings.Repeat("*", 65536)
	runCases(t, "", nil, []acase{{"10.1.1", func(p *peer) {
		p.sendMessage(ws.OpText, []byte(text), 1300)
		p.finish(okClose(msgT(text)))
	}}})
}

// ---- 12, 13 permessage-deflate ----

// msgSizes are Autobahn's MSG_SIZES (payload length, auto-fragment size);
// Autobahn sends 1000 messages of each, we send a few.
var msgSizes = [][2]int{
	{16, 0}, {64, 0}, {256, 0}, {1024, 0}, {4096, 0}, {8192, 0}, {16384, 0}, {32768, 0}, {65536, 0}, {131072, 0},
	{8192, 256}, {16384, 256}, {32768, 256}, {65536, 256}, {131072, 256}, {131072, 1024}, {131072, 4096}, {131072, 32768},
}

// deflateCount is how many messages of a size a case 12/13 sends (Autobahn:
// 1000), to keep the run short under the race detector.
func deflateCount(size int) int {
	switch {
	case size <= 4096:
		return 3
	case size <= 32768:
		return 2
	}
	return 1
}

// deflateExchange is a case 12/13 body: count compressed messages of size
// bytes, each sent after the echo of the previous one arrived (Autobahn's
// sendOne/onMessage), the data sliced from one stream as Autobahn slices its
// test file.
func deflateExchange(binaryMsgs bool, size, frag, count int) func(p *peer) {
	return func(p *peer) {
		t := p.t
		if p.pmd == nil {
			t.Fatal("UNIMPLEMENTED: permessage-deflate not negotiated")
		}
		op := ws.OpText
		src := textData(size*count, uint64(size))
		if binaryMsgs {
			op = ws.OpBinary
			src = binaryData(size*count, uint64(size))
		}
		var want []ev
		for i := range count {
			data := src[i*size : (i+1)*size]
			p.sendCompressed(op, data, frag)
			want = append(want, ev{kind: evMessage, binary: binaryMsgs, data: data})
			if !p.waitEventCount(i + 1) {
				break
			}
		}
		p.finish(okClose(want...))
		p.mu.Lock()
		n := p.compressed
		p.mu.Unlock()
		if size >= 1024 && n == 0 {
			t.Errorf("the %s echoed %d-byte messages without compressing them", p.role, size)
		}
	}
}

// autobahnOffer is the extension offer of Autobahn's
// PerMessageDeflateOffer(acceptNoContextTakeover=True,
// acceptMaxWindowBits=True, requestNoContextTakeover, requestMaxWindowBits).
func autobahnOffer(requestNoCtx bool, requestBits int) string {
	s := "permessage-deflate; client_no_context_takeover; client_max_window_bits"
	if requestNoCtx {
		s += "; server_no_context_takeover"
	}
	if requestBits != 0 {
		s += fmt.Sprintf("; server_max_window_bits=%d", requestBits)
	}
	return s
}

func TestConformance12Deflate(t *testing.T) {
	var cases []acase
	for j, binaryMsgs := range []bool{false, true} {
		for i, s := range msgSizes {
			cases = append(cases, acase{fmt.Sprintf("12.%d.%d", j+1, i+1), deflateExchange(binaryMsgs, s[0], s[1], deflateCount(s[0]))})
		}
	}
	// Autobahn's fuzzingserver accepts with accept_deflate: "permessage-deflate".
	runCases(t, autobahnOffer(false, 0), func(string) string { return "permessage-deflate" }, cases)
}

// TestConformance12DeflateViolations: what RFC 7692 forbids once the
// extension is in use (not in Autobahn's cases).
func TestConformance12DeflateViolations(t *testing.T) {
	cases := []acase{
		{"rsv1-continuation", func(p *peer) {
			p.sendFrames(p.encode(false, 0, ws.OpText, []byte("fragment1")), p.encode(true, 4, ws.OpContinuation, []byte("fragment2")))
			p.finish(failWith(ws.StatusProtocolError))
		}},
		{"rsv1-ping", func(p *peer) {
			p.sendFrame(true, 4, ws.OpPing, []byte("ping"))
			p.finish(failWith(ws.StatusProtocolError))
		}},
		{"bad-deflate-data", func(p *peer) {
			// BTYPE=11 is reserved.
			p.sendFrame(true, 4, ws.OpBinary, []byte{0xff, 0xff, 0xff, 0xff})
			p.finish(failWith(ws.StatusInvalidFramePayloadData))
		}},
		{"compressed-invalid-utf8", func(p *peer) {
			p.sendCompressed(ws.OpText, []byte("\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited"), 0)
			p.finish(failWith(ws.StatusInvalidFramePayloadData))
		}},
		{"compressed-utf8-across-inflate-chunks", func(p *peer) {
			// 3-byte runes over 100 KiB: pieces of any power-of-two size
			// end inside a rune.
			text := strings.Repeat("\u20ac\u00b5x", 100<<10/6)
			p.sendCompressed(ws.OpText, []byte(text), 0)
			p.finish(okClose(msgT(text)))
		}},
		{"uncompressed-after-compressed", func(p *peer) {
			p.sendCompressed(ws.OpText, []byte("compressed message"), 0)
			p.sendFrame(true, 0, ws.OpText, []byte("plain message"))
			p.finish(okClose(msgT("compressed message"), msgT("plain message")))
		}},
	}
	runCases(t, autobahnOffer(false, 0), func(string) string { return "permessage-deflate" }, cases)
}

// TestConformanceDeflateBomb: a small compressed message that inflates
// past the echo server's 16 MiB limit fails the connection with 1009.
func TestConformanceDeflateBomb(t *testing.T) {
	srv := startEchoServer(t)
	p := dialServer(t, srv, autobahnOffer(false, 0), nil)
	p.sendCompressed(ws.OpBinary, make([]byte, 16<<20+1), 0)
	p.finish(failWith(ws.StatusMessageTooBig))
}

func TestConformance13DeflateParams(t *testing.T) {
	type param struct {
		offers string // fuzzingclient offers (server role)
		accept string // fuzzingserver's answer to ws.Dial's offer (client role)
		noCtx  bool   // server_no_context_takeover requested by the offer
		bits   int    // server_max_window_bits requested by the offer
	}
	// DEFLATE_PARAMS of case12_x_x.py. The answers are what Autobahn's
	// accept1..accept7 make of the offer "permessage-deflate;
	// client_max_window_bits" (which Autobahn parses with
	// acceptNoContextTakeover=True).
	params := []param{
		{autobahnOffer(false, 0), "permessage-deflate", false, 0},
		{autobahnOffer(true, 0), "permessage-deflate; client_no_context_takeover", true, 0},
		{autobahnOffer(false, 8), "permessage-deflate; client_max_window_bits=8", false, 8},
		{autobahnOffer(false, 15), "permessage-deflate; client_max_window_bits=15", false, 15},
		{autobahnOffer(true, 8), "permessage-deflate; client_no_context_takeover; client_max_window_bits=8", true, 8},
		{autobahnOffer(true, 15), "permessage-deflate; client_no_context_takeover; client_max_window_bits=15", true, 15},
		{autobahnOffer(true, 8) + ", " + autobahnOffer(true, 0) + ", " + autobahnOffer(false, 0),
			"permessage-deflate; client_no_context_takeover; client_max_window_bits=8", true, 8},
	}
	srv := startEchoServer(t)
	// A subset of msgSizes for each of the 7 parameter sets.
	sizes := [][2]int{{16, 0}, {256, 0}, {4096, 0}, {65536, 0}, {131072, 4096}}
	for _, role := range roles {
		t.Run(role, func(t *testing.T) {
			for j, pr := range params {
				for i, s := range sizes {
					t.Run(fmt.Sprintf("13.%d.%d", j+1, i+1), func(t *testing.T) {
						t.Parallel()
						p := connect(t, srv, role, pr.offers, func(string) string { return pr.accept })
						if p.pmd == nil {
							t.Fatal("permessage-deflate not negotiated")
						}
						if role == "server" {
							if pr.noCtx && !p.pmd.serverNoCtx {
								t.Errorf("server_no_context_takeover requested, not granted")
							}
							if pr.bits != 0 && (p.pmd.serverBits == 0 || p.pmd.serverBits > pr.bits) {
								t.Errorf("server_max_window_bits=%d requested, got %d", pr.bits, p.pmd.serverBits)
							}
						}
						deflateExchange(false, s[0], s[1], deflateCount(s[0]))(p)
					})
				}
			}
			// Beyond Autobahn (whose offers always carry
			// client_no_context_takeover): a browser-like offer, so that
			// the client compresses with context takeover.
			t.Run("13.ctx-takeover", func(t *testing.T) {
				t.Parallel()
				p := connect(t, srv, role, "permessage-deflate; client_max_window_bits", func(string) string { return "permessage-deflate" })
				if p.pmd == nil || (role == "server" && p.pmd.clientNoCtx) {
					t.Fatalf("client context takeover not granted: %+v", p.pmd)
				}
				deflateExchange(false, 4096, 0, 8)(p)
			})
		})
	}
}

// ---- beyond Autobahn ----

// TestConformanceMasking: a server must fail the connection on an unmasked
// frame, a client on a masked one (RFC 6455 §5.1) with 1002.
func TestConformanceMasking(t *testing.T) {
	runCases(t, "", nil, []acase{{"wrong-masking", func(p *peer) {
		// Masked from a server, unmasked from a client.
		p.write(encodeFrame(!p.isClient, true, 0, ws.OpText, []byte("Hello, world!")))
		p.finish(failWith(ws.StatusProtocolError))
	}}})
}

// TestConformanceFramesWithHandshake: frames sent in the same write as the
// handshake (request or 101 response) are not lost.
func TestConformanceFramesWithHandshake(t *testing.T) {
	srv := startEchoServer(t)
	frames := func(p *peer) []byte {
		return bytes.Join([][]byte{p.encode(true, 0, ws.OpPing, []byte("early ping")), p.encode(true, 0, ws.OpText, []byte("early text"))}, nil)
	}
	t.Run("server", func(t *testing.T) {
		p := dialServer(t, srv, "", frames)
		p.finish(okClose(pongS("early ping"), msgT("early text")))
	})
	t.Run("client", func(t *testing.T) {
		p := acceptClient(t, nil, frames)
		p.finish(okClose(pongS("early ping"), msgT("early text")))
	})
}

// TestConformancePongWhileWriting: a ping that arrives while the
// implementation is blocked writing a large message must still be answered
// (RFC 6455 §5.5.2: "MUST send a Pong frame in response ... as soon as is
// practical"), at the latest when that write is done, even if the
// application writes nothing more. See conformance-bugs.md, bug 1.
func TestConformancePongWhileWriting(t *testing.T) {
	big := bytes.Repeat(binaryData(64<<10, 1), 32) // 2 MiB
	type state struct {
		writing, pinged chan struct{}
		writeDone       chan error
		once            sync.Once
	}
	newState := func() *state {
		return &state{writing: make(chan struct{}), pinged: make(chan struct{}), writeDone: make(chan error, 1)}
	}
	// onPing is the connection's OnPing option.
	onPing := func(st *state) func([]byte) {
		return func([]byte) { st.once.Do(func() { close(st.pinged) }) }
	}
	// impl: the application writes a big message from one goroutine and
	// reads from another; the socket's send buffer is small, and the peer
	// does not read yet, so the write blocks.
	impl := func(c *ws.Conn, st *state) error {
		c.NetConn().(*net.TCPConn).SetWriteBuffer(16 << 10)
		go func() {
			close(st.writing)
			st.writeDone <- c.WriteMessage(context.Background(), ws.BinaryMessage, big)
		}()
		for {
			if _, _, err := c.ReadMessageInto(context.Background(), nil); err != nil {
				<-st.writeDone
				return err
			}
		}
	}
	check := func(t *testing.T, role string, nc net.Conn, br *bufio.Reader, implErr chan error, st *state) {
		<-st.writing
		time.Sleep(quiet) // let the write fill the socket buffers
		nc.Write(encodeFrame(role == "server", true, 0, ws.OpPing, []byte("are you there?")))
		select {
		case <-st.pinged:
		case <-time.After(patience):
			t.Fatal("the ping was not read")
		}
		select {
		case err := <-st.writeDone:
			st.writeDone <- err
			t.Skipf("the write was not blocked when the ping arrived (%v)", err)
		default:
		}
		p := newPeer(t, role, nc, br, nil, implErr)
		want := []ev{msgB(big), pongS("are you there?")}
		if !p.waitFor(2*time.Second, func(events []ev, _ *closeInfo) bool { return evsEqual(events, want) }) {
			events, _, _ := p.snapshot()
			t.Errorf("FAILED: events %v, want %v: the ping read during the write was never answered", events, want)
			p.sendClose(ws.StatusNormalClosure, "")
		}
		p.finish(okClose(want...))
	}
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		st := newState()
		implErr := make(chan error, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			opts := echoServerOptions()
			opts.OnPing = onPing(st)
			c, err := ws.Accept(w, r, opts)
			if err != nil {
				return
			}
			defer c.CloseNow()
			implErr <- impl(c, st)
		}))
		defer srv.Close()
		nc, br, _ := dialServerConn(t, strings.TrimPrefix(srv.URL, "http://"), "", nil, 16<<10)
		check(t, "server", nc, br, implErr, st)
	})
	t.Run("client", func(t *testing.T) {
		t.Parallel()
		st := newState()
		nc, br, _, implErr := acceptClientConn(t, nil, nil, func(ctx context.Context, u string) error {
			opts := echoClientOptions()
			opts.OnPing = onPing(st)
			c, _, err := ws.Dial(ctx, u, opts)
			if err != nil {
				return err
			}
			defer c.CloseNow()
			return impl(c, st)
		}, 16<<10)
		check(t, "client", nc, br, implErr, st)
	})
}

// runIsolated runs fn in a child process (this test binary, running only
// the calling test), so that an implementation bug that spins forever
// cannot slow down the other tests; the child is killed after a timeout.
func runIsolated(t *testing.T, fn func(t *testing.T)) {
	const env = "OVBUS_CONFORMANCE_CHILD"
	if os.Getenv(env) == t.Name() {
		fn(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("child process hung:\n%s", out)
	}
	if err != nil {
		t.Fatalf("child process failed (%v):\n%s", err, out)
	}
}

// isolatedRoles runs scenario for both roles against a connection whose
// application side is impl (called with the accepted or dialed Conn).
func isolatedRoles(t *testing.T, impl func(c *ws.Conn) error, scenario func(t *testing.T, raw *peer, implErr chan error)) {
	t.Run("server", func(t *testing.T) {
		implErr := make(chan error, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := ws.Accept(w, r, echoServerOptions())
			if err != nil {
				return
			}
			defer c.CloseNow()
			implErr <- impl(c)
		}))
		defer srv.Close()
		nc, br, _ := dialServerConn(t, strings.TrimPrefix(srv.URL, "http://"), "", nil, 0)
		scenario(t, &peer{t: t, role: "server", nc: nc, br: br, isClient: true, notify: make(chan struct{}, 1)}, implErr)
	})
	t.Run("client", func(t *testing.T) {
		nc, br, _, implErr := acceptClientConn(t, nil, nil, func(ctx context.Context, u string) error {
			c, _, err := ws.Dial(ctx, u, echoClientOptions())
			if err != nil {
				return err
			}
			defer c.CloseNow()
			return impl(c)
		}, 0)
		scenario(t, &peer{t: t, role: "client", nc: nc, br: br, notify: make(chan struct{}, 1)}, implErr)
	})
}

func waitImpl(t *testing.T, implErr chan error, what string) error {
	t.Helper()
	select {
	case err := <-implErr:
		return err
	case <-time.After(3 * time.Second):
		t.Fatalf("FAILED: %s did not return within 3 s (hung)", what)
	}
	return nil
}

// TestConformanceCloseWhilePinged: the application closes (Close sends a
// close frame and reads until the peer's close); the peer sends a ping
// before its close echo. Close must return. See conformance-bugs.md, bug 2.
func TestConformanceCloseWhilePinged(t *testing.T) {
	runIsolated(t, func(t *testing.T) {
		isolatedRoles(t, func(c *ws.Conn) error {
			return c.Close(ws.StatusNormalClosure, "bye")
		}, func(t *testing.T, raw *peer, implErr chan error) {
			raw.nc.SetDeadline(time.Now().Add(patience))
			f, err := raw.readFrame()
			if err != nil || f.op != ws.OpClose || !bytes.Equal(f.payload, closePayload(1000, "bye")) {
				t.Fatalf("want close 1000 \"bye\", got %+v, %v", f, err)
			}
			raw.write(append(raw.encode(true, 0, ws.OpPing, []byte("still there?")), raw.encode(true, 0, ws.OpClose, closePayload(1000, ""))...))
			if err := waitImpl(t, implErr, "Close"); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	})
}

// TestConformancePingAfterWriteError: after a write failed (here: write
// deadline passed), the stream is unusable for writing; a ping read later
// cannot be answered, but reading must go on. See conformance-bugs.md, bug 2.
func TestConformancePingAfterWriteError(t *testing.T) {
	runIsolated(t, func(t *testing.T) {
		isolatedRoles(t, func(c *ws.Conn) error {
			c.SetWriteDeadline(time.Now().Add(-time.Second))
			if err := c.WriteMessage(context.Background(), ws.TextMessage, []byte("too late")); err == nil {
				return fmt.Errorf("write after the deadline succeeded")
			}
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			_, msg, err := c.ReadMessageInto(ctx, nil)
			if err != nil {
				return err
			}
			if string(msg) != "after" {
				return fmt.Errorf("read %q, want \"after\"", msg)
			}
			return nil
		}, func(t *testing.T, raw *peer, implErr chan error) {
			time.Sleep(quiet) // let the write fail first
			raw.write(append(raw.encode(true, 0, ws.OpPing, []byte("ping")), raw.encode(true, 0, ws.OpText, []byte("after"))...))
			if err := waitImpl(t, implErr, "ReadMessageInto"); err != nil {
				t.Errorf("%v", err)
			}
		})
	})
}
