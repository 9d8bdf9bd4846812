package bus

import (
	"encoding/json"
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
}

func TestCarrierRule(t *testing.T) {
	for _, tc := range carrierCases {
		b := []byte(tc.in)
		_, got := checkCarrier(b)
		if got != tc.reject {
			t.Errorf("checkCarrier(%s) = %v, want %v", tc.in, got, tc.reject)
		}
		if tc.reject && !(mayCarrySession(b) && sessionSuspect(b)) {
			t.Errorf("the fast path misses %s", tc.in)
		}
	}
}

// FuzzCarrierRule checks the fast path against encoding/json: whenever the
// rule rejects a frame, the cheap tests must have sent it to checkCarrier.
func FuzzCarrierRule(f *testing.F) {
	for _, tc := range carrierCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, bad := checkCarrier(b); bad && !(mayCarrySession(b) && sessionSuspect(b)) {
			t.Fatalf("fast path misses a malformed carrier: %q", b)
		}
		messageType(b) // must not panic
	})
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
