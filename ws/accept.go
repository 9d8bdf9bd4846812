package ws

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ovbus/ovbus/ws/internal/handshake"
)

// AcceptOptions configures the server side of the opening handshake and the
// resulting Conn. A nil *AcceptOptions means the defaults.
type AcceptOptions struct {
	// Subprotocols lists the subprotocols the server speaks, most preferred
	// first. The first one the client also offers is selected.
	Subprotocols []string

	// CheckOrigin decides whether a request's Origin is allowed. When nil,
	// only requests without an Origin header or whose Origin host equals the
	// Host header are accepted (browsers' cross-site requests are refused
	// with 403). Return true unconditionally to accept every origin.
	CheckOrigin func(r *http.Request) bool

	// EnableCompression negotiates permessage-deflate (RFC 7692) with
	// clients that offer it. The server asks for server_no_context_takeover
	// unless Compression.Context is set, so that every compressed message
	// stands alone and one compressed PreparedMessage serves every
	// connection.
	EnableCompression bool
	// AllowClientContextTakeover lets clients compress with context
	// takeover (better ratio for them, 32 KiB of inflate window kept per
	// connection here). Off by default: client_no_context_takeover is asked
	// for when the client allows it.
	AllowClientContextTakeover bool
	// Compression sets the level and the size threshold of messages the
	// server compresses, and the context it keeps where the client allows
	// (CompressionOptions.Context).
	Compression CompressionOptions

	// MaxMessageSize limits the size of a received message, after
	// decompression. 0 means the package default; a negative value means no
	// limit. A larger message closes the connection with 1009.
	MaxMessageSize int64
	// MaxFrameSize limits the payload of one received frame; 0 means the
	// package default, negative no limit.
	MaxFrameSize int64
	// Budget, when set, bounds what this connection and every other one
	// sharing it hold of the messages they are receiving; a message that
	// would exceed it closes its connection with 1013 (see Budget). nil:
	// each connection is bounded by MaxMessageSize alone.
	Budget *Budget

	// HandshakeTimeout bounds reading the request (UpgradeConn) and writing
	// the response. 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// CloseTimeout bounds the wait for the peer's close frame in Close.
	CloseTimeout time.Duration

	ReadBufferSize  int
	WriteBufferSize int

	// OnPing, when set, is called with the payload of each received ping,
	// after the automatic pong (RFC 6455 §5.5.2) is queued. OnPong, when
	// set, is called with the payload of each received pong (§5.5.3). They
	// run on the goroutine that reads from the Conn, inside its read call,
	// and must not block; the payload is valid only during the call. They
	// are fixed for the life of the Conn.
	OnPing func(payload []byte)
	OnPong func(payload []byte)

	// ResponseHeader is added to the 101 response.
	ResponseHeader http.Header
}

func (o *AcceptOptions) handshakeTimeout() time.Duration {
	if o.HandshakeTimeout > 0 {
		return o.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

// HandshakeError is returned by Accept and UpgradeConn when the request is
// not an acceptable WebSocket handshake. The HTTP error response has already
// been written.
type HandshakeError struct {
	Status  int
	Message string
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("ws: handshake refused (%d): %s", e.Status, e.Message)
}

// Accept upgrades an HTTP request to a WebSocket connection (RFC 6455 §4.2).
// On failure it writes an HTTP error (400 bad request, 403 forbidden origin,
// 405 wrong method, 426 unsupported version) and returns a *HandshakeError.
func Accept(w http.ResponseWriter, r *http.Request, opts *AcceptOptions) (*Conn, error) {
	if opts == nil {
		opts = &AcceptOptions{}
	}
	resp, cfg, herr := negotiate(r, opts)
	if herr != nil {
		for k, v := range herr.Header {
			w.Header()[k] = v
		}
		http.Error(w, herr.Message, herr.Status)
		return nil, &HandshakeError{Status: herr.Status, Message: herr.Message}
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "websocket: response does not support hijacking", http.StatusInternalServerError)
		return nil, errors.New("ws: http.ResponseWriter does not implement http.Hijacker")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, fmt.Errorf("ws: hijack: %w", err)
	}
	if n := brw.Reader.Buffered(); n > 0 {
		cfg.leftover, _ = brw.Reader.Peek(n)
	}
	nc.SetDeadline(time.Now().Add(opts.handshakeTimeout()))
	if _, err := nc.Write(resp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("ws: writing handshake response: %w", err)
	}
	nc.SetDeadline(time.Time{})
	return newConn(nc, cfg), nil
}

// UpgradeConn performs the server handshake on a raw connection, for servers
// that own their listener: it reads the HTTP request from nc, answers it, and
// returns the Conn and the request. On a refused handshake it writes the HTTP
// error, closes nc and returns a *HandshakeError.
func UpgradeConn(nc net.Conn, opts *AcceptOptions) (*Conn, *http.Request, error) {
	if opts == nil {
		opts = &AcceptOptions{}
	}
	nc.SetDeadline(time.Now().Add(opts.handshakeTimeout()))
	br := bufio.NewReaderSize(nc, 4096)
	r, err := handshake.ReadServerRequest(br)
	if err != nil {
		// An *Error deserves an answer (400, 431); an IO error means the
		// peer is gone or silent.
		var herr *handshake.Error
		if errors.As(err, &herr) {
			writeHTTPError(nc, herr)
		}
		nc.Close()
		if herr != nil {
			return nil, nil, &HandshakeError{Status: herr.Status, Message: herr.Message}
		}
		return nil, nil, fmt.Errorf("ws: reading handshake request: %w", err)
	}
	resp, cfg, herr := negotiate(r, opts)
	if herr != nil {
		writeHTTPError(nc, herr)
		nc.Close()
		return nil, r, &HandshakeError{Status: herr.Status, Message: herr.Message}
	}
	if n := br.Buffered(); n > 0 {
		cfg.leftover, _ = br.Peek(n)
	}
	if _, err := nc.Write(resp); err != nil {
		nc.Close()
		return nil, r, fmt.Errorf("ws: writing handshake response: %w", err)
	}
	nc.SetDeadline(time.Time{})
	return newConn(nc, cfg), r, nil
}

func writeHTTPError(nc net.Conn, e *handshake.Error) {
	nc.Write(e.AppendResponse(nil))
}

// negotiate checks the request and builds the 101 response and the Conn
// configuration.
func negotiate(r *http.Request, opts *AcceptOptions) ([]byte, connConfig, *handshake.Error) {
	req, herr := handshake.CheckRequest(r)
	if herr != nil {
		return nil, connConfig{}, herr
	}
	check := opts.CheckOrigin
	if check == nil {
		check = sameOrigin
	}
	if !check(r) {
		return nil, connConfig{}, &handshake.Error{Status: http.StatusForbidden, Message: "websocket: origin " + r.Header.Get("Origin") + " not allowed"}
	}
	cfg := connConfig{
		role:            RoleServer,
		subprotocol:     handshake.SelectSubprotocol(opts.Subprotocols, req.Protocols),
		compression:     opts.Compression,
		maxMessageSize:  opts.MaxMessageSize,
		maxFrameSize:    opts.MaxFrameSize,
		budget:          opts.Budget,
		readBufferSize:  opts.ReadBufferSize,
		writeBufferSize: opts.WriteBufferSize,
		closeTimeout:    opts.CloseTimeout,
		onPing:          opts.OnPing,
		onPong:          opts.OnPong,
	}
	ext := ""
	if opts.EnableCompression {
		resp, params, ok := handshake.NegotiateDeflateServer(req.Extensions, handshake.DeflateServerPolicy{
			RequireServerNoContextTakeover: opts.Compression.Context <= 0,
			ServerContextFullWindow:        true,
			AllowClientContextTakeover:     opts.AllowClientContextTakeover,
		})
		if ok {
			ext = resp
			cfg.params = &DeflateParams{
				ServerNoContextTakeover: params.ServerNoContextTakeover,
				ClientNoContextTakeover: params.ClientNoContextTakeover,
				ServerMaxWindowBits:     params.ServerMaxWindowBits,
				ClientMaxWindowBits:     params.ClientMaxWindowBits,
			}
		}
	}
	resp := handshake.AppendServerResponse(nil, req.Key, cfg.subprotocol, ext, opts.ResponseHeader)
	return resp, cfg, nil
}

// sameOrigin accepts requests without an Origin header and requests whose
// Origin host equals the Host header (RFC 6455 §10.2).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}
