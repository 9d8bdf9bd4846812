package ws_test

// Connection-level harness for the Autobahn|Testsuite conformance tests in
// conformance_test.go. The implementation under test runs exactly as
// examples/echoserver (server role) and examples/echoclient (client role)
// run it; the other end is a raw, scripted WebSocket endpoint written here
// (frame writer with masking, frame reader, permessage-deflate with an
// independent inflater that also measures back-reference distances).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/flate"

	"github.com/ovbus/ovbus/ws"
	"github.com/ovbus/ovbus/ws/internal/handshake"
)

const (
	// patience bounds every wait for something that should happen; it is
	// only reached when a test fails.
	patience = 5 * time.Second
	// quiet is how long a scripted peer waits to see that nothing happens
	// (Autobahn waits 1 s; the loopback needs far less).
	quiet = 100 * time.Millisecond
	// chopDelay separates the writes of "chopped" octets, so that the
	// implementation sees them in separate reads.
	chopDelay = 100 * time.Microsecond
)

// ---- the implementation under test, as the examples run it ----

// echoServer is examples/echoserver: ws.Accept with its options and its
// echo loop. The error that ended each connection's loop is kept, keyed by
// the peer's address, so that tests can check it.
type echoServer struct {
	addr    string
	mu      sync.Mutex
	results map[string]chan error
}

// echoServerOptions are the AcceptOptions of examples/echoserver.
func echoServerOptions() *ws.AcceptOptions {
	const maxSize = 16 << 20
	return &ws.AcceptOptions{
		CheckOrigin:                func(*http.Request) bool { return true },
		EnableCompression:          true,
		AllowClientContextTakeover: true,
		MaxMessageSize:             maxSize,
		MaxFrameSize:               maxSize,
	}
}

func startEchoServer(t *testing.T) *echoServer {
	t.Helper()
	s := &echoServer{results: map[string]chan error{}}
	opts := echoServerOptions()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, opts)
		if err != nil {
			return
		}
		err = serverEcho(c)
		s.result(c.RemoteAddr().String()) <- err
	}))
	t.Cleanup(srv.Close)
	s.addr = strings.TrimPrefix(srv.URL, "http://")
	return s
}

func (s *echoServer) result(addr string) chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.results[addr]
	if !ok {
		ch = make(chan error, 1)
		s.results[addr] = ch
	}
	return ch
}

// serverEcho is the echo function of examples/echoserver; it returns the
// error that ended the loop instead of logging it.
func serverEcho(c *ws.Conn) error {
	defer c.CloseNow()
	var buf []byte
	ctx := context.Background()
	for {
		op, msg, err := c.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			return err
		}
		buf = msg
		if err := c.WriteMessage(ctx, op, msg); err != nil {
			return err
		}
	}
}

// echoClientOptions are the DialOptions of examples/echoclient.
func echoClientOptions() *ws.DialOptions {
	return &ws.DialOptions{
		EnableCompression: true,
		MaxMessageSize:    64 << 20,
		MaxFrameSize:      64 << 20,
	}
}

// clientEcho is echoCase of examples/echoclient; it returns the error that
// ended the loop (a *ws.CloseError for the normal end) instead of nil.
func clientEcho(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, _, err := ws.Dial(ctx, u, echoClientOptions())
	if err != nil {
		return err
	}
	defer c.CloseNow()
	var buf []byte
	for {
		op, msg, err := c.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			return err
		}
		buf = msg
		if err := c.WriteMessage(ctx, op, msg); err != nil {
			return err
		}
	}
}

// ---- scripted peer ----

type evKind uint8

const (
	evMessage evKind = iota
	evPing
	evPong
)

// ev is what Autobahn records: a whole message, a ping or a pong received
// from the implementation.
type ev struct {
	kind   evKind
	binary bool
	data   []byte
}

func msgT(s string) ev   { return ev{kind: evMessage, data: []byte(s)} }
func msgB(b []byte) ev   { return ev{kind: evMessage, binary: true, data: b} }
func pongEv(b []byte) ev { return ev{kind: evPong, data: b} }
func pongS(s string) ev  { return pongEv([]byte(s)) }
func (e ev) equal(o ev) bool {
	return e.kind == o.kind && e.binary == o.binary && bytes.Equal(e.data, o.data)
}

func (e ev) String() string {
	d := e.data
	tail := ""
	if len(d) > 24 {
		d, tail = d[:24], fmt.Sprintf("...(%d bytes)", len(e.data))
	}
	switch e.kind {
	case evPing:
		return fmt.Sprintf("ping %q%s", d, tail)
	case evPong:
		return fmt.Sprintf("pong %q%s", d, tail)
	}
	if e.binary {
		return fmt.Sprintf("binary %x%s", d, tail)
	}
	return fmt.Sprintf("text %q%s", d, tail)
}

func evsEqual(a, b []ev) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].equal(b[i]) {
			return false
		}
	}
	return true
}

// closeInfo is a close frame received from the implementation.
type closeInfo struct {
	hasCode bool
	code    ws.StatusCode
	reason  string
	first   bool // the implementation sent it before we sent ours
}

func (c *closeInfo) String() string {
	if c == nil {
		return "no close frame"
	}
	if !c.hasCode {
		return "close without code"
	}
	return fmt.Sprintf("close %d %q", c.code, c.reason)
}

// deflateParams are negotiated permessage-deflate parameters (RFC 7692 §7.1).
type deflateParams struct {
	serverNoCtx, clientNoCtx bool
	serverBits, clientBits   int // 0: not given (15)
}

func bits15(b int) int {
	if b == 0 {
		return 15
	}
	return b
}

// parseDeflateResponse parses a server's Sec-WebSocket-Extensions answer.
func parseDeflateResponse(s string) (*deflateParams, error) {
	if s == "" {
		return nil, nil
	}
	exts, err := handshake.ParseExtensionList(s)
	if err != nil {
		return nil, err
	}
	if len(exts) != 1 || exts[0].Name != "permessage-deflate" {
		return nil, fmt.Errorf("unexpected extensions %q", s)
	}
	var dp deflateParams
	seen := map[string]bool{}
	for _, p := range exts[0].Params {
		if seen[p.Name] {
			return nil, fmt.Errorf("repeated parameter %s in %q", p.Name, s)
		}
		seen[p.Name] = true
		switch p.Name {
		case "server_no_context_takeover", "client_no_context_takeover":
			if p.HasValue {
				return nil, fmt.Errorf("value on %s in %q", p.Name, s)
			}
			if p.Name[0] == 's' {
				dp.serverNoCtx = true
			} else {
				dp.clientNoCtx = true
			}
		case "server_max_window_bits", "client_max_window_bits":
			n, err := strconv.Atoi(p.Value)
			if !p.HasValue || err != nil || n < 8 || n > 15 {
				return nil, fmt.Errorf("bad %s in %q", p.Name, s)
			}
			if p.Name[0] == 's' {
				dp.serverBits = n
			} else {
				dp.clientBits = n
			}
		default:
			return nil, fmt.Errorf("unknown parameter %s in %q", p.Name, s)
		}
	}
	return &dp, nil
}

// peer is the scripted endpoint facing the implementation.
type peer struct {
	t        *testing.T
	role     string // role of the implementation: "server" or "client"
	nc       net.Conn
	br       *bufio.Reader
	isClient bool // we are the WebSocket client: we mask, the implementation must not

	// permessage-deflate, nil when not negotiated
	pmd        *deflateParams
	txw        *flate.Writer
	txBuf      bytes.Buffer
	txTakeover bool
	txBits     int
	rx         inflater
	rxTakeover bool
	rxBits     int

	implErr <-chan error // the error that ended the implementation's echo loop

	wmu       sync.Mutex
	closeSent bool
	sentCode  ws.StatusCode // 0: close without code
	writeErr  error

	mu         sync.Mutex
	events     []ev
	closeRecv  *closeInfo
	violations []string
	readErr    error
	compressed int     // messages received compressed
	lastKey    [4]byte // masking key of the last frame (read side only)
	notify     chan struct{}
	done       chan struct{}
}

func newPeer(t *testing.T, role string, nc net.Conn, br *bufio.Reader, pmd *deflateParams, implErr <-chan error) *peer {
	p := &peer{
		t: t, role: role, nc: nc, br: br, isClient: role == "server",
		pmd: pmd, implErr: implErr,
		notify: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if pmd != nil {
		var err error
		if p.isClient {
			p.txTakeover, p.txBits = !pmd.clientNoCtx, bits15(pmd.clientBits)
			p.rxTakeover, p.rxBits = !pmd.serverNoCtx, bits15(pmd.serverBits)
		} else {
			p.txTakeover, p.txBits = !pmd.serverNoCtx, bits15(pmd.serverBits)
			p.rxTakeover, p.rxBits = !pmd.clientNoCtx, bits15(pmd.clientBits)
		}
		if p.txBits < 15 {
			p.txw, err = flate.NewWriterWindow(&p.txBuf, 1<<p.txBits)
		} else {
			p.txw, err = flate.NewWriter(&p.txBuf, flate.DefaultCompression)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { nc.Close() })
	go p.readLoop()
	return p
}

// ---- connecting ----

// connect opens a connection to the implementation in the given role. In the
// server role it dials the echo server with the extension offer; in the
// client role it runs the echo client against a scripted server that
// answers the client's offer with accept(offer) (no extension when accept is
// nil).
func connect(t *testing.T, srv *echoServer, role, offer string, accept func(offer string) string) *peer {
	t.Helper()
	if role == "server" {
		return dialServer(t, srv, offer, nil)
	}
	return acceptClient(t, accept, nil)
}

// dialServer connects a raw client to the echo server. extra is written
// right behind the request, in the same write.
func dialServer(t *testing.T, srv *echoServer, offer string, extra func(p *peer) []byte) *peer {
	t.Helper()
	nc, br, pmd := dialServerConn(t, srv.addr, offer, extra, 0)
	return newPeer(t, "server", nc, br, pmd, srv.result(nc.LocalAddr().String()))
}

// dialServerConn performs the handshake of dialServer; rbuf, if not 0, is
// the socket's receive buffer size.
func dialServerConn(t *testing.T, addr, offer string, extra func(p *peer) []byte, rbuf int) (net.Conn, *bufio.Reader, *deflateParams) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if rbuf > 0 {
		nc.(*net.TCPConn).SetReadBuffer(rbuf)
	}
	var kb [16]byte
	rand.Read(kb[:])
	key := base64.StdEncoding.EncodeToString(kb[:])
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n"
	if offer != "" {
		req += "Sec-WebSocket-Extensions: " + offer + "\r\n"
	}
	req += "\r\n"
	b := []byte(req)
	if extra != nil {
		// The frames are built by a throw-away peer-like encoder: only
		// masking matters for them.
		b = append(b, extra(&peer{isClient: true})...)
	}
	nc.SetDeadline(time.Now().Add(patience))
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading handshake response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake status %d", resp.StatusCode)
	}
	if got, want := resp.Header.Get("Sec-WebSocket-Accept"), handshake.AcceptKey(key); got != want {
		t.Fatalf("Sec-WebSocket-Accept %q, want %q", got, want)
	}
	nc.SetDeadline(time.Time{})
	ext := strings.Join(resp.Header.Values("Sec-WebSocket-Extensions"), ", ")
	pmd, err := parseDeflateResponse(ext)
	if err != nil {
		t.Fatalf("server's extension response: %v", err)
	}
	if offer == "" && pmd != nil {
		t.Fatalf("server answered %q to no offer", ext)
	}
	return nc, br, pmd
}

// clientOffer is what ws.Dial with EnableCompression offers.
const clientOffer = "permessage-deflate; client_max_window_bits"

// acceptClient runs the echo client against a one-connection scripted
// server and returns the server's end. extra is written right behind the
// 101 response, in the same write.
func acceptClient(t *testing.T, accept func(offer string) string, extra func(p *peer) []byte) *peer {
	t.Helper()
	nc, br, pmd, implErr := acceptClientConn(t, accept, extra, clientEcho, 0)
	return newPeer(t, "client", nc, br, pmd, implErr)
}

// acceptClientConn performs the handshake of acceptClient with impl as the
// client; rbuf, if not 0, is the socket's receive buffer size.
func acceptClientConn(t *testing.T, accept func(offer string) string, extra func(p *peer) []byte,
	impl func(ctx context.Context, url string) error, rbuf int) (net.Conn, *bufio.Reader, *deflateParams, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	implErr := make(chan error, 1)
	go func() { implErr <- impl(context.Background(), "ws://"+ln.Addr().String()+"/runCase?case=1") }()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(patience))
	nc, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v (client: %v)", err, <-implErr)
	}
	t.Cleanup(func() { nc.Close() })
	if rbuf > 0 {
		nc.(*net.TCPConn).SetReadBuffer(rbuf)
	}
	nc.SetDeadline(time.Now().Add(patience))
	br := bufio.NewReader(nc)
	req, err := handshake.ReadServerRequest(br)
	if err != nil {
		t.Fatalf("reading client request: %v", err)
	}
	sreq, herr := handshake.CheckRequest(req)
	if herr != nil {
		t.Fatalf("client request refused: %v", herr)
	}
	offer := strings.Join(req.Header.Values("Sec-WebSocket-Extensions"), ", ")
	if offer != clientOffer {
		t.Errorf("client offered %q, want %q", offer, clientOffer)
	}
	resp := ""
	if accept != nil {
		resp = accept(offer)
	}
	pmd, err := parseDeflateResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	b := handshake.AppendServerResponse(nil, sreq.Key, "", resp, nil)
	if extra != nil {
		b = append(b, extra(&peer{})...)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Time{})
	return nc, br, pmd, implErr
}

// ---- sending ----

// encode builds one frame; rsv is numbered as in Autobahn (4 = RSV1,
// 2 = RSV2, 1 = RSV3). A client masks with a random key.
func (p *peer) encode(fin bool, rsv byte, op ws.Opcode, payload []byte) []byte {
	return encodeFrame(p.isClient, fin, rsv, op, payload)
}

// encodeFrame builds one frame, masked or not.
func encodeFrame(masked, fin bool, rsv byte, op ws.Opcode, payload []byte) []byte {
	h := ws.Header{Fin: fin, Rsv1: rsv&4 != 0, Rsv2: rsv&2 != 0, Rsv3: rsv&1 != 0, Op: op, Length: int64(len(payload))}
	if masked {
		h.Masked = true
		binary.LittleEndian.PutUint32(h.Mask[:], mrand.Uint32())
	}
	b := ws.AppendHeader(make([]byte, 0, ws.MaxHeaderSize+len(payload)), h)
	start := len(b)
	b = append(b, payload...)
	if h.Masked {
		ws.MaskBytes(h.Mask, 0, b[start:])
	}
	return b
}

func (p *peer) write(b []byte) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.writeLocked(b)
}

func (p *peer) writeLocked(b []byte) {
	if p.writeErr != nil {
		return
	}
	p.nc.SetWriteDeadline(time.Now().Add(patience))
	if _, err := p.nc.Write(b); err != nil {
		p.writeErr = err // expected after the implementation failed the connection
	}
}

// writeChopped writes b in pieces of chop bytes, pausing between them.
func (p *peer) writeChopped(b []byte, chop int, pause time.Duration) {
	for len(b) > 0 {
		n := min(chop, len(b))
		p.write(b[:n])
		b = b[n:]
		if pause > 0 && len(b) > 0 {
			time.Sleep(pause)
		}
	}
}

// sendFrame sends one frame in one write.
func (p *peer) sendFrame(fin bool, rsv byte, op ws.Opcode, payload []byte) {
	p.write(p.encode(fin, rsv, op, payload))
}

// sendFrameChopped sends one frame in pieces of chop octets.
func (p *peer) sendFrameChopped(fin bool, rsv byte, op ws.Opcode, payload []byte, chop int) {
	p.writeChopped(p.encode(fin, rsv, op, payload), chop, chopDelay)
}

// sendFrames sends frames back to back in one write.
func (p *peer) sendFrames(frames ...[]byte) {
	p.write(bytes.Join(frames, nil))
}

// sendMessage sends a message fragmented into frames of at most frag bytes
// (0: one frame).
func (p *peer) sendMessage(op ws.Opcode, payload []byte, frag int) {
	if frag <= 0 || frag >= len(payload) {
		p.sendFrame(true, 0, op, payload)
		return
	}
	var b []byte
	for first := true; len(payload) > 0 || first; first = false {
		n := min(frag, len(payload))
		o := ws.OpContinuation
		if first {
			o = op
		}
		b = append(b, p.encode(n == len(payload), 0, o, payload[:n])...)
		payload = payload[n:]
	}
	p.write(b)
}

// sendCompressed sends a compressed message (RSV1 on the first frame),
// fragmented into frames of at most frag bytes of compressed data.
func (p *peer) sendCompressed(op ws.Opcode, payload []byte, frag int) {
	p.t.Helper()
	if p.pmd == nil {
		p.t.Fatal("sendCompressed without permessage-deflate")
	}
	if !p.txTakeover {
		p.txw.Reset(&p.txBuf)
	}
	p.txBuf.Reset()
	if _, err := p.txw.Write(payload); err != nil {
		p.t.Fatal(err)
	}
	if err := p.txw.Flush(); err != nil {
		p.t.Fatal(err)
	}
	z := p.txBuf.Bytes()
	if !bytes.HasSuffix(z, []byte{0, 0, 0xff, 0xff}) {
		p.t.Fatal("flush without sync marker")
	}
	z = z[:len(z)-4]
	var b []byte
	for first := true; len(z) > 0 || first; first = false {
		n := len(z)
		if frag > 0 {
			n = min(frag, n)
		}
		o, rsv := ws.OpContinuation, byte(0)
		if first {
			o, rsv = op, 4
		}
		b = append(b, p.encode(n == len(z), rsv, o, z[:n])...)
		z = z[n:]
	}
	p.write(b)
}

// closePayload is a close frame body: code and reason; code 0 means none.
func closePayload(code ws.StatusCode, reason string) []byte {
	if code == 0 && reason == "" {
		return nil
	}
	return append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...)
}

// sendClose sends a close frame with code (0: no body) and reason, once.
func (p *peer) sendClose(code ws.StatusCode, reason string) {
	p.sendCloseRaw(closePayload(code, reason))
}

// sendCloseRaw sends a close frame with an arbitrary body.
func (p *peer) sendCloseRaw(body []byte) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if !p.closeSent {
		p.closeSent = true
		if len(body) >= 2 {
			p.sentCode = ws.StatusCode(binary.BigEndian.Uint16(body))
		} else {
			p.sentCode = 0
		}
	}
	p.writeLocked(p.encode(true, 0, ws.OpClose, body))
}

// ---- receiving ----

type rawFrame struct {
	fin     bool
	rsv     byte
	op      ws.Opcode
	masked  bool
	payload []byte
}

// readFrame reads one frame, independently of the package's parser.
func (p *peer) readFrame() (rawFrame, error) {
	var f rawFrame
	var h [8]byte
	if _, err := io.ReadFull(p.br, h[:2]); err != nil {
		return f, err
	}
	f.fin = h[0]&0x80 != 0
	f.rsv = h[0] >> 4 & 7
	f.op = ws.Opcode(h[0] & 0xf)
	f.masked = h[1]&0x80 != 0
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		if _, err := io.ReadFull(p.br, h[:2]); err != nil {
			return f, err
		}
		n = uint64(binary.BigEndian.Uint16(h[:2]))
		if n < 126 {
			return f, fmt.Errorf("non-minimal 16-bit length %d", n)
		}
	case 127:
		if _, err := io.ReadFull(p.br, h[:8]); err != nil {
			return f, err
		}
		n = binary.BigEndian.Uint64(h[:8])
		if n <= 0xffff || n>>63 != 0 {
			return f, fmt.Errorf("bad 64-bit length %d", n)
		}
	}
	if n > 80<<20 {
		return f, fmt.Errorf("frame of %d bytes", n)
	}
	var key [4]byte
	if f.masked {
		if _, err := io.ReadFull(p.br, key[:]); err != nil {
			return f, err
		}
		// RFC 6455 §5.3: a fresh, unpredictable key for every frame.
		if p.lastKey == key {
			p.violation("masking key %x used twice in a row", key)
		}
		p.lastKey = key
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(p.br, f.payload); err != nil {
		return f, err
	}
	if f.masked {
		ws.MaskBytes(key, 0, f.payload)
	}
	return f, nil
}

func (p *peer) violation(format string, args ...any) {
	p.mu.Lock()
	p.violations = append(p.violations, fmt.Sprintf(format, args...))
	p.mu.Unlock()
	p.signal()
}

func (p *peer) signal() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *peer) addEvent(e ev) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
	p.signal()
}

// readLoop reads what the implementation sends, checks it, and records it
// as Autobahn does. A close frame from the implementation is answered as
// Autobahn answers it (echo of the code) if we had not sent ours.
func (p *peer) readLoop() {
	defer close(p.done)
	defer p.signal()
	var msg []byte
	var msgOp ws.Opcode
	inMsg, compressed := false, false
	for {
		f, err := p.readFrame()
		if err != nil {
			p.mu.Lock()
			p.readErr = err
			p.mu.Unlock()
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				p.violation("reading: %v", err)
			}
			return
		}
		p.mu.Lock()
		closed := p.closeRecv != nil
		p.mu.Unlock()
		if closed {
			p.violation("%v frame after the close frame", f.op)
			continue
		}
		// RFC 6455 §5.1, §5.3: a client masks every frame, a server none.
		if f.masked == p.isClient {
			p.violation("%v frame from the %s with masked=%v", f.op, p.role, f.masked)
		}
		// §5.2, RFC 7692 §6: RSV1 only on the first frame of a compressed
		// data message; RSV2, RSV3 never.
		if f.rsv&3 != 0 || (f.rsv&4 != 0 && (p.pmd == nil || !f.op.IsData())) {
			p.violation("%v frame with RSV bits %03b", f.op, f.rsv)
		}
		switch {
		case f.op.IsControl():
			if !f.fin || len(f.payload) > 125 {
				p.violation("bad control frame: fin=%v len=%d", f.fin, len(f.payload))
			}
			switch f.op {
			case ws.OpPing:
				p.addEvent(ev{kind: evPing, data: f.payload})
				p.wmu.Lock()
				if !p.closeSent {
					p.writeLocked(p.encode(true, 0, ws.OpPong, f.payload))
				}
				p.wmu.Unlock()
			case ws.OpPong:
				p.addEvent(ev{kind: evPong, data: f.payload})
			case ws.OpClose:
				p.gotClose(f.payload)
			default:
				p.violation("reserved opcode %d", f.op)
			}
		case f.op == ws.OpContinuation:
			if !inMsg {
				p.violation("continuation frame without a message")
				continue
			}
			msg = append(msg, f.payload...)
		case f.op.IsData():
			if inMsg {
				p.violation("new message while a fragmented one is open")
			}
			inMsg, msgOp, compressed = true, f.op, f.rsv&4 != 0
			msg = append(msg[:0:0], f.payload...)
		default:
			p.violation("reserved opcode %d", f.op)
		}
		if f.op.IsControl() || !f.fin || !inMsg {
			continue
		}
		inMsg = false
		data := msg
		if compressed {
			out, maxDist, err := p.rx.inflate(msg, p.rxTakeover)
			if err != nil {
				p.violation("invalid compressed message: %v", err)
				continue
			}
			if limit := 1 << p.rxBits; maxDist > limit {
				p.violation("compressed message refers %d bytes back, window is %d", maxDist, limit)
			}
			data = out
			p.mu.Lock()
			p.compressed++
			p.mu.Unlock()
		}
		if msgOp == ws.OpText && !utf8.Valid(data) {
			p.violation("text message is not valid UTF-8")
		}
		p.addEvent(ev{kind: evMessage, binary: msgOp == ws.OpBinary, data: data})
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

func (p *peer) gotClose(body []byte) {
	ci := &closeInfo{}
	switch {
	case len(body) == 1:
		p.violation("close frame with a 1-byte body")
	case len(body) >= 2:
		ci.hasCode = true
		ci.code = ws.StatusCode(binary.BigEndian.Uint16(body))
		ci.reason = string(body[2:])
		if !ws.ValidCloseCode(ci.code) {
			p.violation("close frame with code %d", ci.code)
		}
		if !utf8.Valid(body[2:]) {
			p.violation("close reason is not valid UTF-8")
		}
	}
	p.wmu.Lock()
	ci.first = !p.closeSent
	if !p.closeSent {
		// Autobahn answers a close it did not start with 1000 (or with
		// an empty close to an empty one).
		p.closeSent = true
		var reply []byte
		if ci.hasCode {
			p.sentCode = ws.StatusNormalClosure
			reply = closePayload(ws.StatusNormalClosure, "")
		}
		p.writeLocked(p.encode(true, 0, ws.OpClose, reply))
	}
	p.wmu.Unlock()
	p.mu.Lock()
	p.closeRecv = ci
	p.mu.Unlock()
	p.signal()
}

// snapshot returns the recorded state.
func (p *peer) snapshot() (events []ev, ci *closeInfo, ended bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		ended = true
	default:
	}
	return append([]ev(nil), p.events...), p.closeRecv, ended
}

// waitFor waits until cond holds on the recorded state, the connection
// ends, or d passes; it reports whether cond held.
func (p *peer) waitFor(d time.Duration, cond func(events []ev, ci *closeInfo) bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		events, ci, ended := p.snapshot()
		if cond(events, ci) {
			return true
		}
		if ended {
			return false
		}
		select {
		case <-p.notify:
		case <-p.done:
		case <-timer.C:
			events, ci, _ = p.snapshot()
			return cond(events, ci)
		}
	}
}

// waitEvents waits until the received events are want.
func (p *peer) waitEvents(want []ev) bool {
	return p.waitFor(patience, func(events []ev, _ *closeInfo) bool { return evsEqual(events, want) })
}

// waitEventCount waits until n events were received.
func (p *peer) waitEventCount(n int) bool {
	return p.waitFor(patience, func(events []ev, _ *closeInfo) bool { return len(events) >= n })
}

// closedWithin reports whether the implementation sent a close frame within d.
func (p *peer) closedWithin(d time.Duration) bool {
	return p.waitFor(d, func(_ []ev, ci *closeInfo) bool { return ci != nil })
}

// open is Autobahn's "state == STATE_OPEN": no close seen and not ended.
func (p *peer) open() bool {
	_, ci, ended := p.snapshot()
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return ci == nil && !ended && !p.closeSent
}

// ---- verdict ----

// expect is an Autobahn case's expectation.
type expect struct {
	ok, nonStrict []ev
	closedByMe    bool            // the scripted peer starts the closing handshake
	codes         []ws.StatusCode // acceptable close codes from the implementation
	clean         bool            // the implementation's close frame is required
	informational bool            // outcome not judged (only logged)
}

// okClose: the events are ok, then we close with 1000 and expect a clean
// closing handshake.
func okClose(ok ...ev) expect {
	return expect{ok: ok, closedByMe: true, codes: []ws.StatusCode{ws.StatusNormalClosure}, clean: true}
}

// failWith: the implementation fails the connection with code after the
// events ok.
func failWith(code ws.StatusCode, ok ...ev) expect {
	return expect{ok: ok, codes: []ws.StatusCode{code}}
}

// finish ends the case as Autobahn does and judges it: OK, NON-STRICT or
// FAILED (both of the latter fail the test).
func (p *peer) finish(exp expect) {
	t := p.t
	t.Helper()
	p.wmu.Lock()
	sent := p.closeSent
	p.wmu.Unlock()
	if exp.closedByMe && !sent {
		p.waitFor(patience, func(events []ev, ci *closeInfo) bool {
			return evsEqual(events, exp.ok) || (exp.nonStrict != nil && evsEqual(events, exp.nonStrict)) || ci != nil
		})
		if p.open() {
			p.sendClose(ws.StatusNormalClosure, "")
		}
	}
	select {
	case <-p.done:
	case <-time.After(patience):
		t.Errorf("FAILED: the %s did not close the TCP connection within %v", p.role, patience)
		p.nc.Close()
		<-p.done
	}
	p.nc.Close()
	events, ci, _ := p.snapshot()
	p.mu.Lock()
	violations := p.violations
	p.mu.Unlock()
	for _, v := range violations {
		t.Errorf("FAILED: protocol violation by the %s: %s", p.role, v)
	}

	if exp.informational {
		t.Logf("INFORMATIONAL: events %v, %v", events, ci)
		p.checkImplErr(ci, true)
		return
	}
	switch {
	case evsEqual(events, exp.ok):
	case exp.nonStrict != nil && evsEqual(events, exp.nonStrict):
		t.Errorf("NON-STRICT: events %v, want %v", events, exp.ok)
	default:
		t.Errorf("FAILED: events %v, want %v", events, exp.ok)
	}
	codeOK := func() bool {
		if !ci.hasCode {
			return exp.closedByMe // Autobahn: "the close code should have been ... or empty"
		}
		for _, c := range exp.codes {
			if ci.code == c {
				return true
			}
		}
		return false
	}
	switch {
	case ci == nil && (exp.clean || !exp.closedByMe):
		t.Errorf("FAILED: no close frame from the %s, want one with code %v", p.role, exp.codes)
	case ci == nil:
	case exp.closedByMe && ci.first:
		t.Errorf("FAILED: the %s started the closing handshake (%v), the peer should have", p.role, ci)
	case !exp.closedByMe && !ci.first:
		t.Errorf("FAILED: the %s did not fail the connection itself", p.role)
	case !codeOK():
		t.Errorf("WRONG CODE: %v, want %v", ci, exp.codes)
	}
	p.checkImplErr(ci, false)
}

// checkImplErr checks the error that ended the implementation's echo loop:
// a *ws.CloseError when it echoed our close, a *ws.ProtocolError with the
// code it sent when it failed the connection.
func (p *peer) checkImplErr(ci *closeInfo, lenient bool) {
	t := p.t
	t.Helper()
	var err error
	select {
	case err = <-p.implErr:
	case <-time.After(patience):
		t.Errorf("the %s's echo loop did not return", p.role)
		return
	}
	if ci == nil {
		return
	}
	p.wmu.Lock()
	sentCode := p.sentCode
	p.wmu.Unlock()
	var ce *ws.CloseError
	var pe *ws.ProtocolError
	echoed := !ci.first && ci.code == sentCode
	switch {
	case echoed:
		want := sentCode
		if want == 0 {
			want = ws.StatusNoStatusRcvd
		}
		if !errors.As(err, &ce) || ce.Code != want {
			t.Errorf("%s echo loop ended with %v, want a *ws.CloseError with code %d", p.role, err, want)
		}
	case ci.hasCode:
		if !errors.As(err, &pe) || pe.Code != ci.code {
			if !lenient {
				t.Errorf("%s echo loop ended with %v, want a *ws.ProtocolError with code %d", p.role, err, ci.code)
			}
		}
	}
}

// ---- a deflate decoder (RFC 1951) that reports back-reference distances ----

// inflater decodes raw deflate data. It is written after Mark Adler's puff
// and is independent of the compressors under test. It keeps the last 32 KiB
// of output as the window for context takeover, and reports the largest
// back-reference distance so that a window limit can be checked.
type inflater struct {
	in      []byte
	pos     int
	bitbuf  uint32
	bitcnt  uint
	out     []byte
	maxDist int
}

var errInflate = errors.New("invalid deflate data")

func (d *inflater) bits(n uint) (int, error) {
	v := d.bitbuf
	for d.bitcnt < n {
		if d.pos >= len(d.in) {
			return 0, io.ErrUnexpectedEOF
		}
		v |= uint32(d.in[d.pos]) << d.bitcnt
		d.pos++
		d.bitcnt += 8
	}
	d.bitbuf = v >> n
	d.bitcnt -= n
	return int(v & (1<<n - 1)), nil
}

type huffman struct {
	count  [16]int
	symbol []int
}

func newHuffman(lengths []int) (*huffman, error) {
	h := &huffman{symbol: make([]int, len(lengths))}
	for _, l := range lengths {
		h.count[l]++
	}
	if h.count[0] == len(lengths) {
		return h, nil // no codes: complete but useless
	}
	left := 1
	for l := 1; l < 16; l++ {
		left <<= 1
		left -= h.count[l]
		if left < 0 {
			return nil, errInflate // over-subscribed
		}
	}
	var offs [16]int
	for l := 1; l < 15; l++ {
		offs[l+1] = offs[l] + h.count[l]
	}
	for sym, l := range lengths {
		if l != 0 {
			h.symbol[offs[l]] = sym
			offs[l]++
		}
	}
	return h, nil
}

func (d *inflater) decode(h *huffman) (int, error) {
	code, first, index := 0, 0, 0
	for l := 1; l < 16; l++ {
		b, err := d.bits(1)
		if err != nil {
			return 0, err
		}
		code |= b
		count := h.count[l]
		if code-count < first {
			return h.symbol[index+(code-first)], nil
		}
		index += count
		first += count
		first <<= 1
		code <<= 1
	}
	return 0, errInflate
}

var (
	lenBase  = [29]int{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lenExtra = [29]uint{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	dstBase  = [30]int{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	dstExtra = [30]uint{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

	fixedOnce          sync.Once
	fixedLit, fixedDst *huffman
)

func (d *inflater) codes(lit, dst *huffman) error {
	for {
		sym, err := d.decode(lit)
		if err != nil {
			return err
		}
		switch {
		case sym < 256:
			d.out = append(d.out, byte(sym))
			continue
		case sym == 256:
			return nil
		}
		sym -= 257
		if sym >= 29 {
			return errInflate
		}
		e, err := d.bits(lenExtra[sym])
		if err != nil {
			return err
		}
		n := lenBase[sym] + e
		ds, err := d.decode(dst)
		if err != nil {
			return err
		}
		if ds >= 30 {
			return errInflate
		}
		e, err = d.bits(dstExtra[ds])
		if err != nil {
			return err
		}
		dist := dstBase[ds] + e
		if dist > len(d.out) {
			return fmt.Errorf("distance %d too far back (%d bytes of history)", dist, len(d.out))
		}
		d.maxDist = max(d.maxDist, dist)
		for range n {
			d.out = append(d.out, d.out[len(d.out)-dist])
		}
	}
}

func (d *inflater) stored() error {
	d.bitbuf, d.bitcnt = 0, 0
	if d.pos+4 > len(d.in) {
		return io.ErrUnexpectedEOF
	}
	n := int(binary.LittleEndian.Uint16(d.in[d.pos:]))
	if ^uint16(n) != binary.LittleEndian.Uint16(d.in[d.pos+2:]) {
		return errInflate
	}
	d.pos += 4
	if d.pos+n > len(d.in) {
		return io.ErrUnexpectedEOF
	}
	d.out = append(d.out, d.in[d.pos:d.pos+n]...)
	d.pos += n
	return nil
}

func (d *inflater) fixed() error {
	fixedOnce.Do(func() {
		var l [288]int
		for i := range l {
			switch {
			case i < 144:
				l[i] = 8
			case i < 256:
				l[i] = 9
			case i < 280:
				l[i] = 7
			default:
				l[i] = 8
			}
		}
		fixedLit, _ = newHuffman(l[:])
		var dl [30]int
		for i := range dl {
			dl[i] = 5
		}
		fixedDst, _ = newHuffman(dl[:])
	})
	return d.codes(fixedLit, fixedDst)
}

var clOrder = [19]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

func (d *inflater) dynamic() error {
	nlen, err := d.bits(5)
	if err != nil {
		return err
	}
	ndst, err := d.bits(5)
	if err != nil {
		return err
	}
	ncode, err := d.bits(4)
	if err != nil {
		return err
	}
	nlen, ndst, ncode = nlen+257, ndst+1, ncode+4
	if nlen > 286 || ndst > 30 {
		return errInflate
	}
	var cl [19]int
	for i := range ncode {
		if cl[clOrder[i]], err = d.bits(3); err != nil {
			return err
		}
	}
	clh, err := newHuffman(cl[:])
	if err != nil {
		return err
	}
	lengths := make([]int, nlen+ndst)
	for i := 0; i < len(lengths); {
		sym, err := d.decode(clh)
		if err != nil {
			return err
		}
		if sym < 16 {
			lengths[i] = sym
			i++
			continue
		}
		val, rep := 0, 0
		switch sym {
		case 16:
			if i == 0 {
				return errInflate
			}
			val = lengths[i-1]
			r, err := d.bits(2)
			if err != nil {
				return err
			}
			rep = 3 + r
		case 17:
			r, err := d.bits(3)
			if err != nil {
				return err
			}
			rep = 3 + r
		default:
			r, err := d.bits(7)
			if err != nil {
				return err
			}
			rep = 11 + r
		}
		if i+rep > len(lengths) {
			return errInflate
		}
		for range rep {
			lengths[i] = val
			i++
		}
	}
	if lengths[256] == 0 {
		return errInflate
	}
	lit, err := newHuffman(lengths[:nlen])
	if err != nil {
		return err
	}
	dst, err := newHuffman(lengths[nlen:])
	if err != nil {
		return err
	}
	return d.codes(lit, dst)
}

// inflate decodes one permessage-deflate message (RFC 7692 §7.2.2: the
// stripped 00 00 ff ff is appended). With takeover the previous messages'
// last 32 KiB are the window; without, the window starts empty. It returns
// the message and the largest back-reference distance used.
func (d *inflater) inflate(msg []byte, takeover bool) ([]byte, int, error) {
	if !takeover {
		d.out = d.out[:0]
	}
	if len(d.out) > 32<<10 {
		d.out = append(d.out[:0], d.out[len(d.out)-32<<10:]...)
	}
	start := len(d.out)
	d.in = append(append(d.in[:0], msg...), 0, 0, 0xff, 0xff)
	d.pos, d.bitbuf, d.bitcnt, d.maxDist = 0, 0, 0, 0
	for d.pos < len(d.in) || d.bitcnt >= 3 {
		last, err := d.bits(1)
		if err != nil {
			return nil, 0, err
		}
		typ, err := d.bits(2)
		if err != nil {
			return nil, 0, err
		}
		switch typ {
		case 0:
			err = d.stored()
		case 1:
			err = d.fixed()
		case 2:
			err = d.dynamic()
		default:
			err = errInflate
		}
		if err != nil {
			return nil, 0, err
		}
		if last == 1 {
			break
		}
	}
	return append([]byte(nil), d.out[start:]...), d.maxDist, nil
}

// ---- test data ----

// textData is compressible ASCII text (JSON-like), as Autobahn's data1.json.
func textData(n int, seed uint64) []byte {
	rng := mrand.New(mrand.NewPCG(seed, 7))
	words := []string{"id", "name", "value", "items", "ovbus", "topic", "payload", "true", "false", "null", "sensor", "temperature", "humidity", "timestamp"}
	var b bytes.Buffer
	for b.Len() < n {
		fmt.Fprintf(&b, `{"%s": "%s-%d", "%s": [%d, %d.%d, "%s"]},`+"\n",
			words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(1000),
			words[rng.IntN(len(words))], rng.IntN(100000), rng.IntN(100), rng.IntN(100), words[rng.IntN(len(words))])
	}
	return b.Bytes()[:n]
}

// binaryData is partly compressible binary data (a noisy gradient, as a
// bitmap picture).
func binaryData(n int, seed uint64) []byte {
	rng := mrand.New(mrand.NewPCG(seed, 9))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/512+i%512/4) + byte(rng.IntN(4))
	}
	return b
}

// TestConformanceInflater checks the harness's own deflate decoder against
// two compressors, at every level, with and without a shared window.
func TestConformanceInflater(t *testing.T) {
	src := append(textData(100<<10, 1), binaryData(60<<10, 2)...)
	for _, level := range []int{flate.HuffmanOnly, flate.NoCompression, 1, 5, 9} {
		for _, takeover := range []bool{false, true} {
			var buf bytes.Buffer
			w, err := flate.NewWriter(&buf, level)
			if err != nil {
				t.Fatal(err)
			}
			var d inflater
			for i, n := range []int{0, 1, 100, 40 << 10, 70 << 10, 300, 50 << 10} {
				msg := src[i*1000 : i*1000+n]
				if !takeover {
					w.Reset(&buf)
				}
				buf.Reset()
				w.Write(msg)
				w.Flush()
				z := bytes.TrimSuffix(buf.Bytes(), []byte{0, 0, 0xff, 0xff})
				got, _, err := d.inflate(z, takeover)
				if err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("level %d takeover %v message %d: %v, equal=%v", level, takeover, i, err, bytes.Equal(got, msg))
				}
			}
		}
	}
	// A window-limited compressor never refers further back than its window.
	var buf bytes.Buffer
	w, _ := flate.NewWriterWindow(&buf, 256)
	w.Write(src[:64<<10])
	w.Flush()
	var d inflater
	got, maxDist, err := d.inflate(bytes.TrimSuffix(buf.Bytes(), []byte{0, 0, 0xff, 0xff}), false)
	if err != nil || !bytes.Equal(got, src[:64<<10]) || maxDist > 256 || maxDist == 0 {
		t.Fatalf("window 256: err %v, max distance %d", err, maxDist)
	}
}
