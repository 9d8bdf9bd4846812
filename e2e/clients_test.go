package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// greeting is the first frame of every connection, byte for byte (docs/protocol.md §2).
const greeting = `{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`

const (
	recvTimeout = 10 * time.Second
	dialTimeout = 10 * time.Second
)

// frame is one received WebSocket message, or the end of the connection.
type frame struct {
	op   ws.Opcode
	data []byte
	// end is set when the connection ended instead: closeCode is the close
	// frame's code, 0 when the connection dropped without one.
	end       bool
	closeCode int
	reason    string
	err       error
}

func (f frame) String() string {
	if f.end {
		if f.closeCode != 0 {
			return fmt.Sprintf("close frame %d %q", f.closeCode, f.reason)
		}
		return fmt.Sprintf("dropped without a close frame (%v)", f.err)
	}
	kind := "text"
	if f.op == ws.OpBinary {
		kind = "binary"
	}
	d := f.data
	if len(d) > 200 {
		return fmt.Sprintf("%s %q... (%d bytes)", kind, d[:200], len(d))
	}
	return fmt.Sprintf("%s %q", kind, d)
}

// client is a bus client: ours (package ws) or Python's websocket-client.
type client interface {
	name() string
	send(op ws.Opcode, data []byte)
	// next returns the next frame or the end of the connection; it fails
	// the test after timeout.
	next(timeout time.Duration) frame
	// tryNext is next returning an error instead of failing the test (for
	// goroutines other than the test's).
	tryNext(timeout time.Duration) (frame, error)
}

// goClient is a connection made with our ws.Dial.
type goClient struct {
	t     *testing.T
	label string
	c     *ws.Conn
	ended *frame
}

func dialGo(t *testing.T, url string, tlsConf *tls.Config) *goClient {
	t.Helper()
	c, err := tryDialGo(url, tlsConf)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &goClient{t: t, label: "go " + c.LocalAddr().String(), c: c}
}

func tryDialGo(url string, tlsConf *tls.Config) (*ws.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	c, _, err := ws.Dial(ctx, url, &ws.DialOptions{Proxy: ws.NoProxy, TLSConfig: tlsConf, MaxMessageSize: 64 << 20, MaxFrameSize: 64 << 20})
	return c, err
}

func (g *goClient) name() string { return g.label }

func (g *goClient) send(op ws.Opcode, data []byte) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), recvTimeout)
	defer cancel()
	if err := g.c.WriteMessage(ctx, op, data); err != nil {
		g.t.Fatalf("%s: write: %v", g.label, err)
	}
}

func (g *goClient) next(timeout time.Duration) frame {
	g.t.Helper()
	f, err := g.tryNext(timeout)
	if err != nil {
		g.t.Fatalf("%s: %v", g.label, err)
	}
	return f
}

// tryNext is next without failing the test on a timeout.
func (g *goClient) tryNext(timeout time.Duration) (frame, error) {
	if g.ended != nil {
		return *g.ended, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	op, data, err := g.c.ReadMessage(ctx)
	if err == nil {
		return frame{op: op, data: data}, nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return frame{}, fmt.Errorf("no frame within %v", timeout)
	}
	f := frame{end: true, err: err}
	var ce *ws.CloseError
	if errors.As(err, &ce) && ce.Code != ws.StatusAbnormalClosure {
		f.closeCode, f.reason = int(ce.Code), ce.Reason
	}
	g.ended = &f
	return f, nil
}

// pyClient is testdata/peer.py: Python's websocket-client.
type pyClient struct {
	t      *testing.T
	label  string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan string
	mu     sync.Mutex
	ended  *frame
}

// python is Debian's interpreter, which has python3-websocket (the python3
// on PATH may be another one without Debian's modules).
const python = "/usr/bin/python3"

var (
	pythonOnce sync.Once
	pythonErr  error
)

// needPython fails the test unless /usr/bin/python3 can import websocket.
func needPython(t *testing.T) {
	t.Helper()
	pythonOnce.Do(func() {
		out, err := exec.Command(python, "-c", "import websocket; print(websocket.__version__)").CombinedOutput()
		if err != nil {
			pythonErr = fmt.Errorf("%s with websocket-client is required: %v\n%s\ninstall it with: sudo apt-get install python3 python3-websocket", python, err, out)
		}
	})
	if pythonErr != nil {
		t.Fatal(pythonErr)
	}
}

func script(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dialPy starts peer.py and waits until it connected.
func dialPy(t *testing.T, url, caFile string) *pyClient {
	t.Helper()
	p, err := startPy(t, url, caFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startPy(t *testing.T, url, caFile string) (*pyClient, error) {
	needPython(t)
	args := []string{"-u", script(t, "peer.py"), url}
	if caFile != "" {
		args = append(args, caFile)
	}
	cmd := exec.Command(python, args...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "NO_PROXY=*", "no_proxy=*")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &pyClient{t: t, label: "python peer", cmd: cmd, stdin: stdin, events: make(chan string, 100000)}
	go readAllLines(stdout, p.events)
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("python peer stderr:\n%s", stderr.String())
		}
	})
	select {
	case ev, ok := <-p.events:
		switch {
		case ok && ev == "OPEN":
			return p, nil
		case ok && strings.HasPrefix(ev, "CONNERR "):
			msg, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(ev, "CONNERR "))
			return nil, fmt.Errorf("python websocket-client could not connect to %s: %s", url, msg)
		default:
			cmd.Wait()
			return nil, fmt.Errorf("python peer: unexpected %q\nstderr:\n%s", ev, stderr.String())
		}
	case <-time.After(dialTimeout + 5*time.Second):
		return nil, fmt.Errorf("python peer did not connect to %s within %v", url, dialTimeout)
	}
}

func (p *pyClient) name() string { return p.label }

func (p *pyClient) send(op ws.Opcode, data []byte) {
	p.t.Helper()
	kind := "TEXT"
	if op == ws.OpBinary {
		kind = "BINARY"
	}
	if _, err := fmt.Fprintf(p.stdin, "%s %s\n", kind, base64.StdEncoding.EncodeToString(data)); err != nil {
		p.t.Fatalf("python peer: %v", err)
	}
}

func (p *pyClient) next(timeout time.Duration) frame {
	p.t.Helper()
	f, err := p.tryNext(timeout)
	if err != nil {
		p.t.Fatalf("%s: %v", p.label, err)
	}
	return f
}

func (p *pyClient) tryNext(timeout time.Duration) (frame, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != nil {
		return *p.ended, nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	end := func(f frame) (frame, error) {
		f.end = true
		p.ended = &f
		return f, nil
	}
	for {
		select {
		case ev, ok := <-p.events:
			if !ok {
				return end(frame{err: errors.New("python peer exited")})
			}
			kind, rest, _ := strings.Cut(ev, " ")
			switch kind {
			case "TEXT", "BINARY":
				data, err := base64.StdEncoding.DecodeString(rest)
				if err != nil {
					return frame{}, fmt.Errorf("%q: %v", ev, err)
				}
				op := ws.OpText
				if kind == "BINARY" {
					op = ws.OpBinary
				}
				return frame{op: op, data: data}, nil
			case "CLOSE":
				codeText, reasonB64, _ := strings.Cut(rest, " ")
				code, _ := strconv.Atoi(codeText)
				reason, _ := base64.StdEncoding.DecodeString(reasonB64)
				return end(frame{closeCode: code, reason: string(reason)})
			case "DROP":
				return end(frame{err: errors.New("python: " + rest)})
			case "SENDERR":
				return frame{}, fmt.Errorf("send failed: %s", rest)
			default:
				return frame{}, fmt.Errorf("unexpected %q", ev)
			}
		case <-timer.C:
			return frame{}, fmt.Errorf("no frame within %v", timeout)
		}
	}
}

// expectGreeting checks that the first frame is the greeting, byte for byte.
func expectGreeting(t *testing.T, c client) {
	t.Helper()
	f := c.next(recvTimeout)
	if f.end || f.op != ws.OpText || string(f.data) != greeting {
		t.Fatalf("%s: first frame = %v, want text %q", c.name(), f, greeting)
	}
}

// joinSeq numbers the join and barrier messages of all tests.
var joinSeq atomic.Int64

// connectAll waits until every client is in the fan-out and its stream is
// clean: each reads its greeting, sends a join message and waits for its own
// echo (a client that got a relayed message has joined), then the first
// sends a barrier that every client reads up to. After it, each client's
// next frame is whatever is sent next.
func connectAll(t *testing.T, cs ...client) {
	t.Helper()
	for _, c := range cs {
		expectGreeting(t, c)
	}
	for _, c := range cs {
		id := joinSeq.Add(1)
		msg := fmt.Appendf(nil, `{"type":"e2e.join","data":{"id":%d},"context":{}}`, id)
		c.send(ws.OpText, msg)
		skipUntil(t, c, msg)
	}
	barrier := fmt.Appendf(nil, `{"type":"e2e.barrier","data":{"id":%d},"context":{}}`, joinSeq.Add(1))
	cs[0].send(ws.OpText, barrier)
	for _, c := range cs {
		skipUntil(t, c, barrier)
	}
}

// skipUntil reads frames until it gets want (a text frame).
func skipUntil(t *testing.T, c client, want []byte) {
	t.Helper()
	deadline := time.Now().Add(recvTimeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%s: did not receive %s within %v", c.name(), want, recvTimeout)
		}
		f := c.next(left)
		if f.end {
			t.Fatalf("%s: connection ended (%v) before %s", c.name(), f, want)
		}
		if f.op == ws.OpText && bytes.Equal(f.data, want) {
			return
		}
	}
}

// expectFrame checks that c's next frame is exactly op/data.
func expectFrame(t *testing.T, c client, op ws.Opcode, data []byte) {
	t.Helper()
	f := c.next(recvTimeout)
	if f.end || f.op != op || !bytes.Equal(f.data, data) {
		want := frame{op: op, data: data}
		t.Fatalf("%s: got %v, want %v", c.name(), f, want)
	}
}

// relayText sends a text frame from sender and checks that it is the next
// frame of every client in all.
func relayText(t *testing.T, sender client, all []client, msg []byte) {
	t.Helper()
	sender.send(ws.OpText, msg)
	for _, c := range all {
		expectFrame(t, c, ws.OpText, msg)
	}
}

// expectJSON checks that c's next frame is a text frame holding JSON equal
// to want.
func expectJSON(t *testing.T, c client, want string) {
	t.Helper()
	f := c.next(recvTimeout)
	if f.end || f.op != ws.OpText {
		t.Fatalf("%s: got %v, want text %s", c.name(), f, want)
	}
	if !jsonEqual(f.data, []byte(want)) {
		t.Fatalf("%s: got %s, want (as JSON) %s", c.name(), f.data, want)
	}
}

func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// expectDropped checks that c's connection ends without a close frame.
func expectDropped(t *testing.T, c client, timeout time.Duration) {
	t.Helper()
	f := c.next(timeout)
	for !f.end {
		f = c.next(timeout)
	}
	if f.closeCode != 0 {
		t.Fatalf("%s: got a close frame %d %q; want the connection dropped without one", c.name(), f.closeCode, f.reason)
	}
}

// expectClosed checks that c's connection ends with a close frame of code.
func expectClosed(t *testing.T, c client, code int, timeout time.Duration) frame {
	t.Helper()
	f := c.next(timeout)
	for !f.end {
		f = c.next(timeout)
	}
	if f.closeCode != code {
		t.Fatalf("%s: connection ended with %v, want a close frame %d", c.name(), f, code)
	}
	return f
}

// rawConn is a WebSocket client on a bare TCP connection, for what the
// clients above cannot do: never read.
type rawConn struct {
	net.Conn
	br *bufio.Reader
	// header is the handshake response's header lines, lower-cased.
	header []string
}

// dialRaw connects and upgrades with a small receive buffer, and reads
// nothing beyond the handshake response.
func dialRaw(t *testing.T, addr, path string, rcvbuf int) *rawConn {
	t.Helper()
	return dialRawWith(t, addr, path, rcvbuf, "")
}

// dialRawWith is dialRaw sending extra header lines ("Name: value\r\n").
func dialRawWith(t *testing.T, addr, path string, rcvbuf int, extra string) *rawConn {
	t.Helper()
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if rcvbuf > 0 {
		nc.(*net.TCPConn).SetReadBuffer(rcvbuf)
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + extra + "\r\n"
	nc.SetDeadline(time.Now().Add(dialTimeout))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(nc, 4096)
	var header []string
	status, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		t.Fatalf("raw upgrade: %q", status)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
		header = append(header, strings.ToLower(strings.TrimSpace(l)))
	}
	nc.SetDeadline(time.Time{})
	return &rawConn{Conn: nc, br: br, header: header}
}

// rawFrame is a frame read by readFrames.
type rawFrame struct {
	op   ws.Opcode
	rsv1 bool // compressed (permessage-deflate)
	data []byte
}

// readFrame reads one frame.
func (r *rawConn) readFrame(t *testing.T, timeout time.Duration) rawFrame {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(timeout))
	h, err := ws.ReadHeader(r.br)
	if err != nil {
		t.Fatalf("raw client: %v", err)
	}
	data := make([]byte, h.Length)
	if _, err := io.ReadFull(r.br, data); err != nil {
		t.Fatalf("raw client: %v", err)
	}
	if !h.Fin {
		t.Fatalf("raw client: a fragmented frame")
	}
	return rawFrame{h.Op, h.Rsv1, data}
}

// drain reads everything until the server ends the connection and returns
// the frames read and how the stream ended; it fails if the connection is
// still open after timeout.
func (r *rawConn) drain(t *testing.T, timeout time.Duration) ([]rawFrame, error) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(timeout))
	var frames []rawFrame
	for {
		h, err := ws.ReadHeader(r.br)
		if err != nil {
			return frames, err
		}
		data := make([]byte, h.Length)
		if _, err := io.ReadFull(r.br, data); err != nil {
			return frames, err
		}
		frames = append(frames, rawFrame{h.Op, h.Rsv1, data})
		if h.Op == ws.OpClose {
			return frames, nil
		}
	}
}
