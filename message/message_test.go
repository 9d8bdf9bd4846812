package message_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/message"
)

func TestMarshalKeyOrderAndCompact(t *testing.T) {
	for _, tc := range []struct {
		m    message.Message
		want string
	}{
		{message.Message{Type: "speak"}, `{"type":"speak","data":{},"context":{}}`},
		{message.Message{Type: "speak", Data: map[string]any{}, Context: map[string]any{}}, `{"type":"speak","data":{},"context":{}}`},
		{
			message.Message{Type: "a<b>&c", Data: map[string]any{"z": 1, "a": []any{"x", 2.5, nil}}, Context: map[string]any{"session": map[string]any{"session_id": "default"}}},
			`{"type":"a<b>&c","data":{"a":["x",2.5,null],"z":1},"context":{"session":{"session_id":"default"}}}`,
		},
		{message.New("u", map[string]any{"s": "é\n\"q\""}), `{"type":"u","data":{"s":"é\n\"q\""},"context":{}}`},
	} {
		b, err := tc.m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("MarshalJSON = %s, want %s", b, tc.want)
		}
		// json.Marshal escapes <, > and & itself; the result is the same JSON value.
		b, err = json.Marshal(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		json.Unmarshal(b, &got)
		json.Unmarshal([]byte(tc.want), &want)
		if !reflect.DeepEqual(got, want) || !strings.HasPrefix(string(b), `{"type":`) {
			t.Errorf("json.Marshal = %s, want %s", b, tc.want)
		}
		if tc.m.String() != tc.want {
			t.Errorf("String = %s, want %s", tc.m.String(), tc.want)
		}
	}
	if _, err := json.Marshal(message.Message{Type: "x", Data: map[string]any{"f": func() {}}}); err == nil {
		t.Error("unencodable data: no error")
	}
}

func TestReplyForwardResponse(t *testing.T) {
	orig := message.Message{
		Type: "skill.query",
		Data: map[string]any{"q": 1.0},
		Context: map[string]any{
			"source": "audio", "destination": []any{"skills"},
			"session": map[string]any{"session_id": "abc"},
		},
	}
	r := orig.Reply("skill.answer", map[string]any{"a": 2.0})
	if r.Type != "skill.answer" || r.Data["a"] != 2.0 {
		t.Fatalf("reply = %v", r)
	}
	if r.Context["source"].([]any)[0] != "skills" || r.Context["destination"] != "audio" {
		t.Errorf("reply context not swapped: %v", r.Context)
	}
	if r.SessionID() != "abc" {
		t.Errorf("reply session = %q", r.SessionID())
	}
	// The original is untouched (deep copy).
	r.Context["session"].(map[string]any)["session_id"] = "changed"
	if orig.SessionID() != "abc" || orig.Context["source"] != "audio" {
		t.Errorf("original changed: %v", orig.Context)
	}

	// data.destination replaces the context's destination before the swap (as in Python).
	r2 := orig.Reply("x", map[string]any{"destination": "gui"})
	if r2.Context["source"] != "gui" || r2.Context["destination"] != "audio" {
		t.Errorf("reply with data.destination: %v", r2.Context)
	}
	// Only source: nothing to swap.
	r3 := message.Message{Type: "t", Context: map[string]any{"source": "a"}}.Reply("u", nil)
	if r3.Context["source"] != "a" || r3.Context["destination"] != nil {
		t.Errorf("reply without destination: %v", r3.Context)
	}

	f := orig.Forward("skill.next", nil)
	if f.Type != "skill.next" || !reflect.DeepEqual(f.Context, orig.Context) {
		t.Errorf("forward = %v", f)
	}
	if s := f.String(); s != `{"type":"skill.next","data":{},"context":{"destination":["skills"],"session":{"session_id":"abc"},"source":"audio"}}` {
		t.Errorf("forward JSON = %s", s)
	}

	resp := orig.Response(map[string]any{"ok": true})
	if resp.Type != "skill.query.response" || resp.Context["destination"] != "audio" {
		t.Errorf("response = %v", resp)
	}
	if c := orig.Clone(); !reflect.DeepEqual(c, orig) {
		t.Errorf("clone = %v", c)
	}
}

func TestParse(t *testing.T) {
	m, err := message.Parse([]byte(`{"context": {"a": 1}, "type": "x.y", "data": {"k": [1, "2"]}, "extra": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	want := message.Message{Type: "x.y", Data: map[string]any{"k": []any{1.0, "2"}}, Context: map[string]any{"a": 1.0}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("Parse = %#v", m)
	}
	m, err = message.Parse([]byte(`{"type":"connected","data":null}`))
	if err != nil || m.Type != "connected" || m.Data != nil || m.Context != nil {
		t.Errorf("Parse null data = %#v, %v", m, err)
	}

	for _, tc := range []struct {
		in   string
		kind error
	}{
		{`hello`, message.ErrNotJSON},
		{``, message.ErrNotJSON},
		{`{"type":"x"`, message.ErrNotJSON},
		{`{"type":"x"} trailing`, message.ErrNotJSON},
		{`[1,2]`, message.ErrNotObject},
		{`"str"`, message.ErrNotObject},
		{`null`, message.ErrNotObject},
		{`{}`, message.ErrNoType},
		{`{"data":{}}`, message.ErrNoType},
		{`{"type":null}`, message.ErrNoType},
		{`{"type":5}`, message.ErrNoType},
		{`{"msg_type":"x"}`, message.ErrNoType},
		{`{"ciphertext":"00","tag":"11","nonce":"22"}`, message.ErrEncrypted},
		{`{"ciphertext":"00","nonce":"22"}`, message.ErrEncrypted},
		{`{"type":"x","data":[1]}`, message.ErrBadField},
		{`{"type":"x","context":"s"}`, message.ErrBadField},
	} {
		_, err := message.Parse([]byte(tc.in))
		if !errors.Is(err, message.ErrNotMessage) || !errors.Is(err, tc.kind) {
			t.Errorf("Parse(%q) = %v, want %v", tc.in, err, tc.kind)
		}
	}

	var u message.Message
	if err := json.Unmarshal([]byte(`{"type":"t","data":{"a":"b"}}`), &u); err != nil || u.Data["a"] != "b" {
		t.Errorf("Unmarshal = %v, %v", u, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`,
		`{"type":"x","data":{"a":[1,{"b":null}]},"context":{}}`,
		`{"ciphertext":"aa","tag":"bb","nonce":"cc"}`,
		`not json`, `[]`, `{"type":1}`, `{"type":"x","data":"y"}`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := message.Parse(b)
		if err != nil {
			if !errors.Is(err, message.ErrNotMessage) {
				t.Fatalf("error does not wrap ErrNotMessage: %v", err)
			}
			return
		}
		out, err := m.MarshalJSON()
		if err != nil {
			t.Fatalf("re-encoding %q: %v", b, err)
		}
		m2, err := message.Parse(out)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", out, err)
		}
		out2, _ := m2.MarshalJSON()
		if string(out) != string(out2) {
			t.Fatalf("not stable: %s vs %s", out, out2)
		}
	})
}
