package bus

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var carrierCases = []struct {
	in     string
	reject bool
}{
	{`{"type":"a","context":{"session":"x"}}`, true},
	{`{"type":"a","context":{"session":1}}`, true},
	{`{"type":"a","context":{"session":[]}}`, true},
	{`{"type":"a","context":{"session":true}}`, true},
	{`{"type":"a","context":{"session":false}}`, true},
	{` { "context" : { "session" : "x" } } `, true},
	{`{"type":"a","context":{"sess\u0069on":"x"}}`, true},
	{`{"type":"a","context":{"session":{"session_id":"x"}}}`, false},
	{`{"type":"a","context":{"session":null}}`, false},
	{`{"type":"a","context":{"session":"x","session":{}}}`, false},
	{`{"type":"a","context":{"session":{}},"context":{"session":2}}`, true},
	{`{"type":"a","context":{"session":2},"context":{}}`, false},
	{`{"type":"a","context":"session"}`, false},
	{`{"type":"a","data":{"session":"x"}}`, false},
	{`{"type":"a","context":{"x":{"session":"x"}}}`, false},
	{`{"type":"a","context":{"session":"x"}`, false}, // not JSON
	{`{"type":"a","context":{"session":"x"}} trailing`, false},
	{`["session"]`, false},
	{`"session"`, false},
	{`{"type":"a","context":{"k":"\"session\":1"}}`, false},
	{`{"type":"a","data":{"session":"x"},"context":{"session":{}}}`, false},
	{`{"type":"a","data":{"session":{}},"context":{"session":"x"}}`, true},
	{`{"type":"a","context":{"session" :  nul}}`, false}, // not JSON
	{`{"type":"a","context":{"session":	nullx}}`, false},
	{`{"type":"a","context":{"\"session":1}}`, false},
	{`{"type":"a","context":{"session"`, false},
	{`{"type":"a","context":{"session":`, false},
	{`{"type":"a","data":"\\","context":{"session":"x"}}`, true},
	{`{"type":"a","data":"session","context":{"session":"x"}}`, true},
}

func TestCarrierRule(t *testing.T) {
	for _, tc := range carrierCases {
		b := []byte(tc.in)
		_, got := checkCarrier(b)
		if got != tc.reject {
			t.Errorf("checkCarrier(%s) = %v, want %v", tc.in, got, tc.reject)
		}
		if tc.reject && !carrierSuspect(b) {
			t.Errorf("the fast path misses %s", tc.in)
		}
		if carrierSuspect(b) && !(oldMayCarrySession(b) && sessionSuspect(b)) {
			t.Errorf("carrierSuspect(%s): the former fast path did not suspect it", tc.in)
		}
	}
}

// FuzzCarrierRule checks the fast path against encoding/json: whenever the
// rule rejects a frame, the cheap tests must have sent it to checkCarrier.
// They may send it there less often than the former ones (false is
// certain), never more often. The scanner jumps from quote to quote as the
// reference scanner (refScanString) walked byte by byte.
func FuzzCarrierRule(f *testing.F) {
	for _, tc := range carrierCases {
		f.Add([]byte(tc.in))
	}
	for _, s := range scanStringCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		suspect := carrierSuspect(b)
		if _, bad := checkCarrier(b); bad && !suspect {
			t.Fatalf("fast path misses a malformed carrier: %q", b)
		}
		if suspect && !(oldMayCarrySession(b) && sessionSuspect(b)) {
			t.Fatalf("fast path suspects what the former one did not: %q", b)
		}
		for i := range b {
			if b[i] != '"' {
				continue
			}
			e1, x1, ok1 := scanString(b, i)
			e2, x2, ok2 := refScanString(b, i)
			if e1 != e2 || x1 != x2 || ok1 != ok2 {
				t.Fatalf("scanString(%q, %d) = %d %v %v, reference %d %v %v", b, i, e1, x1, ok1, e2, x2, ok2)
			}
		}
		messageType(b) // must not panic
	})
}

// oldMayCarrySession is the former first test of the carrier rule.
func oldMayCarrySession(b []byte) bool {
	return bytes.Contains(b, sessionKey) || hasEscapedASCII(b)
}

// refScanString is the reference for scanString: byte by byte, a
// backslash taking the byte after it.
func refScanString(b []byte, i int) (end int, escaped, ok bool) {
	i++
	for i < len(b) {
		switch b[i] {
		case '"':
			return i + 1, escaped, true
		case '\\':
			escaped = true
			i += 2
			continue
		}
		i++
	}
	return 0, false, false
}

var scanStringCases = []string{
	`""`, `"a"`, `"\""`, `"\\"`, `"\\\""`, `"\\\\"x"`, `"ab\`, `"ab\"`, `"\x\\"`,
	`"` + strings.Repeat("x", 300) + `\"` + strings.Repeat("\\", 40) + `"`, `"unterminated`,
}

func TestScanString(t *testing.T) {
	for _, c := range scanStringCases {
		b := []byte(c)
		e1, x1, ok1 := scanString(b, 0)
		e2, x2, ok2 := refScanString(b, 0)
		if e1 != e2 || x1 != x2 || ok1 != ok2 {
			t.Errorf("scanString(%s) = %d %v %v, reference %d %v %v", c, e1, x1, ok1, e2, x2, ok2)
		}
	}
}

func TestMessageType(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"speak","data":{}}`:           "speak",
		` {"data":{"type":"no"},"type":"yes"}`: "yes",
		`{"type":"a\"b"}`:                      `a"b`,
		`{"type":1}`:                           "",
		`{"typ\u0065":"esc"}`:                  "esc",
		`not json`:                             "",
		`{"type":"x","type":"y"}`:              "y",
	} {
		if got := messageType([]byte(in)); got != want {
			t.Errorf("messageType(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestRejectedMessage(t *testing.T) {
	r, _ := checkCarrier([]byte(`{"type": "a.b", "context": {"session": "x", "utterance_id": {"k": [1, 2]}}}`))
	got := string(rejectedMessage(r))
	want := `{"type":"ovos.session.rejected","data":{"msg_type":"a.b","reason":"malformed_carrier"},"context":{"utterance_id":{"k":[1,2]}}}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Fatal("not JSON")
	}
}

func TestPythonRepr(t *testing.T) {
	_, line, ok := filterLine([]byte(`{"type":"t","context":{"source":["a",1,2.5,true,null,{"x":"it's"}],"destination":"d","session":{"b":1,"a":"say \"hi\"\n"}}}`))
	want := "t source: ['a', 1, 2.5, True, None, {'x': \"it's\"}] destination: d\nSESSION: {'b': 1, 'a': 'say \"hi\"\\n'}"
	if !ok || line != want {
		t.Fatalf("got  %q\nwant %q", line, want)
	}
}

// BenchmarkCarrierSuspect: the carrier rule's test on every frame, against
// the former one (a search for "session", then a scan of the object's
// members) and the colon-to-colon search that came between
// (carrierSuspectByColons), on the benchmark's frame (no session), an OVOS
// frame (its session an object) and one with a long utterance.
func BenchmarkCarrierSuspect(b *testing.B) {
	for _, tc := range []struct{ name, msg string }{
		{"bench", `{"type":"ovbus.bench","data":{"seq":12345,"t":1700000000123,"pad":"` + strings.Repeat("x", 180) + `"},"context":{}}`},
		{"session", `{"type":"recognizer_loop:utterance","data":{"utterances":["what is the weather like today"],"lang":"en-US"},"context":{"source":"audio","destination":["skills"],"session":{"session_id":"default","lang":"en-US","active_skills":[["weather",1700000000.1]]}}}`},
		{"long", `{"type":"speak","data":{"utterance":"` + strings.Repeat("It is sunny, 21 degrees: a fine day. ", 40) + `"},"context":{"session":{"session_id":"default"}}}`},
	} {
		msg := []byte(tc.msg)
		b.Run(tc.name+"/new", func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if carrierSuspect(msg) {
					b.Fatal("suspect")
				}
			}
			reportCPU(b, cpu)
		})
		b.Run(tc.name+"/colons", func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if carrierSuspectByColons(msg) {
					b.Fatal("suspect")
				}
			}
			reportCPU(b, cpu)
		})
		b.Run(tc.name+"/former", func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if oldMayCarrySession(msg) && sessionSuspect(msg) {
					b.Fatal("suspect")
				}
			}
			reportCPU(b, cpu)
		})
	}
}
