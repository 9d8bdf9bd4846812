package handshake

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// ErrHandshake is matched (with errors.Is) by every error of this package
// that means the peer's handshake is invalid, including *Error and
// *ResponseError; I/O errors are returned as they are.
var ErrHandshake = errors.New("websocket handshake failed")

// ErrNotNegotiated is returned by AcceptDeflateResponse when the server's
// response holds no extension at all: permessage-deflate is simply off.
var ErrNotNegotiated = errors.New("permessage-deflate not negotiated")

// MaxBodyExcerpt is the most bytes of a refused handshake's body kept in a
// ResponseError.
const MaxBodyExcerpt = 512

// Error is a server-side handshake failure: the HTTP status to answer with,
// a message for the response body and headers to add (for example
// Sec-WebSocket-Version: 13 with 426 Upgrade Required, RFC 6455 §4.4, or
// Allow: GET with 405).
type Error struct {
	Status  int
	Message string
	Header  http.Header
}

func (e *Error) Error() string {
	return "websocket handshake: " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + ": " + e.Message
}

// Is makes errors.Is(err, ErrHandshake) true.
func (e *Error) Is(target error) bool { return target == ErrHandshake }

// WriteHTTP answers the request on w with the error: its headers, the
// status and the message as a plain-text body.
func (e *Error) WriteHTTP(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range e.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	http.Error(w, e.Message, e.Status)
}

// AppendResponse appends a complete HTTP/1.1 error response (with
// Connection: close) to dst, for servers that write on a raw connection.
// Header fields with invalid names or values are left out.
func (e *Error) AppendResponse(dst []byte) []byte {
	status := e.Status
	if status < 100 || status > 999 {
		status = http.StatusBadRequest
	}
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	dst = append(dst, http.StatusText(status)...)
	dst = append(dst, "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(e.Message)+1), 10)
	dst = append(dst, "\r\n"...)
	dst = appendHeader(dst, e.Header, func(string) bool { return false })
	dst = append(dst, "\r\n"...)
	dst = append(dst, e.Message...)
	return append(dst, '\n')
}

func newError(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// ResponseError is a client-side refused handshake: the server answered with
// a status other than 101 Switching Protocols.
type ResponseError struct {
	StatusCode int    // e.g. 403
	Status     string // e.g. "403 Forbidden"
	Body       string // the start of the response body, at most MaxBodyExcerpt bytes
	// Header is the response's header (Retry-After, WWW-Authenticate, ...).
	Header http.Header
}

func (e *ResponseError) Error() string {
	msg := "websocket handshake refused: " + e.Status
	if e.Status == "" {
		msg = "websocket handshake refused: " + strconv.Itoa(e.StatusCode)
	}
	if e.Body != "" {
		msg += ": " + strconv.Quote(e.Body)
	}
	return msg
}

// Is makes errors.Is(err, ErrHandshake) true.
func (e *ResponseError) Is(target error) bool { return target == ErrHandshake }

// protocolError wraps ErrHandshake with a message.
func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrHandshake}, args...)...)
}
