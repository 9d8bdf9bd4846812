package handshake

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// DefaultMaxRequestHeaderBytes bounds the request line and header fields
// read by ReadServerRequest.
const DefaultMaxRequestHeaderBytes = 8 << 10

// ServerRequest is a validated client handshake.
type ServerRequest struct {
	Path       string      // the request URI's path
	Host       string      // the Host header (or the host of an absolute request URI)
	Origin     string      // the Origin header, "" when absent
	Key        string      // Sec-WebSocket-Key, 16 bytes in base64
	Protocols  []string    // Sec-WebSocket-Protocol, in the client's order
	Extensions []Extension // Sec-WebSocket-Extensions, in the client's order
	Header     http.Header // the whole request header
}

// CheckRequest validates a client's opening handshake (RFC 6455 §4.2.1) and
// returns its parts, or the error response to send:
//
//   - 405 Method Not Allowed (with Allow: GET) unless the method is GET;
//   - 400 Bad Request unless the request is HTTP/1.1 or later, has Upgrade:
//     websocket and Connection: upgrade (tokens in lists, any case), exactly
//     one Sec-WebSocket-Key decoding to 16 bytes, a valid
//     Sec-WebSocket-Protocol token list and a well-formed
//     Sec-WebSocket-Extensions;
//   - 426 Upgrade Required with Sec-WebSocket-Version: 13 unless
//     Sec-WebSocket-Version is 13 (RFC 6455 §4.4).
//
// The Origin is not checked here: that is the caller's policy (§10.2).
func CheckRequest(r *http.Request) (ServerRequest, *Error) {
	if r.Method != http.MethodGet {
		e := newError(http.StatusMethodNotAllowed, "websocket handshake needs method GET, not %s", r.Method)
		e.Header = http.Header{"Allow": {http.MethodGet}}
		return ServerRequest{}, e
	}
	if !r.ProtoAtLeast(1, 1) {
		return ServerRequest{}, newError(http.StatusBadRequest, "websocket handshake needs HTTP/1.1 or later, not %s", r.Proto)
	}
	h := r.Header
	if !headerHasToken(h, "Upgrade", "websocket") {
		return ServerRequest{}, newError(http.StatusBadRequest, "missing \"Upgrade: websocket\" header (got %q)", h.Get("Upgrade"))
	}
	if !headerHasToken(h, "Connection", "upgrade") {
		return ServerRequest{}, newError(http.StatusBadRequest, "missing \"upgrade\" in the Connection header (got %q)", h.Get("Connection"))
	}
	if v := h.Values("Sec-WebSocket-Version"); len(v) != 1 || strings.Trim(v[0], " \t") != "13" {
		e := newError(http.StatusUpgradeRequired, "unsupported Sec-WebSocket-Version %q: only 13 is supported", strings.Join(v, ", "))
		e.Header = http.Header{"Sec-Websocket-Version": {"13"}}
		return ServerRequest{}, e
	}
	keys := h.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return ServerRequest{}, newError(http.StatusBadRequest, "need exactly one Sec-WebSocket-Key header, got %d", len(keys))
	}
	key := strings.Trim(keys[0], " \t")
	if !validChallengeKey(key) {
		return ServerRequest{}, newError(http.StatusBadRequest, "Sec-WebSocket-Key %q is not 16 bytes in base64", key)
	}
	protocols, ok := parseTokenList(h, "Sec-WebSocket-Protocol")
	if !ok {
		return ServerRequest{}, newError(http.StatusBadRequest, "bad Sec-WebSocket-Protocol %q: elements must be tokens", strings.Join(h.Values("Sec-WebSocket-Protocol"), ", "))
	}
	exts, err := parseExtensions(h)
	if err != nil {
		return ServerRequest{}, newError(http.StatusBadRequest, "%v", err)
	}
	sr := ServerRequest{
		Host:       r.Host,
		Origin:     h.Get("Origin"),
		Key:        key,
		Protocols:  protocols,
		Extensions: exts,
		Header:     h,
	}
	if r.URL != nil {
		sr.Path = r.URL.Path
	}
	return sr, nil
}

// SelectSubprotocol returns the first of the server's subprotocols, in the
// server's order of preference, that the client offered, or "" when there
// is none (the handshake then goes on without a subprotocol, RFC 6455
// §4.2.2). Names are compared exactly.
func SelectSubprotocol(server, client []string) string {
	for _, s := range server {
		for _, c := range client {
			if s == c {
				return s
			}
		}
	}
	return ""
}

// ReadServerRequest reads a client's handshake request from br, for servers
// that own the connection, reading at most DefaultMaxRequestHeaderBytes.
func ReadServerRequest(br *bufio.Reader) (*http.Request, error) {
	return ReadServerRequestLimit(br, DefaultMaxRequestHeaderBytes)
}

// ReadServerRequestLimit reads a client's handshake request from br: the
// request line and header fields, at most limit bytes of them, and not a
// byte past the empty line that ends them, so that data the client sent
// right behind the request stays in br. The request must not have a body.
// A limit <= 0 means DefaultMaxRequestHeaderBytes.
//
// A request that is too large or malformed returns an *Error (431 Request
// Header Fields Too Large or 400 Bad Request) to answer with; a failing or
// closed connection returns the I/O error (io.EOF when nothing was read,
// io.ErrUnexpectedEOF when the request was cut).
func ReadServerRequestLimit(br *bufio.Reader, limit int) (*http.Request, error) {
	if limit <= 0 {
		limit = DefaultMaxRequestHeaderBytes
	}
	block, err := readHeaderBlock(br, limit)
	if err != nil {
		if errors.Is(err, errHeaderTooLarge) {
			return nil, newError(http.StatusRequestHeaderFieldsTooLarge, "request header larger than %d bytes", limit)
		}
		return nil, err
	}
	req, err := http.ReadRequest(newBlockReader(block))
	if err != nil {
		return nil, newError(http.StatusBadRequest, "malformed HTTP request: %v", err)
	}
	if req.ContentLength != 0 || len(req.TransferEncoding) > 0 {
		return nil, newError(http.StatusBadRequest, "websocket handshake request must not have a body")
	}
	req.Body = http.NoBody
	return req, nil
}

// serverReserved are the header fields AppendServerResponse writes itself.
func serverReserved(canonical string) bool {
	switch canonical {
	case "Upgrade", "Connection", "Sec-Websocket-Accept", "Sec-Websocket-Protocol", "Sec-Websocket-Extensions", "Content-Length", "Transfer-Encoding":
		return true
	}
	return false
}

// AppendServerResponse appends the 101 Switching Protocols response to the
// handshake whose Sec-WebSocket-Key is key (RFC 6455 §4.2.2 step 5):
// Upgrade, Connection, Sec-WebSocket-Accept, then Sec-WebSocket-Protocol
// and Sec-WebSocket-Extensions when not empty, then the fields of extra in
// sorted order. Fields of extra that this function writes itself, and fields
// with an invalid name or value, are left out.
func AppendServerResponse(dst []byte, key, protocol, extensions string, extra http.Header) []byte {
	dst = append(dst, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	dst = append(dst, AcceptKey(key)...)
	dst = append(dst, "\r\n"...)
	if protocol != "" && httpguts.ValidHeaderFieldValue(protocol) {
		dst = append(dst, "Sec-WebSocket-Protocol: "...)
		dst = append(dst, protocol...)
		dst = append(dst, "\r\n"...)
	}
	if extensions != "" && httpguts.ValidHeaderFieldValue(extensions) {
		dst = append(dst, "Sec-WebSocket-Extensions: "...)
		dst = append(dst, extensions...)
		dst = append(dst, "\r\n"...)
	}
	dst = appendHeader(dst, extra, serverReserved)
	return append(dst, "\r\n"...)
}

// WriteServerResponse writes the response of AppendServerResponse to w.
func WriteServerResponse(w io.Writer, key, protocol, extensions string, extra http.Header) error {
	_, err := w.Write(AppendServerResponse(nil, key, protocol, extensions, extra))
	return err
}
