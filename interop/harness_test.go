package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// The peers (py/*.py, node/ws_peer.js) and the Go side share one protocol,
// described in py/peerlib.py: echo servers with the commands "cmd:stream"
// (send the last message back fragmented) and "cmd:close CODE REASON", and
// clients that run a fixed scenario on the connections /a and /b.

const (
	peerStartTimeout = 20 * time.Second
	scenarioTimeout  = 45 * time.Second
)

// ---- tools ----

// pythonBin is Debian's Python, which has the python3-* packages (a pyenv
// python3 earlier on PATH does not). INTEROP_PYTHON overrides it.
func pythonBin() string {
	if p := os.Getenv("INTEROP_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// requirePython fails the test unless Debian's Python can import module.
func requirePython(t *testing.T, module, debPackage string) {
	t.Helper()
	py := pythonBin()
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s not found: install the test dependencies with `make deps` (apt-get install python3 %s)", py, debPackage)
	}
	out, err := exec.Command(py, "-c", "import "+module).CombinedOutput()
	if err != nil {
		t.Fatalf("Python module %q is missing (%v: %s): install it with `make deps` (apt-get install %s)",
			module, err, bytes.TrimSpace(out), debPackage)
	}
}

// requireNode fails the test unless node and the ws package of interop/node
// are installed.
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: install Node.js (apt-get install nodejs npm), then `make deps`")
	}
	if _, err := os.Stat(filepath.Join("node", "node_modules", "ws", "package.json")); err != nil {
		t.Fatalf("Node package ws is not installed in interop/node: run `make deps` (or `cd interop/node && npm ci`)")
	}
	return node
}

// ---- peer processes ----

// peer is a third-party WebSocket peer running as a subprocess. Its stdout
// lines are the protocol of peerlib.py: READY, OK, FAIL, PASS, CLOSED.
type peer struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{} // closed when the process has exited
	err   error         // exit status, valid after done

	mu  sync.Mutex
	log bytes.Buffer // stdout and stderr, for failure reports
}

func startPeer(t *testing.T, name string, argv ...string) *peer {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = peerEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &peer{t: t, name: name, cmd: cmd, lines: make(chan string, 100), done: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logWriter{p}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s (%s): %v", name, strings.Join(argv, " "), err)
	}
	var reading sync.WaitGroup
	reading.Add(1)
	go func() {
		defer reading.Done()
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			p.lines <- line
		}
	}()
	go func() {
		reading.Wait()
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.output())
		}
	})
	return p
}

// kill ends the peer's process group (the peer and anything it started).
func (p *peer) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.t.Errorf("%s did not exit after SIGKILL", p.name)
	}
}

func (p *peer) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

type logWriter struct{ p *peer }

func (w logWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.log.Write(b)
}

// peerEnv is the environment of the peers: no proxies (websocket-client
// honours http_proxy), unbuffered Python without .pyc files in the tree.
func peerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "NO_PROXY=*", "no_proxy=*")
}

// next returns the next stdout line starting with prefix, skipping others.
func (p *peer) next(prefix string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				return "", fmt.Errorf("%s exited (%v) before printing %q", p.name, p.err, prefix)
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return strings.TrimSpace(rest), nil
			}
		case <-deadline:
			return "", fmt.Errorf("%s printed no %q line within %v", p.name, prefix, timeout)
		}
	}
}

// waitReady waits for "READY <port>" and returns the server's base URL.
func (p *peer) waitReady() string {
	p.t.Helper()
	port, err := p.next("READY ", peerStartTimeout)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		p.t.Fatalf("%s: bad READY line %q", p.name, port)
	}
	return "ws://127.0.0.1:" + port + "/"
}

// peerClose is a CLOSED line of a peer server: what it saw of a connection's
// end.
type peerClose struct {
	Path   string `json:"path"`
	Code   int    `json:"code"`
	Reason string `json:"reason"`
	Clean  *bool  `json:"clean"`
	Pongs  *int   `json:"pongs"` // pongs to the server's ping
}

// closedEvents collects n CLOSED lines, by path.
func (p *peer) closedEvents(n int) map[string]peerClose {
	p.t.Helper()
	m := map[string]peerClose{}
	for len(m) < n {
		line, err := p.next("CLOSED ", 10*time.Second)
		if err != nil {
			p.t.Fatal(err)
		}
		var ev peerClose
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			p.t.Fatalf("%s: bad CLOSED line %q: %v", p.name, line, err)
		}
		ev.Path = "/" + strings.TrimPrefix(ev.Path, "/")
		m[ev.Path] = ev
	}
	return m
}

// waitPass waits for a client peer to finish its scenario: it must print
// PASS and exit with status 0.
func (p *peer) waitPass(timeout time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not finish within %v", p.name, timeout)
	}
	out := p.output()
	if p.err != nil || !strings.Contains(out, "PASS") {
		p.t.Fatalf("%s failed (%v)", p.name, p.err)
	}
}

// ---- wire recorder ----

// frameInfo is one frame seen on the wire.
type frameInfo struct {
	Fin, Rsv1 bool
	Op        ws.Opcode
	Len       int64
	Payload   []byte // control frames only, unmasked
}

// wireLog parses one direction of a connection's bytes, after the HTTP
// handshake, into frames. It is an independent, minimal RFC 6455 §5.2 frame
// parser: it trusts the stream and only records frame headers.
type wireLog struct {
	mu        sync.Mutex
	http      []byte // the handshake head, until CRLFCRLF
	inFrames  bool
	hdr       []byte
	cur       frameInfo
	mask      [4]byte
	masked    bool
	remaining int64
	pos       int
	frames    []frameInfo
}

func (l *wireLog) feed(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(b) > 0 {
		if !l.inFrames {
			l.http = append(l.http, b...)
			i := bytes.Index(l.http, []byte("\r\n\r\n"))
			if i < 0 {
				return
			}
			b = l.http[i+4:]
			l.http = l.http[:i+4]
			l.inFrames = true
			continue
		}
		if l.remaining > 0 {
			k := int(min(l.remaining, int64(len(b))))
			if l.cur.Op.IsControl() {
				for _, c := range b[:k] {
					if l.masked {
						c ^= l.mask[l.pos&3]
					}
					l.cur.Payload = append(l.cur.Payload, c)
					l.pos++
				}
			}
			l.remaining -= int64(k)
			b = b[k:]
			if l.remaining == 0 {
				l.frames = append(l.frames, l.cur)
			}
			continue
		}
		l.hdr = append(l.hdr, b[0])
		b = b[1:]
		if len(l.hdr) < 2 {
			continue
		}
		need := 2
		switch l.hdr[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if l.hdr[1]&0x80 != 0 {
			need += 4
		}
		if len(l.hdr) < need {
			continue
		}
		h := l.hdr
		l.cur = frameInfo{Fin: h[0]&0x80 != 0, Rsv1: h[0]&0x40 != 0, Op: ws.Opcode(h[0] & 0x0f)}
		n, o := int64(h[1]&0x7f), 2
		switch n {
		case 126:
			n, o = int64(h[2])<<8|int64(h[3]), 4
		case 127:
			n = 0
			for _, c := range h[2:10] {
				n = n<<8 | int64(c)
			}
			o = 10
		}
		l.cur.Len = n
		l.masked = h[1]&0x80 != 0
		if l.masked {
			copy(l.mask[:], h[o:o+4])
		}
		l.pos = 0
		l.hdr = l.hdr[:0]
		l.remaining = n
		if n == 0 {
			l.frames = append(l.frames, l.cur)
		}
	}
}

func (l *wireLog) snapshot() []frameInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]frameInfo(nil), l.frames...)
}

// count returns the number of frames with opcode op.
func (l *wireLog) count(op ws.Opcode) int {
	n := 0
	for _, f := range l.snapshot() {
		if f.Op == op {
			n++
		}
	}
	return n
}

// wireStats summarises frames.
type wireStats struct {
	Frames, Continuations, Compressed int
	Close                             *frameInfo // the close frame, if any
}

func (l *wireLog) stats() wireStats {
	var s wireStats
	for _, f := range l.snapshot() {
		s.Frames++
		if f.Op == ws.OpContinuation {
			s.Continuations++
		}
		if f.Rsv1 {
			s.Compressed++
		}
		if f.Op == ws.OpClose && s.Close == nil {
			s.Close = &f
		}
	}
	return s
}

// closeCode decodes a close frame's payload.
func closeCode(f *frameInfo) (int, string) {
	if f == nil {
		return -1, ""
	}
	if len(f.Payload) < 2 {
		return 1005, ""
	}
	return int(f.Payload[0])<<8 | int(f.Payload[1]), string(f.Payload[2:])
}

// wireConn records both directions of a net.Conn.
type wireConn struct {
	net.Conn
	in, out wireLog
}

func (c *wireConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.feed(b[:n])
	return n, err
}

func (c *wireConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.feed(b[:n])
	return n, err
}

type wireListener struct{ net.Listener }

func (l wireListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &wireConn{Conn: c}, nil
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ---- payloads (the Go side's; the peers make their own) ----

const textMsg = "hello, ✓ wörld 😀"

func binaryMsg() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// fragText is ~100 KB of 1- to 4-byte UTF-8 sequences: fragments of it split
// characters.
func fragText() string { return strings.Repeat("ovbus ✓ fragment é 日本語 😀 ", 3000) }

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// largeBinary is half incompressible, half compressible.
func largeBinary(n int) []byte {
	b := randBytes(11, n/2)
	pat := []byte("ovbus compressible payload 0123456789 ")
	for len(b) < n {
		b = append(b, pat[:min(len(pat), n-len(b))]...)
	}
	return b
}

// streamText is ~200 KiB of random letters, some accented: it compresses
// only about 2:1, so that peers which fragment the compressed form of a
// message still send several frames.
func streamText() string {
	alphabet := []rune("abcdefghijklmnopqrstuvwxyz üñîçødé日本✓")
	r := rand.New(rand.NewPCG(3, 3))
	var b strings.Builder
	for b.Len() < 200<<10 {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// ---- the Go echo server ----

// connResult is what the Go echo server saw of one connection.
type connResult struct {
	Path        string
	Request     *http.Request
	Deflate     *ws.DeflateParams
	Subprotocol string
	Wire        *wireConn
	ReadErr     error // the error that ended the read loop
	ServerClose bool  // the server closed, on "cmd:close"
	CloseErr    error // Close's result when ServerClose
	Messages    int
}

type echoServer struct {
	URL     string
	opts    *ws.AcceptOptions
	results chan *connResult
}

// startEchoServer runs the Go echo server (the peers' protocol) on
// 127.0.0.1 with an OS-chosen port, upgrading with Accept in a net/http
// server. Its write buffer is 16 KiB, so messages streamed with Writer go out
// in 16 KiB fragments.
func startEchoServer(t *testing.T, opts ws.AcceptOptions) *echoServer {
	t.Helper()
	s, ln := newEchoServer(t, opts)
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(wireListener{ln})
	t.Cleanup(func() { srv.Close() })
	return s
}

// startRawEchoServer is startEchoServer with its own accept loop and
// UpgradeConn instead of net/http.
func startRawEchoServer(t *testing.T, opts ws.AcceptOptions) *echoServer {
	t.Helper()
	s, ln := newEchoServer(t, opts)
	var conns sync.WaitGroup
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				wc := &wireConn{Conn: nc}
				c, r, err := ws.UpgradeConn(wc, s.opts)
				if err != nil {
					path := ""
					if r != nil {
						path = r.URL.Path
					}
					s.report(&connResult{Path: path, Request: r, ReadErr: err})
					return
				}
				s.serve(c, r)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
	})
	return s
}

func newEchoServer(t *testing.T, opts ws.AcceptOptions) (*echoServer, net.Listener) {
	t.Helper()
	if opts.CheckOrigin == nil {
		opts.CheckOrigin = func(*http.Request) bool { return true }
	}
	if opts.WriteBufferSize == 0 {
		opts.WriteBufferSize = 16 << 10
	}
	if opts.CloseTimeout == 0 {
		opts.CloseTimeout = 5 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &echoServer{URL: "ws://" + ln.Addr().String() + "/", opts: &opts, results: make(chan *connResult, 16)}, ln
}

func (s *echoServer) handle(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") == "" {
		http.NotFound(w, r)
		return
	}
	c, err := ws.Accept(w, r, s.opts)
	if err != nil {
		s.report(&connResult{Path: r.URL.Path, Request: r, ReadErr: err})
		return
	}
	s.serve(c, r)
}

func (s *echoServer) serve(c *ws.Conn, r *http.Request) {
	defer c.CloseNow()
	res := &connResult{Path: r.URL.Path, Request: r, Deflate: c.Deflate(), Subprotocol: c.Subprotocol()}
	res.Wire, _ = c.NetConn().(*wireConn)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	res.ReadErr = serveEcho(ctx, c, res)
	s.report(res)
}

// report hands a connection's result to collect; it never blocks a handler
// (results beyond the buffer are dropped: collect then times out).
func (s *echoServer) report(res *connResult) {
	select {
	case s.results <- res:
	default:
	}
}

// serveEcho echoes messages and runs the commands until the connection ends.
func serveEcho(ctx context.Context, c *ws.Conn, res *connResult) error {
	var buf, last []byte
	lastOp := ws.TextMessage
	for {
		op, msg, err := c.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			return err
		}
		buf = msg
		res.Messages++
		if op == ws.TextMessage && bytes.HasPrefix(msg, []byte("cmd:")) {
			cmd := string(msg)
			switch {
			case cmd == "cmd:stream":
				w, err := c.Writer(ctx, lastOp)
				if err != nil {
					return err
				}
				// Written in odd-sized pieces; the Writer frames them at
				// its buffer size.
				for p := last; len(p) > 0; {
					k := min(len(p), 5000)
					if _, err := w.Write(p[:k]); err != nil {
						w.Close()
						return err
					}
					p = p[k:]
				}
				if err := w.Close(); err != nil {
					return err
				}
			case strings.HasPrefix(cmd, "cmd:close "):
				code, reason := parseCloseCmd(cmd)
				res.ServerClose = true
				res.CloseErr = c.Close(ws.StatusCode(code), reason)
				return nil
			default:
				return fmt.Errorf("unknown command %q", cmd)
			}
			continue
		}
		last, lastOp = append(last[:0], msg...), op
		if err := c.WriteMessage(ctx, op, msg); err != nil {
			return err
		}
	}
}

func parseCloseCmd(cmd string) (int, string) {
	f := strings.SplitN(cmd, " ", 3)
	code, _ := strconv.Atoi(f[1])
	reason := ""
	if len(f) > 2 {
		reason = f[2]
	}
	return code, reason
}

// collect waits for the results of n connections, by path.
func (s *echoServer) collect(t *testing.T, n int) map[string]*connResult {
	t.Helper()
	m := map[string]*connResult{}
	timeout := time.After(15 * time.Second)
	for len(m) < n {
		select {
		case r := <-s.results:
			m[r.Path] = r
		case <-timeout:
			t.Fatalf("the Go server saw %d of %d connections end", len(m), n)
		}
	}
	return m
}

// serverExpect is what the Go server must have seen of a peer client's
// scenario (connections /a and /b).
type serverExpect struct {
	Deflate        bool   // permessage-deflate negotiated
	PeerCompresses bool   // the peer sends compressed frames
	PeerFragments  bool   // the peer sends fragmented messages
	CloseReason    string // the peer's close reason on /a (code 4001)
	EmptyClose     bool   // the peer also closes /c with an empty close frame
}

// checkServerScenario checks the Go server's side of a peer client's run
// of the scenario.
func checkServerScenario(t *testing.T, res map[string]*connResult, want serverExpect) {
	t.Helper()
	a, b := res["/a"], res["/b"]
	if a == nil || b == nil {
		t.Fatalf("connections seen by the Go server: %v, want /a and /b", keys(res))
	}
	for _, r := range res {
		if r.Wire == nil {
			t.Fatalf("%s: the handshake failed: %v", r.Path, r.ReadErr)
		}
	}
	for _, r := range []*connResult{a, b} {
		if (r.Deflate != nil) != want.Deflate {
			t.Errorf("%s: Deflate() = %+v, want negotiated=%v (offer %q)", r.Path, r.Deflate, want.Deflate,
				r.Request.Header.Get("Sec-WebSocket-Extensions"))
		}
	}
	var ce *ws.CloseError
	if !errors.As(a.ReadErr, &ce) || ce.Code != 4001 || ce.Reason != want.CloseReason {
		t.Errorf("/a: read loop ended with %v, want the peer's close 4001 %q", a.ReadErr, want.CloseReason)
	}
	in, out := a.Wire.in.stats(), a.Wire.out.stats()
	if code, _ := closeCode(out.Close); code != 4001 {
		t.Errorf("/a: the Go server echoed close code %d, want 4001", code)
	}
	if want.PeerFragments && in.Continuations < 2 {
		t.Errorf("/a: the peer sent %d continuation frames, want fragmented messages", in.Continuations)
	}
	if out.Continuations < 2 {
		t.Errorf("/a: the Go server sent %d continuation frames for cmd:stream, want several", out.Continuations)
	}
	if want.Deflate {
		if want.PeerCompresses && in.Compressed == 0 {
			t.Errorf("/a: no compressed frame from the peer")
		}
		if out.Compressed == 0 {
			t.Errorf("/a: no compressed frame from the Go server")
		}
	} else if in.Compressed+out.Compressed > 0 {
		t.Errorf("/a: compressed frames without deflate: in %d out %d", in.Compressed, out.Compressed)
	}
	if n := a.Wire.out.count(ws.OpPong); n != 1 {
		t.Errorf("/a: the Go server sent %d pongs, want 1 (the answer to the peer's ping)", n)
	}
	if !b.ServerClose || b.CloseErr != nil {
		t.Errorf("/b: server close: done=%v err=%v", b.ServerClose, b.CloseErr)
	}
	bin := b.Wire.in.stats()
	if bin.Close == nil {
		t.Errorf("/b: the peer did not answer the server's close frame")
	}
	if want.EmptyClose {
		c := res["/c"]
		if c == nil {
			t.Fatalf("no connection /c")
		}
		if !errors.As(c.ReadErr, &ce) || ce.Code != ws.StatusNoStatusRcvd {
			t.Errorf("/c: read loop ended with %v, want a close without status (1005)", c.ReadErr)
		}
		if f := c.Wire.out.stats().Close; f == nil || len(f.Payload) != 0 {
			t.Errorf("/c: the Go server answered an empty close with %+v, want an empty close frame", f)
		}
	}
	t.Logf("Go server: deflate %+v; /a frames in %d (%d continuation, %d compressed), out %d (%d continuation, %d compressed)",
		a.Deflate, in.Frames, in.Continuations, in.Compressed, out.Frames, out.Continuations, out.Compressed)
}

func keys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}

// ---- the Go client scenario ----

// clientExpect describes a peer server for runGoClient.
type clientExpect struct {
	Deflate        bool // the Go client offers deflate and the peer accepts it
	PeerCompresses bool // the peer compresses the messages it sends
	PeerFragments  bool // the peer sends cmd:stream's answer fragmented
	LargeSize      int  // size of the large message (default 4 MiB)
	EmptyClose     bool // also close /c with an empty close frame
}

func dialWire(t *testing.T, ctx context.Context, url string, deflate bool) (*ws.Conn, *wireConn) {
	t.Helper()
	var wc *wireConn
	var d net.Dialer
	c, resp, err := ws.Dial(ctx, url, &ws.DialOptions{
		EnableCompression: deflate,
		Proxy:             ws.NoProxy,
		WriteBufferSize:   16 << 10,
		CloseTimeout:      5 * time.Second,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			wc = &wireConn{Conn: nc}
			return wc, nil
		},
	})
	if err != nil {
		t.Fatalf("Dial %s: %v", url, err)
	}
	if (c.Deflate() != nil) != deflate {
		t.Fatalf("Dial %s: Deflate() = %+v, want negotiated=%v (response %q)", url, c.Deflate(), deflate,
			resp.Header.Get("Sec-WebSocket-Extensions"))
	}
	return c, wc
}

func expectEcho(t *testing.T, ctx context.Context, c *ws.Conn, what string, op ws.Opcode, want []byte) {
	t.Helper()
	gop, got, err := c.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("%s: reading the echo: %v", what, err)
	}
	if gop != op || !bytes.Equal(got, want) {
		t.Fatalf("%s: echo is %v of %d bytes, want %v of %d bytes (equal=%v)", what, gop, len(got), op, len(want), bytes.Equal(got, want))
	}
}

// writeStreamed sends p as one message through Writer, in pieces.
func writeStreamed(t *testing.T, ctx context.Context, c *ws.Conn, op ws.Opcode, p []byte, piece int) {
	t.Helper()
	w, err := c.Writer(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	for len(p) > 0 {
		k := min(piece, len(p))
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// runGoClient runs the scenario of peerlib.py with the Go client against a
// peer server at base (a URL ending in /), then checks what both sides saw.
func runGoClient(t *testing.T, p *peer, base string, want clientExpect) {
	t.Helper()
	if want.LargeSize == 0 {
		want.LargeSize = 4 << 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()

	c, wc := dialWire(t, ctx, base+"a", want.Deflate)
	defer c.CloseNow()
	send := func(what string, op ws.Opcode, b []byte) {
		t.Helper()
		if err := c.WriteMessage(ctx, op, b); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		expectEcho(t, ctx, c, what, op, b)
	}
	send("text", ws.TextMessage, []byte(textMsg))
	send("binary", ws.BinaryMessage, binaryMsg())

	// Ping: the pong is read by the next ReadMessage, the ping goes out
	// before the message whose echo it reads.
	pinged := make(chan error, 1)
	go func() { pinged <- c.Ping(ctx, []byte("go ping")) }()
	waitFor(t, "the ping frame written", func() bool { return wc.out.count(ws.OpPing) > 0 })
	send("text after ping", ws.TextMessage, []byte("after the ping"))
	select {
	case err := <-pinged:
		if err != nil {
			t.Fatalf("Ping: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Ping: no pong within 5s")
	}

	// A burst of small messages written before any echo is read.
	const burst = 500
	for i := range burst {
		if err := c.WriteMessage(ctx, ws.TextMessage, fmt.Appendf(nil, "burst %d ✓", i)); err != nil {
			t.Fatalf("burst: %v", err)
		}
	}
	for i := range burst {
		expectEcho(t, ctx, c, "burst", ws.TextMessage, fmt.Appendf(nil, "burst %d ✓", i))
	}

	ft := []byte(fragText())
	writeStreamed(t, ctx, c, ws.TextMessage, ft, 7001)
	expectEcho(t, ctx, c, "fragmented text", ws.TextMessage, ft)
	fb := randBytes(7, 300<<10)
	writeStreamed(t, ctx, c, ws.BinaryMessage, fb, 64<<10)
	expectEcho(t, ctx, c, "fragmented binary", ws.BinaryMessage, fb)
	if n := wc.out.stats().Continuations; n < 10 {
		t.Errorf("the Go client sent %d continuation frames, want the streamed messages fragmented", n)
	}

	send("large binary", ws.BinaryMessage, largeBinary(want.LargeSize))

	st := []byte(streamText())
	send("stream text", ws.TextMessage, st)
	before := wc.in.stats().Continuations
	if err := c.WriteMessage(ctx, ws.TextMessage, []byte("cmd:stream")); err != nil {
		t.Fatal(err)
	}
	op, r, err := c.Reader(ctx)
	if err != nil {
		t.Fatalf("cmd:stream: %v", err)
	}
	got, err := io.ReadAll(r)
	if err != nil || op != ws.TextMessage || !bytes.Equal(got, st) {
		t.Fatalf("cmd:stream: got %v of %d bytes (err %v), want the %d bytes sent", op, len(got), err, len(st))
	}
	if n := wc.in.stats().Continuations - before; want.PeerFragments && n < 2 {
		t.Errorf("cmd:stream: the peer sent %d continuation frames, want a fragmented message", n)
	}

	if err := c.Close(4001, "go client bye"); err != nil {
		t.Errorf("Close(4001): %v", err)
	}
	in, out := wc.in.stats(), wc.out.stats()
	// RFC 6455 §5.5.1: the answer "typically echoes" the code; Autobahn
	// answers 1000. Any close frame completes the handshake.
	if in.Close == nil {
		t.Errorf("/a: the peer did not answer our close frame")
	}
	if want.Deflate {
		if want.PeerCompresses && in.Compressed == 0 {
			t.Errorf("/a: no compressed frame from the peer")
		}
		if out.Compressed == 0 {
			t.Errorf("/a: no compressed frame from the Go client")
		}
	} else if in.Compressed+out.Compressed > 0 {
		t.Errorf("/a: compressed frames without deflate: in %d out %d", in.Compressed, out.Compressed)
	}
	t.Logf("Go client: deflate %+v; /a frames in %d (%d continuation, %d compressed), out %d (%d continuation, %d compressed)",
		c.Deflate(), in.Frames, in.Continuations, in.Compressed, out.Frames, out.Continuations, out.Compressed)

	cb, wb := dialWire(t, ctx, base+"b", want.Deflate)
	defer cb.CloseNow()
	if err := cb.WriteMessage(ctx, ws.TextMessage, []byte("cmd:close 4002 server bye")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := cb.ReadMessage(ctx)
	var ce *ws.CloseError
	if !errors.As(err, &ce) || ce.Code != 4002 || ce.Reason != "server bye" {
		t.Errorf("/b: ReadMessage = %q, %v; want the peer's close 4002 \"server bye\"", msg, err)
	}
	if code, _ := closeCode(wb.out.stats().Close); code != 4002 {
		t.Errorf("/b: the Go client echoed close code %d, want 4002", code)
	}

	if want.EmptyClose {
		cc, wcc := dialWire(t, ctx, base+"c", want.Deflate)
		defer cc.CloseNow()
		if err := cc.Close(0, ""); err != nil {
			t.Errorf("/c: Close(0, \"\"): %v", err)
		}
		if f := wcc.out.stats().Close; f == nil || len(f.Payload) != 0 {
			t.Errorf("/c: Close(0, \"\") sent %+v, want an empty close frame", f)
		}
		if wcc.in.stats().Close == nil {
			t.Errorf("/c: the peer did not answer the empty close frame")
		}
	}

	n := 2
	if want.EmptyClose {
		n = 3
	}
	ev := p.closedEvents(n)
	if c, ok := ev["/c"]; want.EmptyClose && (!ok || c.Code != 1005) {
		t.Errorf("/c: the peer saw the empty close as %+v, want 1005 (no status)", c)
	}
	if a := ev["/a"]; a.Code != 4001 || a.Reason != "go client bye" || (a.Clean != nil && !*a.Clean) {
		t.Errorf("/a: the peer saw the close as %+v, want 4001 \"go client bye\"", a)
	}
	if a := ev["/a"]; a.Pongs == nil || *a.Pongs != 1 {
		t.Errorf("/a: the peer server got %v pongs to its ping, want 1", a.Pongs)
	}
	if b := ev["/b"]; b.Code != 4002 || (b.Clean != nil && !*b.Clean) {
		t.Errorf("/b: the peer saw the close answered with %+v, want 4002", b)
	}
}
