package handshake

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// DefaultMaxResponseHeaderBytes bounds the status line and header fields
// read by ReadClientResponse.
const DefaultMaxResponseHeaderBytes = 64 << 10

// clientReserved are the header fields ClientRequest writes itself.
func clientReserved(canonical string) bool {
	switch canonical {
	case "Host", "Upgrade", "Connection", "Sec-Websocket-Key", "Sec-Websocket-Version",
		"Sec-Websocket-Protocol", "Sec-Websocket-Extensions", "Content-Length", "Transfer-Encoding":
		return true
	}
	return false
}

// hostHeader returns the Host header for u (RFC 7230 §5.4): the host, with
// the port unless it is the scheme's default (80 for ws/http, 443 for
// wss/https). An IPv6 zone is left out, as net/http does.
func hostHeader(u *url.URL) string {
	host, port := u.Hostname(), u.Port()
	if i := strings.IndexByte(host, '%'); i >= 0 && strings.IndexByte(host, ':') >= 0 {
		host = host[:i]
	}
	switch {
	case port == "":
	case port == "80" && (u.Scheme == "ws" || u.Scheme == "http"):
		port = ""
	case port == "443" && (u.Scheme == "wss" || u.Scheme == "https"):
		port = ""
	}
	if port == "" {
		if strings.IndexByte(host, ':') >= 0 {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, port)
}

// ClientRequest returns the client's opening handshake for u (RFC 6455
// §4.1): "GET path?query HTTP/1.1", Host (with a non-default port), Upgrade,
// Connection, Sec-WebSocket-Key, Sec-WebSocket-Version: 13, then
// Sec-WebSocket-Protocol (protocols joined) and Sec-WebSocket-Extensions
// when not empty, then the fields of extra in sorted order. A Host field in
// extra replaces the Host taken from u; the other fields this function
// writes itself, and fields with an invalid name or value, are left out of
// extra.
func ClientRequest(u *url.URL, key string, protocols []string, extensions string, extra http.Header) []byte {
	host := hostHeader(u)
	if h := strings.Trim(extra.Get("Host"), " \t"); h != "" && httpguts.ValidHostHeader(h) {
		host = h
	}
	b := make([]byte, 0, 256)
	b = append(b, "GET "...)
	b = append(b, u.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: "...)
	b = append(b, key...)
	b = append(b, "\r\nSec-WebSocket-Version: 13\r\n"...)
	if p := strings.Join(protocols, ", "); p != "" && httpguts.ValidHeaderFieldValue(p) {
		b = append(b, "Sec-WebSocket-Protocol: "...)
		b = append(b, p...)
		b = append(b, "\r\n"...)
	}
	if extensions != "" && httpguts.ValidHeaderFieldValue(extensions) {
		b = append(b, "Sec-WebSocket-Extensions: "...)
		b = append(b, extensions...)
		b = append(b, "\r\n"...)
	}
	b = appendHeader(b, extra, clientReserved)
	return append(b, "\r\n"...)
}

// ReadClientResponse reads the server's handshake response from br, reading
// at most DefaultMaxResponseHeaderBytes of status line and header.
func ReadClientResponse(br *bufio.Reader) (*http.Response, error) {
	return ReadClientResponseLimit(br, DefaultMaxResponseHeaderBytes)
}

// ReadClientResponseLimit reads the server's handshake response from br; a
// limit <= 0 means DefaultMaxResponseHeaderBytes.
//
// For a 101 response it reads the status line and header, at most limit
// bytes, and not a byte more: the frames the server may send right behind
// it stay in br; the response's Body is http.NoBody.
//
// For any other status it also reads the start of the body, at most
// MaxBodyExcerpt bytes, which becomes the response's Body (and the Body of
// the *ResponseError from CheckResponse); the connection is then only good
// for closing.
func ReadClientResponseLimit(br *bufio.Reader, limit int) (*http.Response, error) {
	if limit <= 0 {
		limit = DefaultMaxResponseHeaderBytes
	}
	block, err := readHeaderBlock(br, limit)
	if err != nil {
		if errors.Is(err, errHeaderTooLarge) {
			return nil, protocolError("response header larger than %d bytes", limit)
		}
		return nil, err
	}
	resp, err := http.ReadResponse(newBlockReader(block), nil)
	if err != nil {
		return nil, protocolError("malformed HTTP response: %v", err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = http.NoBody
		return resp, nil
	}
	// Parse again with the body behind the header to honour its framing
	// (Content-Length, chunked or until EOF); reading past the body does
	// not matter any more.
	full, err := http.ReadResponse(bufio.NewReader(io.MultiReader(bytes.NewReader(block), br)), nil)
	if err != nil {
		return nil, protocolError("malformed HTTP response: %v", err)
	}
	excerpt, _ := io.ReadAll(io.LimitReader(full.Body, MaxBodyExcerpt))
	full.Body = io.NopCloser(bytes.NewReader(excerpt))
	return full, nil
}

// CheckResponse validates the server's handshake response to a request with
// challenge key and the offered subprotocols (RFC 6455 §4.1, client
// requirements 1 to 6):
//
//   - a status other than 101 is a *ResponseError with the status, the
//     header and the start of the body (read from resp.Body, at most
//     MaxBodyExcerpt bytes);
//   - Upgrade must hold the token websocket and Connection the token
//     upgrade (any case);
//   - Sec-WebSocket-Accept must be AcceptKey(key);
//   - Sec-WebSocket-Protocol, when present, must be a single value among
//     offeredProtocols (compared exactly).
//
// Extensions are validated separately (ParseExtensions,
// AcceptDeflateResponse). Every error wraps ErrHandshake.
func CheckResponse(resp *http.Response, key string, offeredProtocols []string) error {
	if resp.StatusCode != http.StatusSwitchingProtocols {
		re := &ResponseError{StatusCode: resp.StatusCode, Status: resp.Status, Header: resp.Header}
		if resp.Body != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBodyExcerpt))
			re.Body = strings.ToValidUTF8(string(b), "\uFFFD")
		}
		return re
	}
	h := resp.Header
	if !headerHasToken(h, "Upgrade", "websocket") {
		return protocolError("response lacks \"Upgrade: websocket\" (got %q)", h.Get("Upgrade"))
	}
	if !headerHasToken(h, "Connection", "upgrade") {
		return protocolError("response lacks \"upgrade\" in its Connection header (got %q)", h.Get("Connection"))
	}
	accept := h.Values("Sec-WebSocket-Accept")
	if len(accept) != 1 || strings.Trim(accept[0], " \t") != AcceptKey(key) {
		return protocolError("bad Sec-WebSocket-Accept %q, want %q", strings.Join(accept, ", "), AcceptKey(key))
	}
	switch protos := h.Values("Sec-WebSocket-Protocol"); len(protos) {
	case 0:
	case 1:
		p := strings.Trim(protos[0], " \t")
		if p == "" {
			break
		}
		for _, o := range offeredProtocols {
			if p == o {
				return nil
			}
		}
		if len(offeredProtocols) == 0 {
			return protocolError("server selected subprotocol %q but none was offered", p)
		}
		return protocolError("server selected subprotocol %q, not one of the offered %q", p, offeredProtocols)
	default:
		return protocolError("server selected more than one subprotocol: %q", protos)
	}
	return nil
}

// Subprotocol returns the subprotocol the server selected in a response
// accepted by CheckResponse ("" for none).
func Subprotocol(resp *http.Response) string {
	return strings.Trim(resp.Header.Get("Sec-WebSocket-Protocol"), " \t")
}
