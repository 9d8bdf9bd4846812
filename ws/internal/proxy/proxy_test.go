package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every server here listens on 127.0.0.1 and every dial goes to loopback.

// echoServer accepts connections and echoes what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// checkEcho writes through c and expects the same bytes back.
func checkEcho(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	const msg = "hello through the tunnel"
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != msg {
		t.Fatalf("echo %q", buf)
	}
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// connectProxy is an HTTP CONNECT proxy handler that requires Basic
// credentials when user is set and tunnels only to loopback addresses.
type connectProxy struct {
	user, pass string
	requests   atomic.Int32
	extra      string // sent right after the 200 response, as if from the target
}

func (p *connectProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	if p.user != "" {
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass))
		if r.Header.Get("Proxy-Authorization") != want {
			w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
			http.Error(w, "bad credentials", http.StatusProxyAuthRequired)
			return
		}
	}
	if !isLoopback(r.Host) {
		http.Error(w, "loopback only", http.StatusForbidden)
		return
	}
	target, err := net.Dial("tcp", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		target.Close()
		return
	}
	if _, err := brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n" + p.extra); err != nil || brw.Flush() != nil {
		c.Close()
		target.Close()
		return
	}
	pipe(c, target)
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestHTTPConnect(t *testing.T) {
	target := echoServer(t)
	p := &connectProxy{user: "alice", pass: "s3cr:t@"}
	srv := httptest.NewServer(p)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	t.Run("ok", func(t *testing.T) {
		u := &url.URL{Scheme: "http", Host: host, User: url.UserPassword("alice", "s3cr:t@")}
		c, err := Dial(testCtx(t), u, "tcp", target, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkEcho(t, c)
	})
	t.Run("wrong password", func(t *testing.T) {
		u := &url.URL{Scheme: "http", Host: host, User: url.UserPassword("alice", "wrong")}
		_, err := Dial(testCtx(t), u, "tcp", target, nil, nil)
		var ce *ConnectError
		if !errors.As(err, &ce) || ce.StatusCode != http.StatusProxyAuthRequired {
			t.Fatalf("got %v, want *ConnectError 407", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "407 Proxy Authentication Required") || !strings.Contains(msg, target) || strings.Contains(msg, "wrong") {
			t.Fatalf("unclear or leaking error: %q", msg)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		_, err := Dial(testCtx(t), mustURL(t, srv.URL), "tcp", target, nil, nil)
		var ce *ConnectError
		if !errors.As(err, &ce) || ce.StatusCode != http.StatusProxyAuthRequired {
			t.Fatalf("got %v, want *ConnectError 407", err)
		}
	})
	t.Run("forbidden target", func(t *testing.T) {
		u := &url.URL{Scheme: "http", Host: host, User: url.UserPassword("alice", "s3cr:t@")}
		// Not dialled by the proxy: it refuses non-loopback targets.
		_, err := Dial(testCtx(t), u, "tcp", "192.0.2.1:80", nil, nil)
		var ce *ConnectError
		if !errors.As(err, &ce) || ce.StatusCode != http.StatusForbidden {
			t.Fatalf("got %v, want *ConnectError 403", err)
		}
	})
	t.Run("custom dial func", func(t *testing.T) {
		var dialled atomic.Bool
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialled.Store(true)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		u := &url.URL{Scheme: "http", Host: host, User: url.UserPassword("alice", "s3cr:t@")}
		c, err := Dial(testCtx(t), u, "tcp", target, dial, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if !dialled.Load() {
			t.Fatal("dial func not used")
		}
	})
}

func TestHTTPConnectKeepsEarlyBytes(t *testing.T) {
	target := echoServer(t)
	srv := httptest.NewServer(&connectProxy{extra: "early"})
	defer srv.Close()
	c, err := Dial(testCtx(t), mustURL(t, srv.URL), "tcp", target, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 5)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "early" {
		t.Fatalf("early bytes: %q, %v", buf, err)
	}
	checkEcho(t, c)
}

func TestHTTPSProxy(t *testing.T) {
	target := echoServer(t)
	srv := httptest.NewUnstartedServer(&connectProxy{user: "bob", pass: "pw"})
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused certificate below
	srv.StartTLS()
	defer srv.Close()
	tlsCfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	u := mustURL(t, srv.URL)
	u.User = url.UserPassword("bob", "pw")

	c, err := Dial(testCtx(t), u, "tcp", target, nil, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*tls.Conn); !ok {
		t.Fatalf("tunnel is a %T, want the *tls.Conn to the proxy", c)
	}
	checkEcho(t, c)

	// Without the test CA the proxy's certificate is refused.
	if _, err := Dial(testCtx(t), u, "tcp", target, nil, nil); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("untrusted proxy certificate: %v", err)
	}
}

// socksServer is a minimal SOCKS5 server (RFC 1928) with the
// username/password method (RFC 1929), CONNECT only, loopback targets only.
type socksServer struct {
	user, pass string
	lastAtyp   atomic.Int32 // address type of the last request
	lastHost   atomic.Value // host of the last request
	hang       bool         // accept and never answer
}

func (s *socksServer) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				s.serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func (s *socksServer) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if s.hang {
		io.Copy(io.Discard, c)
		return
	}
	br := bufio.NewReader(c)
	// Greeting: VER NMETHODS METHODS.
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(br, hdr); err != nil || hdr[0] != 5 {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	want := byte(0x00)
	if s.user != "" {
		want = 0x02
	}
	if !strings.Contains(string(methods), string([]byte{want})) {
		c.Write([]byte{5, 0xff})
		return
	}
	c.Write([]byte{5, want})
	if want == 0x02 {
		// RFC 1929: VER ULEN UNAME PLEN PASSWD.
		var b [1]byte
		if _, err := io.ReadFull(br, b[:]); err != nil || b[0] != 1 {
			return
		}
		readStr := func() (string, bool) {
			if _, err := io.ReadFull(br, b[:]); err != nil {
				return "", false
			}
			v := make([]byte, b[0])
			_, err := io.ReadFull(br, v)
			return string(v), err == nil
		}
		user, ok1 := readStr()
		pass, ok2 := readStr()
		if !ok1 || !ok2 || user != s.user || pass != s.pass {
			c.Write([]byte{1, 1})
			return
		}
		c.Write([]byte{1, 0})
	}
	// Request: VER CMD RSV ATYP DST.ADDR DST.PORT.
	req := make([]byte, 4)
	if _, err := io.ReadFull(br, req); err != nil || req[0] != 5 || req[1] != 1 {
		return
	}
	var host string
	switch req[3] {
	case 1, 4:
		ip := make([]byte, 4)
		if req[3] == 4 {
			ip = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, ip); err != nil {
			return
		}
		host = net.IP(ip).String()
	case 3:
		var n [1]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			return
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(br, name); err != nil {
			return
		}
		host = string(name)
	default:
		return
	}
	var port [2]byte
	if _, err := io.ReadFull(br, port[:]); err != nil {
		return
	}
	s.lastAtyp.Store(int32(req[3]))
	s.lastHost.Store(host)
	addr := net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port[:]))))
	fail := func(code byte) { c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0}) }
	if !isLoopback(addr) {
		fail(2) // connection not allowed by ruleset
		return
	}
	target, err := net.Dial("tcp", addr)
	if err != nil {
		fail(5) // connection refused
		return
	}
	bound := target.LocalAddr().(*net.TCPAddr)
	reply := []byte{5, 0, 0, 1}
	reply = append(reply, bound.IP.To4()...)
	reply = binary.BigEndian.AppendUint16(reply, uint16(bound.Port))
	c.Write(reply)
	c.SetDeadline(time.Time{})
	pipe(&readerConn{Conn: c, r: br}, target)
}

// readerConn reads through a bufio.Reader that may hold buffered bytes.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestSOCKS5(t *testing.T) {
	target := echoServer(t)
	_, port, _ := net.SplitHostPort(target)
	s := &socksServer{user: "carol", pass: "pa ss"}
	paddr := s.start(t)

	for _, tc := range []struct {
		scheme, addr string
		atyp         int32
		host         string
	}{
		{"socks5", target, 1, "127.0.0.1"},
		{"socks5h", target, 1, "127.0.0.1"},
		// socks5 resolves the name locally, socks5h lets the proxy do it.
		{"socks5", net.JoinHostPort("localhost", port), 0, ""},
		{"socks5h", net.JoinHostPort("localhost", port), 3, "localhost"},
	} {
		t.Run(tc.scheme+" "+tc.addr, func(t *testing.T) {
			u := &url.URL{Scheme: tc.scheme, Host: paddr, User: url.UserPassword("carol", "pa ss")}
			c, err := Dial(testCtx(t), u, "tcp", tc.addr, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			checkEcho(t, c)
			atyp, host := s.lastAtyp.Load(), s.lastHost.Load().(string)
			if tc.atyp != 0 && (atyp != tc.atyp || host != tc.host) {
				t.Fatalf("proxy saw atyp %d host %q, want %d %q", atyp, host, tc.atyp, tc.host)
			}
			if tc.atyp == 0 && atyp == 3 {
				t.Fatalf("socks5:// sent the name %q; it must resolve locally", host)
			}
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		u := &url.URL{Scheme: "socks5", Host: paddr, User: url.UserPassword("carol", "nope")}
		_, err := Dial(testCtx(t), u, "tcp", target, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "nope") {
			t.Fatalf("got %v, want a clear authentication error without the password", err)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		u := &url.URL{Scheme: "socks5h", Host: paddr}
		if _, err := Dial(testCtx(t), u, "tcp", target, nil, nil); err == nil {
			t.Fatal("accepted without credentials")
		}
	})
	t.Run("refused target", func(t *testing.T) {
		u := &url.URL{Scheme: "socks5h", Host: paddr, User: url.UserPassword("carol", "pa ss")}
		// Not dialled by the proxy: it refuses non-loopback targets.
		if _, err := Dial(testCtx(t), u, "tcp", "192.0.2.1:80", nil, nil); err == nil {
			t.Fatal("proxy refusal not reported")
		}
	})

	open := &socksServer{}
	oaddr := open.start(t)
	t.Run("no auth proxy", func(t *testing.T) {
		c, err := Dial(testCtx(t), mustURL(t, "socks5h://"+oaddr), "tcp", target, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkEcho(t, c)
	})
}

// hangingServer accepts connections and never answers.
func hangingServer(t *testing.T) string {
	s := &socksServer{hang: true}
	return s.start(t)
}

func TestContextCancelAbortsHandshake(t *testing.T) {
	addr := hangingServer(t)
	for _, scheme := range []string{"http", "https", "socks5", "socks5h"} {
		t.Run(scheme, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			_, err := Dial(ctx, mustURL(t, scheme+"://u:p@"+addr), "tcp", "127.0.0.1:9", nil, nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v", d)
			}
		})
		t.Run(scheme+" deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := Dial(ctx, mustURL(t, scheme+"://"+addr), "tcp", "127.0.0.1:9", nil, nil)
			if err == nil {
				t.Fatal("no error")
			}
			var ne net.Error
			if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
				t.Fatalf("got %v, want a timeout", err)
			}
		})
	}
}

func TestDialErrors(t *testing.T) {
	target := echoServer(t)
	for _, tc := range []struct {
		proxy, network, addr, err string
	}{
		{"ftp://127.0.0.1:21", "tcp", target, "unsupported proxy scheme"},
		{"http://", "tcp", target, "no host"},
		{"http://127.0.0.1:1", "udp", target, "network"},
		{"http://127.0.0.1:1", "tcp", "no-port", "bad target address"},
	} {
		_, err := Dial(testCtx(t), mustURL(t, tc.proxy), tc.network, tc.addr, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Dial via %s (%s %s): %v, want %q", tc.proxy, tc.network, tc.addr, err, tc.err)
		}
	}
	// A nil proxy URL dials directly.
	c, err := Dial(testCtx(t), nil, "tcp", target, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkEcho(t, c)
}

func TestFromEnvironment(t *testing.T) {
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "REQUEST_METHOD", "ALL_PROXY", "all_proxy"} {
		t.Setenv(k, "")
	}
	// FromEnvironment only computes a URL: the example.* targets are never
	// contacted.
	check := func(target, want string) {
		t.Helper()
		got, err := FromEnvironment(mustURL(t, target))
		if err != nil {
			t.Fatalf("FromEnvironment(%s): %v", target, err)
		}
		gs := ""
		if got != nil {
			gs = got.String()
		}
		if gs != want {
			t.Fatalf("FromEnvironment(%s) = %q, want %q", target, gs, want)
		}
	}

	check("ws://bus.example:8181/core", "")
	t.Setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
	check("ws://bus.example:8181/core", "") // ALL_PROXY is not honoured

	t.Setenv("HTTP_PROXY", "http://user:pw@127.0.0.1:3128")
	t.Setenv("HTTPS_PROXY", "socks5h://127.0.0.1:1080")
	check("ws://bus.example:8181/core", "http://user:pw@127.0.0.1:3128")
	check("wss://bus.example/core", "socks5h://127.0.0.1:1080")
	check("http://bus.example/", "http://user:pw@127.0.0.1:3128")

	// Loopback targets are never proxied, as in net/http.
	check("ws://127.0.0.1:8181/core", "")
	check("ws://localhost:8181/core", "")

	// NO_PROXY bypass: exact host, domain suffix, port-specific, "*".
	t.Setenv("NO_PROXY", "bus.example, .internal.example, other.example:9000")
	check("ws://bus.example:8181/core", "")
	check("wss://a.internal.example/", "")
	check("ws://other.example:9000/", "")
	check("ws://other.example:9001/", "http://user:pw@127.0.0.1:3128")
	check("ws://notbus.example/", "http://user:pw@127.0.0.1:3128")
	t.Setenv("NO_PROXY", "*")
	check("wss://anything.example/", "")

	// Lower case variables, read at each call; no scheme means http://.
	t.Setenv("NO_PROXY", "")
	t.Setenv("HTTP_PROXY", "")
	t.Setenv("http_proxy", "127.0.0.1:8080")
	check("ws://bus.example/", "http://127.0.0.1:8080")

	if _, err := FromEnvironment(mustURL(t, "ftp://bus.example/")); err == nil {
		t.Fatal("ftp:// accepted")
	}
	// As in net/http, HTTP_PROXY is refused in a CGI environment...
	t.Setenv("REQUEST_METHOD", "GET")
	if _, err := FromEnvironment(mustURL(t, "ws://bus.example/")); err == nil {
		t.Fatal("HTTP_PROXY used under CGI")
	}
	t.Setenv("REQUEST_METHOD", "")
	// ...and an unparsable value is ignored.
	t.Setenv("http_proxy", "http://127.0.0.1\x7f")
	check("ws://bus.example/", "")
}

// TestFromEnvironmentDial ties the two: the proxy from the environment is
// the one Dial uses.
func TestFromEnvironmentDial(t *testing.T) {
	target := echoServer(t)
	p := &connectProxy{}
	srv := httptest.NewServer(p)
	defer srv.Close()
	t.Setenv("HTTP_PROXY", srv.URL)
	t.Setenv("NO_PROXY", "")
	pu, err := FromEnvironment(mustURL(t, "ws://bus.example/core"))
	if err != nil || pu == nil {
		t.Fatalf("FromEnvironment: %v, %v", pu, err)
	}
	c, err := Dial(testCtx(t), pu, "tcp", target, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkEcho(t, c)
	if p.requests.Load() != 1 {
		t.Fatalf("proxy saw %d requests", p.requests.Load())
	}
}
