package handshake

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestClientRequestHost(t *testing.T) {
	for _, tc := range []struct{ url, host, uri string }{
		{"ws://example.com", "example.com", "/"},
		{"ws://example.com:80/a", "example.com", "/a"},
		{"ws://example.com:443/a", "example.com:443", "/a"},
		{"wss://example.com:443/a?b=c&d", "example.com", "/a?b=c&d"},
		{"wss://example.com:80", "example.com:80", "/"},
		{"ws://127.0.0.1:8181/core", "127.0.0.1:8181", "/core"},
		{"ws://[::1]:9000/x%20y", "[::1]:9000", "/x%20y"},
		{"ws://[::1]/", "[::1]", "/"},
		{"ws://[fe80::1%25eth0]:9000/", "[fe80::1]:9000", "/"},
		{"ws://user:pass@example.com:8080/p#frag", "example.com:8080", "/p"},
		{"http://example.com:80", "example.com", "/"},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		raw := ClientRequest(u, testKey, nil, "", nil)
		r := parseRequest(t, string(raw))
		if r.Host != tc.host || r.RequestURI != tc.uri {
			t.Errorf("%s: Host %q, URI %q; want %q, %q", tc.url, r.Host, r.RequestURI, tc.host, tc.uri)
		}
	}
}

func TestClientRequest(t *testing.T) {
	u, _ := url.Parse("ws://bus.example:8181/core?token=x")
	extra := http.Header{
		"Origin":                 {"http://bus.example"},
		"Authorization":          {"Bearer t"},
		"Sec-Websocket-Key":      {"forged"},
		"Upgrade":                {"h2c"},
		"Sec-Websocket-Protocol": {"evil"},
		"X-Evil":                 {"a\r\nInjected: 1"},
	}
	raw := ClientRequest(u, testKey, []string{"ovos", "chat"}, DeflateOffer(DeflateParams{}), extra)
	if !strings.HasPrefix(string(raw), "GET /core?token=x HTTP/1.1\r\nHost: bus.example:8181\r\n") {
		t.Fatalf("request starts %q", raw)
	}
	// Our own server reads and accepts it.
	r, err := ReadServerRequest(bufio.NewReader(strings.NewReader(string(raw))))
	if err != nil {
		t.Fatal(err)
	}
	sr, herr := CheckRequest(r)
	if herr != nil {
		t.Fatal(herr)
	}
	if sr.Key != testKey || !reflect.DeepEqual(sr.Protocols, []string{"ovos", "chat"}) || sr.Origin != "http://bus.example" {
		t.Fatalf("server saw %+v", sr)
	}
	if _, _, ok := NegotiateDeflateServer(sr.Extensions, busPolicy); !ok {
		t.Fatal("deflate offer declined")
	}
	for k, want := range map[string][]string{
		"Authorization":         {"Bearer t"},
		"Sec-Websocket-Key":     {testKey},
		"Sec-Websocket-Version": {"13"},
		"Upgrade":               {"websocket"},
		"Connection":            {"Upgrade"},
		"X-Evil":                nil,
		"Injected":              nil,
	} {
		if !reflect.DeepEqual(r.Header[k], want) {
			t.Errorf("%s = %q, want %q", k, r.Header[k], want)
		}
	}

	// A Host in extra replaces the URL's.
	raw = ClientRequest(u, testKey, nil, "", http.Header{"Host": {"virtual.example"}})
	if r := parseRequest(t, string(raw)); r.Host != "virtual.example" || r.Header.Get("Sec-WebSocket-Protocol") != "" || r.Header.Get("Sec-WebSocket-Extensions") != "" {
		t.Fatalf("Host override: %q %v", r.Host, r.Header)
	}
}

const okResponse = "HTTP/1.1 101 Switching Protocols\r\n" +
	"Upgrade: websocket\r\n" +
	"Connection: Upgrade\r\n" +
	"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" +
	"\r\n"

func readResponse(t *testing.T, raw string) *http.Response {
	t.Helper()
	resp, err := ReadClientResponse(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("ReadClientResponse: %v", err)
	}
	return resp
}

func TestReadClientResponseKeepsFrames(t *testing.T) {
	const frame = "\x81\x05Hello"
	for _, size := range []int{16, 4096} {
		br := bufio.NewReaderSize(iotest.HalfReader(strings.NewReader(okResponse+frame)), size)
		resp, err := ReadClientResponse(br)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckResponse(resp, testKey, nil); err != nil {
			t.Fatal(err)
		}
		if resp.Body != http.NoBody {
			t.Fatal("101 response has a body")
		}
		rest, _ := io.ReadAll(br)
		if string(rest) != frame {
			t.Fatalf("after the response: %q, want %q", rest, frame)
		}
	}
}

func TestCheckResponse(t *testing.T) {
	edit := func(old, new string) string { return strings.Replace(okResponse, old, new, 1) }
	withHeader := func(h string) string { return strings.TrimSuffix(okResponse, "\r\n") + h + "\r\n\r\n" }
	for _, tc := range []struct {
		name      string
		raw       string
		protocols []string
		err       string // "" = valid
	}{
		{"valid", okResponse, nil, ""},
		{"case and lists", edit("Upgrade: websocket", "Upgrade: WebSocket") + "", nil, ""},
		{"connection list", edit("Connection: Upgrade", "Connection: keep-alive, upgrade"), nil, ""},
		{"subprotocol offered", withHeader("Sec-WebSocket-Protocol: chat"), []string{"superchat", "chat"}, ""},
		{"no subprotocol selected", okResponse, []string{"chat"}, ""},
		{"bad accept", edit("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="), nil, "Sec-WebSocket-Accept"},
		{"no accept", edit("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n", ""), nil, "Sec-WebSocket-Accept"},
		{"two accepts", withHeader("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), nil, "Sec-WebSocket-Accept"},
		{"no upgrade", edit("Upgrade: websocket\r\n", ""), nil, "Upgrade"},
		{"wrong upgrade", edit("Upgrade: websocket", "Upgrade: h2c"), nil, "Upgrade"},
		{"no connection", edit("Connection: Upgrade\r\n", ""), nil, "Connection"},
		{"subprotocol not offered", withHeader("Sec-WebSocket-Protocol: chat"), []string{"superchat"}, "not one of the offered"},
		{"subprotocol none offered", withHeader("Sec-WebSocket-Protocol: chat"), nil, "none was offered"},
		{"subprotocol list", withHeader("Sec-WebSocket-Protocol: chat, superchat"), []string{"chat", "superchat"}, "not one of"},
		{"subprotocol twice", withHeader("Sec-WebSocket-Protocol: chat\r\nSec-WebSocket-Protocol: chat"), []string{"chat"}, "more than one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckResponse(readResponse(t, tc.raw), testKey, tc.protocols)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want error containing %q", err, tc.err)
			}
			if !errors.Is(err, ErrHandshake) {
				t.Fatalf("%v does not wrap ErrHandshake", err)
			}
		})
	}
	if got := Subprotocol(readResponse(t, withHeader("Sec-WebSocket-Protocol: chat"))); got != "chat" {
		t.Fatalf("Subprotocol = %q", got)
	}
}

func TestRefusedHandshake(t *testing.T) {
	long := strings.Repeat("x", 2000)
	for _, tc := range []struct {
		name, raw, body string
		code            int
	}{
		{"content-length", "HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbiddenNEXT", "forbidden", 403},
		{"no body", "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "", 404},
		{"until EOF", "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n\r\nbusy, try later", "busy, try later", 503},
		{"chunked", "HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbad \r\n7\r\nrequest\r\n0\r\n\r\n", "bad request", 400},
		{"long body cut", "HTTP/1.1 500 Internal Server Error\r\n\r\n" + long, long[:MaxBodyExcerpt], 500},
		{"HTTP/1.0 200", "HTTP/1.0 200 OK\r\n\r\n<html>", "<html>", 200},
		{"100 continue", "HTTP/1.1 100 Continue\r\n\r\n", "", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := readResponse(t, tc.raw)
			err := CheckResponse(resp, testKey, nil)
			var re *ResponseError
			if !errors.As(err, &re) {
				t.Fatalf("got %v, want *ResponseError", err)
			}
			if re.StatusCode != tc.code || re.Body != tc.body || !strings.HasPrefix(re.Status, resp.Status[:3]) {
				t.Fatalf("got %d %q %q, want %d %q", re.StatusCode, re.Status, re.Body, tc.code, tc.body)
			}
			if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), re.Status) {
				t.Fatalf("Error() = %q", err.Error())
			}
			if tc.code == 503 && re.Header.Get("Retry-After") != "5" {
				t.Fatal("header not kept")
			}
		})
	}
}

func TestReadClientResponseErrors(t *testing.T) {
	big := "HTTP/1.1 101 Switching Protocols\r\nX: " + strings.Repeat("a", DefaultMaxResponseHeaderBytes) + "\r\n\r\n"
	for _, tc := range []struct {
		name, raw string
		err       error
	}{
		{"empty", "", io.EOF},
		{"cut", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n", io.ErrUnexpectedEOF},
		{"too large", big, ErrHandshake},
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n\r\n", ErrHandshake},
		{"bad status", "HTTP/1.1 abc Switching\r\n\r\n", ErrHandshake},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadClientResponse(bufio.NewReader(strings.NewReader(tc.raw)))
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
		})
	}
	if _, err := ReadClientResponseLimit(bufio.NewReader(strings.NewReader(okResponse)), 32); !errors.Is(err, ErrHandshake) {
		t.Fatalf("limit: %v", err)
	}
}
