package ws

import (
	"errors"
	"strconv"

	"github.com/ovbus/ovbus/ws/internal/connx"
)

var (
	// errWouldBlock: the socket holds nothing more to read for now
	// (nonblock.ErrWouldBlock).
	errWouldBlock = connx.ErrWouldBlock
	errNoTryRead  = errors.New("ws: nonblock.NextMessage needs a plain TCP or Unix socket on Linux")
)

// StatusCode is a close status code (RFC 6455 §7.4).
type StatusCode uint16

// Close status codes defined by RFC 6455 §7.4.1 and the IANA "WebSocket Close
// Code Number Registry" (RFC 6455 §11.7).
const (
	StatusNormalClosure           StatusCode = 1000
	StatusGoingAway               StatusCode = 1001
	StatusProtocolError           StatusCode = 1002
	StatusUnsupportedData         StatusCode = 1003
	StatusNoStatusRcvd            StatusCode = 1005 // never sent on the wire (§7.4.1)
	StatusAbnormalClosure         StatusCode = 1006 // never sent on the wire (§7.4.1)
	StatusInvalidFramePayloadData StatusCode = 1007
	StatusPolicyViolation         StatusCode = 1008
	StatusMessageTooBig           StatusCode = 1009
	StatusMandatoryExtension      StatusCode = 1010
	StatusInternalError           StatusCode = 1011
	StatusServiceRestart          StatusCode = 1012
	StatusTryAgainLater           StatusCode = 1013
	StatusBadGateway              StatusCode = 1014
	StatusTLSHandshake            StatusCode = 1015 // never sent on the wire (§7.4.1)
)

var statusNames = map[StatusCode]string{
	StatusNormalClosure:           "normal closure",
	StatusGoingAway:               "going away",
	StatusProtocolError:           "protocol error",
	StatusUnsupportedData:         "unsupported data",
	StatusNoStatusRcvd:            "no status",
	StatusAbnormalClosure:         "abnormal closure",
	StatusInvalidFramePayloadData: "invalid frame payload data",
	StatusPolicyViolation:         "policy violation",
	StatusMessageTooBig:           "message too big",
	StatusMandatoryExtension:      "mandatory extension",
	StatusInternalError:           "internal error",
	StatusServiceRestart:          "service restart",
	StatusTryAgainLater:           "try again later",
	StatusBadGateway:              "bad gateway",
	StatusTLSHandshake:            "TLS handshake failure",
}

// String returns the code number followed by its registered name, if any.
func (c StatusCode) String() string {
	s := strconv.Itoa(int(c))
	if n, ok := statusNames[c]; ok {
		return s + " (" + n + ")"
	}
	return s
}

// ValidCloseCode reports whether c may appear in a Close frame on the wire
// (RFC 6455 §7.4.1, §7.4.2): 1000-1003, 1007-1014 and 3000-4999. The codes
// 1004 (reserved), 1005, 1006 and 1015 (reserved for local use) and all other
// values are invalid and make the receiver fail the connection with 1002.
func ValidCloseCode(c StatusCode) bool {
	switch {
	case c >= 1000 && c <= 1003:
		return true
	case c >= 1007 && c <= 1014:
		return true
	case c >= 3000 && c <= 4999:
		return true
	}
	return false
}

// ErrClosed is returned when the connection is used after it was closed
// (after a Close frame was sent, received, or the protocol failed).
var ErrClosed = errors.New("ws: connection closed")

// CloseError is the peer's Close frame (RFC 6455 §5.5.1, §7.1.5). Read it
// with errors.As.
type CloseError struct {
	Code   StatusCode // StatusNoStatusRcvd when the peer sent no code
	Reason string
}

func (e *CloseError) Error() string {
	if e.Reason == "" {
		return "ws: peer closed: " + e.Code.String()
	}
	return "ws: peer closed: " + e.Code.String() + ": " + strconv.Quote(e.Reason)
}

// ProtocolError is a violation of RFC 6455 / RFC 7692 detected by this
// endpoint, or a limit it enforces. Code is the close code this endpoint
// sends to fail the connection (RFC 6455 §7.1.7).
type ProtocolError struct {
	Code   StatusCode
	Reason string
}

func (e *ProtocolError) Error() string {
	return "ws: protocol error: " + e.Code.String() + ": " + e.Reason
}

func protoErr(code StatusCode, reason string) *ProtocolError {
	return &ProtocolError{Code: code, Reason: reason}
}
