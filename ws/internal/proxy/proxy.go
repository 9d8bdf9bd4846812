// Package proxy connects to a TCP address through a proxy: an HTTP proxy
// (CONNECT, RFC 9110 §9.3.6), an HTTP proxy reached over TLS, or a SOCKS5
// proxy (RFC 1928, with the username/password method of RFC 1929). It also
// picks the proxy for a ws:// or wss:// URL from the environment the way
// net/http does.
package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
	xproxy "golang.org/x/net/proxy"
)

// DialFunc dials a network address, like (*net.Dialer).DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// maxConnectResponse bounds the bytes of a CONNECT response's status line
// and header.
const maxConnectResponse = 64 << 10

// ConnectError is an HTTP proxy's refusal of a CONNECT request (any status
// but 2xx), for example 407 Proxy Authentication Required when the
// credentials in the proxy URL are missing or wrong.
type ConnectError struct {
	Proxy      string // the proxy URL, password redacted
	Addr       string // the address the tunnel was asked for
	StatusCode int
	Status     string // e.g. "407 Proxy Authentication Required"
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("proxy %s refused CONNECT to %s: %s", e.Proxy, e.Addr, e.Status)
}

// Dial connects to addr through the proxy at proxyURL and returns the
// tunnelled connection, over which the caller speaks to addr (and starts
// TLS itself for wss://). network must be "tcp", "tcp4" or "tcp6". dial
// opens the TCP connection to the proxy (nil: a zero net.Dialer).
// tlsConfig is used, cloned, for https:// proxies; its ServerName defaults
// to the proxy's host name. A nil proxyURL dials addr directly.
//
// Schemes:
//   - http://[user:password@]host[:port] (port 80): CONNECT, with
//     Proxy-Authorization: Basic when the URL has a user;
//   - https://... (port 443): the same inside TLS to the proxy;
//   - socks5://[user:password@]host[:port] (port 1080): SOCKS5, the target
//     host name resolved locally (as curl does);
//   - socks5h://...: SOCKS5, the host name resolved by the proxy.
//
// ctx bounds the whole dial: its deadline applies to the proxy handshake and
// its cancellation aborts it.
func Dial(ctx context.Context, proxyURL *url.URL, network, addr string, dial DialFunc, tlsConfig *tls.Config) (net.Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("proxy: network %q not supported", network)
	}
	if proxyURL == nil {
		return dial(ctx, network, addr)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("proxy: bad target address %q: %w", addr, err)
	}
	switch strings.ToLower(proxyURL.Scheme) {
	case "http":
		return dialConnect(ctx, proxyURL, network, addr, dial, nil)
	case "https":
		return dialConnect(ctx, proxyURL, network, addr, dial, tlsConfig)
	case "socks5", "socks5h":
		return dialSOCKS5(ctx, proxyURL, network, addr, dial)
	default:
		return nil, fmt.Errorf("proxy: unsupported proxy scheme %q in %s", proxyURL.Scheme, proxyURL.Redacted())
	}
}

// proxyAddr returns the proxy's host:port, with the scheme's default port.
func proxyAddr(u *url.URL, defaultPort string) (string, error) {
	host := u.Hostname()
	if host == "" {
		return "", fmt.Errorf("proxy: no host in proxy URL %s", u.Redacted())
	}
	port := u.Port()
	if port == "" {
		port = defaultPort
	}
	return net.JoinHostPort(host, port), nil
}

// aLongTimeAgo is a deadline in the past that makes blocked I/O return.
var aLongTimeAgo = time.Unix(1, 0)

// withContext runs the handshake fn on c so that ctx's deadline bounds it
// and ctx's cancellation interrupts it. On failure it closes c and returns
// ctx's error when ctx ended.
func withContext(ctx context.Context, c net.Conn, fn func() error) error {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	err := fn()
	if !stop() { // ctx ended: the deadline may have been forced
		c.Close()
		return ctx.Err()
	}
	if err != nil {
		c.Close()
		return err
	}
	c.SetDeadline(time.Time{})
	return nil
}

func dialConnect(ctx context.Context, u *url.URL, network, addr string, dial DialFunc, tlsConfig *tls.Config) (net.Conn, error) {
	secure := strings.EqualFold(u.Scheme, "https")
	defPort := "80"
	if secure {
		defPort = "443"
	}
	paddr, err := proxyAddr(u, defPort)
	if err != nil {
		return nil, err
	}
	c, err := dial(ctx, "tcp", paddr)
	if err != nil {
		return nil, fmt.Errorf("proxy: dial %s: %w", u.Redacted(), err)
	}
	var conn net.Conn = c
	var br *bufio.Reader
	err = withContext(ctx, c, func() error {
		if secure {
			cfg := &tls.Config{}
			if tlsConfig != nil {
				cfg = tlsConfig.Clone()
			}
			if cfg.ServerName == "" {
				cfg.ServerName = u.Hostname()
			}
			cfg.NextProtos = nil // CONNECT is an HTTP/1.1 request
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				return fmt.Errorf("proxy: TLS handshake with %s: %w", u.Redacted(), err)
			}
			conn = tc
		}
		if _, err := conn.Write(connectRequest(u, addr)); err != nil {
			return fmt.Errorf("proxy: CONNECT via %s: %w", u.Redacted(), err)
		}
		br = bufio.NewReader(conn)
		resp, err := readConnectResponse(br)
		if err != nil {
			return fmt.Errorf("proxy: CONNECT via %s: %w", u.Redacted(), err)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return &ConnectError{Proxy: u.Redacted(), Addr: addr, StatusCode: resp.StatusCode, Status: resp.Status}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("proxy: CONNECT via %s: %w", u.Redacted(), err)
		}
		return nil, err
	}
	if br.Buffered() > 0 {
		// The proxy sent tunnel bytes with its response: keep them.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// connectRequest builds the CONNECT request for addr.
func connectRequest(u *url.URL, addr string) []byte {
	b := make([]byte, 0, 128)
	b = append(b, "CONNECT "...)
	b = append(b, addr...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, addr...)
	b = append(b, "\r\n"...)
	if u.User != nil && u.User.Username() != "" {
		pass, _ := u.User.Password()
		b = append(b, "Proxy-Authorization: Basic "...)
		b = append(b, base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// readConnectResponse reads the proxy's response to CONNECT: status line and
// header, bounded, and not the tunnel's bytes behind them (a 2xx response
// to CONNECT has no body, RFC 9110 §9.3.6). A refusal's body is not read.
func readConnectResponse(br *bufio.Reader) (*http.Response, error) {
	var block []byte
	lineStart := 0
	for {
		frag, err := br.ReadSlice('\n')
		if len(block)+len(frag) > maxConnectResponse {
			return nil, errors.New("response header too large")
		}
		block = append(block, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if line := string(block[lineStart:]); lineStart > 0 && (line == "\r\n" || line == "\n") {
			break
		}
		lineStart = len(block)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(block))), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, fmt.Errorf("malformed response: %w", err)
	}
	return resp, nil
}

// bufferedConn is a net.Conn whose first reads come from a bufio.Reader.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// ctxDialer adapts a DialFunc to x/net/proxy's Dialer and ContextDialer.
type ctxDialer DialFunc

func (d ctxDialer) Dial(network, addr string) (net.Conn, error) {
	return d(context.Background(), network, addr)
}

func (d ctxDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d(ctx, network, addr)
}

func dialSOCKS5(ctx context.Context, u *url.URL, network, addr string, dial DialFunc) (net.Conn, error) {
	paddr, err := proxyAddr(u, "1080")
	if err != nil {
		return nil, err
	}
	var auth *xproxy.Auth
	if u.User != nil && u.User.Username() != "" {
		pass, _ := u.User.Password()
		auth = &xproxy.Auth{User: u.User.Username(), Password: pass}
	}
	d, err := xproxy.SOCKS5("tcp", paddr, auth, ctxDialer(dial))
	if err != nil {
		return nil, fmt.Errorf("proxy: %s: %w", u.Redacted(), err)
	}
	if strings.EqualFold(u.Scheme, "socks5") {
		if addr, err = resolveLocally(ctx, network, addr); err != nil {
			return nil, fmt.Errorf("proxy: %s: %w", u.Redacted(), err)
		}
	}
	// The SOCKS dialer honours ctx's deadline and cancellation during its
	// handshake.
	c, err := d.(xproxy.ContextDialer).DialContext(ctx, network, addr)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			// The SOCKS dialer reports the I/O error its forced deadline
			// caused; report why instead.
			return nil, fmt.Errorf("proxy: %s: %w", u.Redacted(), ctxErr)
		}
		return nil, fmt.Errorf("proxy: %s: %w", u.Redacted(), err)
	}
	return c, nil
}

// resolveLocally replaces the host name in addr by one of its addresses (of
// the family network asks for), for socks5:// proxies.
func resolveLocally(ctx context.Context, network, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if net.ParseIP(host) != nil {
		return addr, nil
	}
	ipNet := "ip"
	switch network {
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	}
	ips, err := net.DefaultResolver.LookupIP(ctx, ipNet, host)
	if err != nil {
		return "", err
	}
	// Prefer IPv4, as most SOCKS proxies reach it.
	slices.SortStableFunc(ips, func(a, b net.IP) int {
		a4, b4 := a.To4() != nil, b.To4() != nil
		switch {
		case a4 == b4:
			return 0
		case a4:
			return -1
		}
		return 1
	})
	return net.JoinHostPort(ips[0].String(), port), nil
}

// FromEnvironment returns the proxy for a connection to target, or nil for a
// direct connection, from the HTTP_PROXY, HTTPS_PROXY and NO_PROXY
// environment variables (or their lower-case forms), read at each call,
// with the rules of net/http's ProxyFromEnvironment: ws:// (and http://)
// URLs use HTTP_PROXY, wss:// (and https://) URLs HTTPS_PROXY; NO_PROXY
// lists hosts, domains (".example.com" or "example.com" for it and its
// subdomains), IPs and CIDRs to reach directly, "*" for all; localhost and
// loopback addresses are always reached directly; a proxy value without a
// scheme means http://.
//
// ALL_PROXY is deliberately not honoured: net/http does not honour it
// either, so a Go program's HTTP and WebSocket traffic take the same way,
// and a SOCKS proxy meant for other tools does not silently capture the
// bus's connections. A SOCKS proxy can still be given as
// HTTP_PROXY=socks5://host:port, or per dial.
func FromEnvironment(target *url.URL) (*url.URL, error) {
	u := *target
	switch strings.ToLower(u.Scheme) {
	case "ws", "http":
		u.Scheme = "http"
	case "wss", "https":
		u.Scheme = "https"
	default:
		return nil, fmt.Errorf("proxy: unsupported URL scheme %q", target.Scheme)
	}
	return httpproxy.FromEnvironment().ProxyFunc()(&u)
}
