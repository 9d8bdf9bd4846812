package config

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestStripCommentsKeepsOffsets(t *testing.T) {
	in := "// c\n{\r\n  # x\r\n\t//y\n \"a\": 1 // not a comment\n}"
	out := stripComments([]byte(in))
	if len(out) != len(in) || bytes.Count(out, []byte("\n")) != strings.Count(in, "\n") {
		t.Fatalf("length or lines changed: %q", out)
	}
	want := "    \n{\r\n     \r\n    \n \"a\": 1 // not a comment\n}"
	if string(out) != want {
		t.Errorf("got  %q\nwant %q", out, want)
	}
}

func TestParseJSONWithBOM(t *testing.T) {
	tr, err := parse("f", []byte("\xef\xbb\xbf{\"a\": 1}"), formatJSON)
	if err != nil || tr.data["a"] != int64(1) {
		t.Errorf("BOM: %v %v", tr, err)
	}
}

func TestParseJSONPositions(t *testing.T) {
	src := "// comment\n{\n  \"websocket\": {\n    \"port\": 1,\n    \"list\": [1, {\"k\": 2}]\n  }\n}\n"
	tr, err := parse("f", []byte(src), formatJSON)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]pos{
		"websocket":                   {3, 3},
		join("websocket", "port"):     {4, 5},
		join("websocket", "list"):     {5, 5},
		"websocket\x1flist\x1f1\x1fk": {5, 18},
	} {
		if got := tr.pos[path]; got != want {
			t.Errorf("pos[%s] = %v, want %v", dotted(path), got, want)
		}
	}
	ws := tr.data["websocket"].(map[string]any)
	if ws["port"] != int64(1) {
		t.Errorf("port = %#v", ws["port"])
	}
}

func TestParseYAMLPositionsAndTypes(t *testing.T) {
	src := "websocket:\n  port: 8181\n  size: 2.5\n  ssl: true\n  host: null\n  list: [a, 1]\n"
	tr, err := parse("f.yaml", []byte(src), formatYAML)
	if err != nil {
		t.Fatal(err)
	}
	ws := tr.data["websocket"].(map[string]any)
	want := map[string]any{"port": int64(8181), "size": 2.5, "ssl": true, "host": nil, "list": []any{"a", int64(1)}}
	if !reflect.DeepEqual(ws, want) {
		t.Errorf("got %#v", ws)
	}
	if p := tr.pos[join("websocket", "ssl")]; p != (pos{4, 3}) {
		t.Errorf("pos = %v", p)
	}
	for _, bad := range []string{"- a\n- b\n", "just a string", "a: *nope\n"} {
		if _, err := parse("f.yaml", []byte(bad), formatYAML); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSniffFormat(t *testing.T) {
	for _, tt := range []struct {
		name, content string
		want          format
	}{
		{"a.yml", "{}", formatYAML},
		{"a.YAML", "{}", formatYAML},
		{"a.json", "x: 1", formatJSON},
		{"a.conf", "x: 1", formatJSON},
		{"a", "// c\n  {\"x\": 1}", formatJSON},
		{"a", "# c\nwebsocket:\n  port: 1", formatYAML},
		{"a.txt", "", formatJSON},
	} {
		if got := sniffFormat(tt.name, []byte(tt.content)); got != tt.want {
			t.Errorf("sniffFormat(%s, %q) = %v", tt.name, tt.content, got)
		}
	}
}

// normalize turns encoding/json's output (with UseNumber) into parse's.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// FuzzParseJSON checks the position-tracking parser against encoding/json.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a": 1}`, "// c\n{\"a\": [1, 2.5, \"x\", null, true]}", `{"a": {"b": {"c": []}}}`,
		`{"a": 1,}`, `[1]`, `{"a": 1} x`, "", "# only\n", `{"a": 1e400}`, `{"a": "\u00e9\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := parse("f", data, formatJSON)
		stripped := stripComments(data)
		trimmed := bytes.TrimSpace(stripped)
		valid := json.Valid(stripped) && len(trimmed) > 0 && trimmed[0] == '{'
		if len(trimmed) == 0 {
			if err != nil {
				t.Fatalf("empty input rejected: %v", err)
			}
			return
		}
		if !valid {
			if err == nil {
				t.Fatalf("invalid input %q accepted", data)
			}
			return
		}
		if err != nil {
			if strings.Contains(err.Error(), "out of range") {
				return
			}
			t.Fatalf("valid input %q rejected: %v", data, err)
		}
		dec := json.NewDecoder(bytes.NewReader(stripped))
		dec.UseNumber()
		var want map[string]any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		got := normalize(want)
		if !reflect.DeepEqual(tr.data, got) && !hasNaN(got) {
			t.Fatalf("parse %q\n got %#v\nwant %#v", data, tr.data, got)
		}
	})
}

func hasNaN(v any) bool {
	f, ok := v.(float64)
	return ok && math.IsNaN(f)
}

// FuzzParseYAML checks that no input panics or loops.
func FuzzParseYAML(f *testing.F) {
	for _, s := range []string{"websocket:\n  port: 1\n", "a: &x {b: *x}\n", "<<: {a: 1}\n", "- 1\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		parse("f.yaml", data, formatYAML)
	})
}
