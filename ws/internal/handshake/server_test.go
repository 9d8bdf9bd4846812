package handshake

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

const testKey = "dGhlIHNhbXBsZSBub25jZQ=="

// baseRequest is a valid client handshake (RFC 6455 §1.2, with extras).
const baseRequest = "GET /chat?x=1 HTTP/1.1\r\n" +
	"Host: server.example.com\r\n" +
	"Upgrade: websocket\r\n" +
	"Connection: Upgrade\r\n" +
	"Sec-WebSocket-Key: " + testKey + "\r\n" +
	"Origin: http://example.com\r\n" +
	"Sec-WebSocket-Protocol: chat, superchat\r\n" +
	"Sec-WebSocket-Version: 13\r\n" +
	"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n" +
	"\r\n"

func parseRequest(t *testing.T, raw string) *http.Request {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("ReadRequest: %v", err)
	}
	return r
}

func TestCheckRequestValid(t *testing.T) {
	sr, herr := CheckRequest(parseRequest(t, baseRequest))
	if herr != nil {
		t.Fatal(herr)
	}
	if sr.Path != "/chat" || sr.Host != "server.example.com" || sr.Origin != "http://example.com" || sr.Key != testKey {
		t.Fatalf("bad request fields: %+v", sr)
	}
	if !reflect.DeepEqual(sr.Protocols, []string{"chat", "superchat"}) {
		t.Fatalf("Protocols = %q", sr.Protocols)
	}
	want := []Extension{ext("permessage-deflate", flag("client_max_window_bits"))}
	if !reflect.DeepEqual(sr.Extensions, want) {
		t.Fatalf("Extensions = %#v", sr.Extensions)
	}
	if sr.Header.Get("Sec-WebSocket-Version") != "13" {
		t.Fatal("Header not kept")
	}
}

func TestCheckRequest(t *testing.T) {
	type edit func(r *http.Request)
	set := func(k, v string) edit { return func(r *http.Request) { r.Header.Set(k, v) } }
	del := func(k string) edit { return func(r *http.Request) { r.Header.Del(k) } }
	add := func(k, v string) edit { return func(r *http.Request) { r.Header.Add(k, v) } }
	for _, tc := range []struct {
		name   string
		edit   edit
		status int    // 0: accepted
		msg    string // substring of the message
		header http.Header
	}{
		{"valid", func(*http.Request) {}, 0, "", nil},
		{"upgrade case and list", set("Upgrade", "h2c, WebSocket"), 0, "", nil},
		{"connection list", set("Connection", "keep-alive, UPGRADE"), 0, "", nil},
		{"connection two lines", func(r *http.Request) {
			r.Header.Set("Connection", "keep-alive")
			r.Header.Add("Connection", "Upgrade")
		}, 0, "", nil},
		{"no protocols", del("Sec-WebSocket-Protocol"), 0, "", nil},
		{"no extensions", del("Sec-WebSocket-Extensions"), 0, "", nil},
		{"key with spaces", set("Sec-WebSocket-Key", " "+testKey+" "), 0, "", nil},

		{"POST", func(r *http.Request) { r.Method = "POST" }, 405, "method GET", http.Header{"Allow": {"GET"}}},
		{"HTTP/1.0", func(r *http.Request) { r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.0", 1, 0 }, 400, "HTTP/1.1", nil},
		{"no upgrade", del("Upgrade"), 400, "Upgrade: websocket", nil},
		{"upgrade h2c", set("Upgrade", "h2c"), 400, "Upgrade: websocket", nil},
		{"upgrade substring", set("Upgrade", "websocketx"), 400, "Upgrade: websocket", nil},
		{"no connection", del("Connection"), 400, "Connection", nil},
		{"connection keep-alive", set("Connection", "keep-alive"), 400, "Connection", nil},
		{"no version", del("Sec-WebSocket-Version"), 426, "Sec-WebSocket-Version", http.Header{"Sec-Websocket-Version": {"13"}}},
		{"version 8", set("Sec-WebSocket-Version", "8"), 426, "only 13", http.Header{"Sec-Websocket-Version": {"13"}}},
		{"version list", set("Sec-WebSocket-Version", "13, 8"), 426, "only 13", http.Header{"Sec-Websocket-Version": {"13"}}},
		{"version twice", add("Sec-WebSocket-Version", "13"), 426, "only 13", http.Header{"Sec-Websocket-Version": {"13"}}},
		{"no key", del("Sec-WebSocket-Key"), 400, "Sec-WebSocket-Key", nil},
		{"two keys", add("Sec-WebSocket-Key", testKey), 400, "exactly one", nil},
		{"key not base64", set("Sec-WebSocket-Key", "not base64 at all!!!!!!!"), 400, "16 bytes", nil},
		{"key 15 bytes", set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25j"), 400, "16 bytes", nil},
		{"key 17 bytes", set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZXg="), 400, "16 bytes", nil},
		{"bad protocol", set("Sec-WebSocket-Protocol", "chat/1.0"), 400, "Sec-WebSocket-Protocol", nil},
		{"bad extensions", set("Sec-WebSocket-Extensions", "permessage-deflate;"), 400, "Sec-WebSocket-Extensions", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parseRequest(t, baseRequest)
			tc.edit(r)
			_, herr := CheckRequest(r)
			if tc.status == 0 {
				if herr != nil {
					t.Fatalf("refused: %v", herr)
				}
				return
			}
			if herr == nil {
				t.Fatalf("accepted, want %d", tc.status)
			}
			if herr.Status != tc.status || !strings.Contains(herr.Message, tc.msg) {
				t.Fatalf("got %d %q, want %d containing %q", herr.Status, herr.Message, tc.status, tc.msg)
			}
			if tc.header != nil && !reflect.DeepEqual(herr.Header, tc.header) {
				t.Fatalf("Header = %v, want %v", herr.Header, tc.header)
			}
			if !errors.Is(herr, ErrHandshake) {
				t.Fatal("*Error does not match ErrHandshake")
			}
		})
	}
}

func TestSelectSubprotocol(t *testing.T) {
	for _, tc := range []struct {
		server, client []string
		want           string
	}{
		{nil, nil, ""},
		{[]string{"a"}, nil, ""},
		{nil, []string{"a"}, ""},
		{[]string{"a", "b"}, []string{"b", "a"}, "a"}, // server's preference
		{[]string{"x", "b"}, []string{"a", "b"}, "b"},
		{[]string{"A"}, []string{"a"}, ""}, // exact comparison
	} {
		if got := SelectSubprotocol(tc.server, tc.client); got != tc.want {
			t.Errorf("SelectSubprotocol(%q, %q) = %q, want %q", tc.server, tc.client, got, tc.want)
		}
	}
}

func TestReadServerRequest(t *testing.T) {
	const frame = "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58" // masked "Hello"
	for _, tc := range []struct {
		name string
		r    func(string) io.Reader
		size int
	}{
		{"plain", func(s string) io.Reader { return strings.NewReader(s) }, 4096},
		{"one byte reads", func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) }, 4096},
		{"tiny buffer", func(s string) io.Reader { return strings.NewReader(s) }, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(tc.r(baseRequest+frame), tc.size)
			r, err := ReadServerRequest(br)
			if err != nil {
				t.Fatal(err)
			}
			if _, herr := CheckRequest(r); herr != nil {
				t.Fatal(herr)
			}
			if r.Body != http.NoBody {
				t.Fatal("Body is not http.NoBody")
			}
			rest, _ := io.ReadAll(br)
			if string(rest) != frame {
				t.Fatalf("bytes after the request = %q, want the frame %q", rest, frame)
			}
		})
	}
}

func TestReadServerRequestErrors(t *testing.T) {
	big := "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", DefaultMaxRequestHeaderBytes) + "\r\n\r\n"
	for _, tc := range []struct {
		name   string
		in     string
		status int   // for *Error
		err    error // otherwise
	}{
		{"empty", "", 0, io.EOF},
		{"cut", "GET / HTTP/1.1\r\nHost: x\r\n", 0, io.ErrUnexpectedEOF},
		{"cut in line", "GET / HTTP/1.1\r\nHo", 0, io.ErrUnexpectedEOF},
		{"too large", big, 431, nil},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, nil},
		{"bad header line", "GET / HTTP/1.1\r\nno colon\r\n\r\n", 400, nil},
		{"body", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 400, nil},
		{"chunked", "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, nil},
		{"leading empty line", "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadServerRequest(bufio.NewReader(strings.NewReader(tc.in)))
			if tc.status != 0 {
				var he *Error
				if !errors.As(err, &he) || he.Status != tc.status {
					t.Fatalf("got %v, want *Error %d", err, tc.status)
				}
				return
			}
			if err != tc.err {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
		})
	}
	// A custom limit.
	if _, err := ReadServerRequestLimit(bufio.NewReader(strings.NewReader(baseRequest)), 64); err == nil {
		t.Fatal("64-byte limit not enforced")
	}
	if _, err := ReadServerRequestLimit(bufio.NewReader(strings.NewReader(baseRequest)), -1); err != nil {
		t.Fatalf("limit -1 (the default): %v", err)
	}
	if _, err := ReadServerRequestLimit(bufio.NewReader(strings.NewReader(baseRequest)), len(baseRequest)); err != nil {
		t.Fatalf("request of exactly the limit refused: %v", err)
	}
}

func TestAppendServerResponse(t *testing.T) {
	extra := http.Header{
		"Set-Cookie":            {"a=1", "b=2"},
		"X-Evil":                {"x\r\nInjected: yes"},
		"Bad Name":              {"v"},
		"Sec-Websocket-Accept":  {"forged"},
		"Connection":            {"close"},
		"Sec-Websocket-Version": {"13"},
	}
	b := AppendServerResponse([]byte("prefix"), testKey, "chat", "permessage-deflate; server_no_context_takeover", extra)
	if !strings.HasPrefix(string(b), "prefixHTTP/1.1 101 Switching Protocols\r\n") {
		t.Fatalf("response %q", b)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b[len("prefix"):]))), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	for k, want := range map[string][]string{
		"Upgrade":                  {"websocket"},
		"Connection":               {"Upgrade"},
		"Sec-Websocket-Accept":     {"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="},
		"Sec-Websocket-Protocol":   {"chat"},
		"Sec-Websocket-Extensions": {"permessage-deflate; server_no_context_takeover"},
		"Set-Cookie":               {"a=1", "b=2"},
		"Sec-Websocket-Version":    {"13"},
		"X-Evil":                   nil,
		"Injected":                 nil,
	} {
		if !reflect.DeepEqual(h[k], want) {
			t.Errorf("%s = %q, want %q", k, h[k], want)
		}
	}
	if err := CheckResponse(resp, testKey, []string{"chat"}); err != nil {
		t.Fatal(err)
	}

	// Without protocol and extensions.
	b = AppendServerResponse(nil, testKey, "", "", nil)
	const want = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
	if string(b) != want {
		t.Fatalf("got %q, want %q", b, want)
	}
	var sb strings.Builder
	if err := WriteServerResponse(&sb, testKey, "", "", nil); err != nil || sb.String() != want {
		t.Fatalf("WriteServerResponse: %q, %v", sb.String(), err)
	}
}

func TestErrorResponses(t *testing.T) {
	_, herr := CheckRequest(parseRequest(t, strings.Replace(baseRequest, "Version: 13", "Version: 8", 1)))
	if herr == nil {
		t.Fatal("version 8 accepted")
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(herr.AppendResponse(nil)))), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 426 || resp.Header.Get("Sec-WebSocket-Version") != "13" || !resp.Close ||
		string(body) != herr.Message+"\n" {
		t.Fatalf("raw response: %d %v %q", resp.StatusCode, resp.Header, body)
	}

	rec := httptest.NewRecorder()
	herr.WriteHTTP(rec)
	if rec.Code != 426 || rec.Header().Get("Sec-WebSocket-Version") != "13" || !strings.Contains(rec.Body.String(), "only 13") {
		t.Fatalf("WriteHTTP: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
	if !strings.Contains(herr.Error(), "426") {
		t.Fatalf("Error() = %q", herr.Error())
	}
}
