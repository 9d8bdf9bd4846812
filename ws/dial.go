package ws

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/ovbus/ovbus/ws/internal/handshake"
	"github.com/ovbus/ovbus/ws/internal/proxy"
)

// DialOptions configures the client side of the opening handshake and the
// resulting Conn. A nil *DialOptions means the defaults.
type DialOptions struct {
	// Header is sent with the handshake request (Origin, Authorization,
	// cookies, ...).
	Header http.Header
	// Subprotocols are offered in order of preference.
	Subprotocols []string

	// EnableCompression offers permessage-deflate (RFC 7692) with
	// client_max_window_bits, accepting whatever valid parameters the
	// server answers with.
	EnableCompression bool
	// Compression sets the level and the size threshold of messages this
	// client compresses.
	Compression CompressionOptions

	// TLSConfig is used for wss:// URLs (and https:// proxies). It is cloned;
	// ServerName is filled from the URL when empty.
	TLSConfig *tls.Config

	// Proxy returns the proxy for a request URL (http://, https://,
	// socks5:// or socks5h://, with user:password@ for authentication), or
	// nil for a direct connection. When Proxy is nil the HTTP_PROXY,
	// HTTPS_PROXY and NO_PROXY variables decide, as in net/http (ws:// uses
	// HTTP_PROXY, wss:// HTTPS_PROXY). Use NoProxy to always dial directly.
	Proxy func(*url.URL) (*url.URL, error)

	// NetDialContext dials the TCP connection (to the proxy when one is
	// used). When nil, a net.Dialer is used.
	NetDialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// HandshakeTimeout bounds the whole dial, unless ctx ends first. 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// CloseTimeout bounds the wait for the peer's close frame in Close.
	CloseTimeout time.Duration

	// MaxMessageSize and MaxFrameSize limit received messages and frames as
	// in AcceptOptions.
	MaxMessageSize int64
	MaxFrameSize   int64
	// Budget, when set, bounds what this connection and every other one
	// sharing it hold of the messages they are receiving (see Budget).
	Budget *Budget

	ReadBufferSize  int
	WriteBufferSize int

	// OnPing and OnPong are called for each received ping and pong as in
	// AcceptOptions.
	OnPing func(payload []byte)
	OnPong func(payload []byte)
}

// NoProxy is a DialOptions.Proxy that always connects directly.
func NoProxy(*url.URL) (*url.URL, error) { return nil, nil }

// DialError is returned by Dial when the server answered the opening
// handshake with a status other than 101 Switching Protocols (RFC 6455
// §4.1: the client must then not go on with the WebSocket protocol). Read it
// with errors.As.
type DialError struct {
	StatusCode int    // the response's status code, e.g. 403
	Status     string // the status line's text, e.g. "403 Forbidden"
	// Body is the start of the response body, at most MaxDialErrorBody
	// bytes, with invalid UTF-8 replaced by U+FFFD.
	Body string
	// Header is the response's header (Retry-After, WWW-Authenticate, ...).
	Header http.Header
}

// DialError has the fields of handshake.ResponseError, which the handshake
// code fills, in the same order: the two convert into each other.
var _ = (*handshake.ResponseError)((*DialError)(nil))

// MaxDialErrorBody is the most bytes of a refused handshake's response body
// kept in DialError.Body.
const MaxDialErrorBody = handshake.MaxBodyExcerpt

func (e *DialError) Error() string { return (*handshake.ResponseError)(e).Error() }

// dialError turns the handshake code's refusal into a *DialError and leaves
// other errors as they are.
func dialError(err error) error {
	var re *handshake.ResponseError
	if errors.As(err, &re) {
		return (*DialError)(re)
	}
	return err
}

// Dial opens a WebSocket connection to a ws:// or wss:// URL (RFC 6455 §4.1).
// The returned response is the server's handshake response; its body has been
// consumed. A refused handshake returns a *DialError with the status code and
// the start of the body.
func Dial(ctx context.Context, rawURL string, opts *DialOptions) (*Conn, *http.Response, error) {
	if opts == nil {
		opts = &DialOptions{}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("ws: dial: %w", err)
	}
	secure := false
	switch u.Scheme {
	case "ws", "http":
	case "wss", "https":
		secure = true
	default:
		return nil, nil, fmt.Errorf("ws: dial %s: scheme must be ws or wss", rawURL)
	}
	timeout := opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	addr := u.Host
	if u.Port() == "" {
		if secure {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}

	var proxyURL *url.URL
	if opts.Proxy != nil {
		proxyURL, err = opts.Proxy(u)
	} else {
		proxyURL, err = proxy.FromEnvironment(u)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ws: dial %s: proxy: %w", rawURL, err)
	}
	dial := opts.NetDialContext
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	var nc net.Conn
	if proxyURL != nil {
		nc, err = proxy.Dial(ctx, proxyURL, "tcp", addr, dial, opts.TLSConfig)
	} else {
		nc, err = dial(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ws: dial %s: %w", rawURL, err)
	}
	conn, resp, err := clientHandshake(ctx, nc, u, secure, opts)
	if err != nil {
		nc.Close()
		return nil, resp, err
	}
	return conn, resp, nil
}

func clientHandshake(ctx context.Context, nc net.Conn, u *url.URL, secure bool, opts *DialOptions) (c *Conn, resp *http.Response, err error) {
	// The context bounds the handshake: a deadline from it, and a forced
	// deadline on cancellation.
	if d, ok := ctx.Deadline(); ok {
		nc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		stop()
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("ws: dial %s: %w", u.Redacted(), ctx.Err())
		}
	}()

	if secure {
		cfg := &tls.Config{}
		if opts.TLSConfig != nil {
			cfg = opts.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, fmt.Errorf("ws: dial %s: tls: %w", u.Redacted(), err)
		}
		nc = tc
	}

	key, err := handshake.NewChallengeKey()
	if err != nil {
		return nil, nil, err
	}
	offer := ""
	var offered handshake.DeflateParams
	if opts.EnableCompression {
		offered = handshake.DeflateParams{ClientMaxWindowBits: -1}
		offer = handshake.DeflateOffer(offered)
	}
	req := handshake.ClientRequest(u, key, opts.Subprotocols, offer, opts.Header)
	if _, err := nc.Write(req); err != nil {
		return nil, nil, fmt.Errorf("ws: dial %s: writing handshake: %w", u.Redacted(), err)
	}
	br := bufio.NewReaderSize(nc, 4096)
	resp, err = handshake.ReadClientResponse(br)
	if err != nil {
		return nil, nil, fmt.Errorf("ws: dial %s: %w", u.Redacted(), err)
	}
	if err := handshake.CheckResponse(resp, key, opts.Subprotocols); err != nil {
		return nil, resp, fmt.Errorf("ws: dial %s: %w", u.Redacted(), dialError(err))
	}
	cfg := connConfig{
		role:            RoleClient,
		subprotocol:     resp.Header.Get("Sec-WebSocket-Protocol"),
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
	exts, err := handshake.ParseExtensions(resp.Header)
	if err != nil {
		return nil, resp, fmt.Errorf("ws: dial %s: %w", u.Redacted(), err)
	}
	if len(exts) > 0 {
		if !opts.EnableCompression {
			return nil, resp, fmt.Errorf("ws: dial %s: server chose extension %q that was not offered", u.Redacted(), exts[0].Name)
		}
		p, err := handshake.AcceptDeflateResponse(exts, offered)
		if err != nil {
			return nil, resp, fmt.Errorf("ws: dial %s: %w", u.Redacted(), err)
		}
		cfg.params = &DeflateParams{
			ServerNoContextTakeover: p.ServerNoContextTakeover,
			ClientNoContextTakeover: p.ClientNoContextTakeover,
			ServerMaxWindowBits:     p.ServerMaxWindowBits,
			ClientMaxWindowBits:     p.ClientMaxWindowBits,
		}
	}
	if n := br.Buffered(); n > 0 {
		cfg.leftover, _ = br.Peek(n)
	}
	nc.SetDeadline(time.Time{})
	return newConn(nc, cfg), resp, nil
}
