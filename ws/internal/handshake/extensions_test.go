package handshake

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func ext(name string, params ...Param) Extension { return Extension{Name: name, Params: params} }
func flag(name string) Param                     { return Param{Name: name} }
func val(name, v string) Param                   { return Param{Name: name, Value: v, HasValue: true} }

func TestParseExtensions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Extension
	}{
		{"", nil},
		{"   ", nil},
		{",", nil},
		{"permessage-deflate", []Extension{ext("permessage-deflate")}},
		{"permessage-deflate; client_max_window_bits", []Extension{ext("permessage-deflate", flag("client_max_window_bits"))}},
		{"permessage-deflate;client_max_window_bits=10;server_no_context_takeover",
			[]Extension{ext("permessage-deflate", val("client_max_window_bits", "10"), flag("server_no_context_takeover"))}},
		{`permessage-deflate; server_max_window_bits="10"`, []Extension{ext("permessage-deflate", val("server_max_window_bits", "10"))}},
		{`x; a="b\c"`, []Extension{ext("x", val("a", "bc"))}}, // quoted-pair
		{"x ; a = 1 , y", []Extension{ext("x", val("a", "1")), ext("y")}},
		{"\tx\t;\ta\t", []Extension{ext("x", flag("a"))}},
		{"a, b,, c ,", []Extension{ext("a"), ext("b"), ext("c")}},
		{"permessage-deflate; client_max_window_bits, permessage-deflate",
			[]Extension{ext("permessage-deflate", flag("client_max_window_bits")), ext("permessage-deflate")}},
		{"foo; a; a", []Extension{ext("foo", flag("a"), flag("a"))}}, // duplicates are the extension's business
	} {
		got, err := ParseExtensionList(tc.in)
		if err != nil {
			t.Errorf("ParseExtensionList(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseExtensionList(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

func TestParseExtensionsErrors(t *testing.T) {
	for _, in := range []string{
		";",
		"x;",
		"x; ;a",
		"x; =1",
		"x; a=",
		"x; a= ,y",
		"x y",
		"x; a b",
		"x; a=1 2",
		"x; a=\"1",
		"x; a=\"1\\",
		"x; a=\"\"",     // empty quoted value is not a token
		"x; a=\"1 2\"",  // quoted value with space is not a token
		"x; a=\"a,b\"",  // nor with a separator
		"x; a=\"\x01\"", // control character
		"x; a=\"1\"2",
		"x=1",
		"x/y",
		"\"x\"",
		"x;a=b=c",
		"é",
	} {
		got, err := ParseExtensionList(in)
		if err == nil {
			t.Errorf("ParseExtensionList(%q) = %#v, want error", in, got)
			continue
		}
		if !errors.Is(err, ErrHandshake) {
			t.Errorf("ParseExtensionList(%q) error %v does not wrap ErrHandshake", in, err)
		}
	}
}

func TestParseExtensionsHeaderLines(t *testing.T) {
	h := http.Header{}
	h.Add("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
	h.Add("Sec-WebSocket-Extensions", "x-foo, permessage-deflate")
	got, err := ParseExtensions(h)
	if err != nil {
		t.Fatal(err)
	}
	want := []Extension{ext("permessage-deflate", flag("client_max_window_bits")), ext("x-foo"), ext("permessage-deflate")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}

	h.Add("Sec-WebSocket-Extensions", "bad;")
	if _, err := ParseExtensions(h); err == nil {
		t.Fatal("a malformed line must fail the whole header")
	}
	if got, err := ParseExtensions(http.Header{}); err != nil || got != nil {
		t.Fatalf("no header: %v, %v", got, err)
	}
}

func TestFormatExtensions(t *testing.T) {
	exts := []Extension{
		ext("permessage-deflate", flag("server_no_context_takeover"), val("client_max_window_bits", "10")),
		ext("x", val("q", "a b\"c")),
	}
	s := FormatExtensions(exts)
	const want = `permessage-deflate; server_no_context_takeover; client_max_window_bits=10, x; q="a b\"c"`
	if s != want {
		t.Fatalf("FormatExtensions = %q, want %q", s, want)
	}
	// The first element parses back; the second's value is not a token,
	// which RFC 6455 §9.1 forbids, so the whole list is refused.
	if _, err := ParseExtensionList(s); err == nil {
		t.Fatal("a quoted non-token value must not parse")
	}
	got, err := ParseExtensionList(exts[0].String())
	if err != nil || !reflect.DeepEqual(got, exts[:1]) {
		t.Fatalf("round trip: %#v, %v", got, err)
	}
}
