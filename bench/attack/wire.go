//go:build linux

package main

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The harness speaks WebSocket (RFC 6455) itself, on raw TCP, rather than
// through package ws: an attacker does not use a well-behaved client, the
// harness must send what a correct client never would (bombs, stalled
// handshakes, bad frames), and it must keep working while ws is rebuilt.

// WebSocket opcodes and close codes the harness uses (RFC 6455 §5.2, §7.4.1).
const (
	opText   = 0x1
	opBinary = 0x2
	opClose  = 0x8
	opPing   = 0x9
	opPong   = 0xA
)

// deflateOffer asks for permessage-deflate (RFC 7692) without context
// takeover in either direction, so that every message inflates on its own.
const deflateOffer = "permessage-deflate; client_no_context_takeover; server_no_context_takeover"

// dialOptions shape one connection.
type dialOptions struct {
	Deflate bool          // offer permessage-deflate
	Token   string        // ?token=…
	Timeout time.Duration // for the TCP connect and the handshake; 0: 10 s
	Source  net.IP        // local address to dial from (127.0.0.x), nil for any
}

// sources spreads connections over 127.0.0.2–127.0.0.254 so that hundreds of
// thousands of short connections do not run out of ephemeral ports.
var sourceNext atomic.Uint32

func nextSource() net.IP {
	n := sourceNext.Add(1)
	return net.IPv4(127, 0, 0, byte(2+n%253))
}

// conn is one raw client connection after a successful upgrade.
type conn struct {
	nc      net.Conn
	br      *bufio.Reader
	deflate bool // the server accepted permessage-deflate
}

// handshakeError is a refused upgrade: the HTTP status the server answered.
type handshakeError struct{ Status int }

func (e *handshakeError) Error() string { return fmt.Sprintf("upgrade refused: HTTP %d", e.Status) }

// dialTCP opens a TCP connection to addr, from o.Source when set.
func dialTCP(ctx context.Context, addr string, o dialOptions) (net.Conn, error) {
	d := net.Dialer{Timeout: o.Timeout}
	if d.Timeout == 0 {
		d.Timeout = 10 * time.Second
	}
	if o.Source != nil {
		d.LocalAddr = &net.TCPAddr{IP: o.Source}
	}
	return d.DialContext(ctx, "tcp", addr)
}

// dial connects to ws://addr/path and performs the opening handshake.
func dial(ctx context.Context, addr, path string, o dialOptions) (*conn, error) {
	nc, err := dialTCP(ctx, addr, o)
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	nc.SetDeadline(time.Now().Add(timeout))
	c, err := upgrade(nc, addr, path, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

// upgradeRequest is the opening handshake's request (RFC 6455 §4.1) for
// ws://addr/path.
func upgradeRequest(addr, path string, o dialOptions) string {
	var key [16]byte
	rand.Read(key[:])
	if o.Token != "" {
		path += "?token=" + o.Token
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", path, addr)
	fmt.Fprintf(&b, "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", base64.StdEncoding.EncodeToString(key[:]))
	if o.Deflate {
		fmt.Fprintf(&b, "Sec-WebSocket-Extensions: %s\r\n", deflateOffer)
	}
	b.WriteString("\r\n")
	return b.String()
}

func upgrade(nc net.Conn, addr, path string, o dialOptions) (*conn, error) {
	if _, err := io.WriteString(nc, upgradeRequest(addr, path, o)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
		return nil, &handshakeError{Status: resp.StatusCode}
	}
	ext := resp.Header.Get("Sec-WebSocket-Extensions")
	return &conn{nc: nc, br: br, deflate: strings.Contains(ext, "permessage-deflate")}, nil
}

// frame is one frame read from the server.
type frame struct {
	Fin, RSV1 bool
	Op        byte
	Payload   []byte // nil when read with discard
	Len       int64
}

// closeCode returns the code of a close frame, 1005 when it carries none.
func (f frame) closeCode() int {
	if len(f.Payload) < 2 {
		return 1005
	}
	return int(binary.BigEndian.Uint16(f.Payload))
}

// readFrame reads one frame. Payloads longer than keep bytes are discarded
// (Payload nil, Len set); control frames are always kept.
func (c *conn) readFrame(keep int64) (frame, error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return frame{}, err
	}
	f := frame{Fin: h[0]&0x80 != 0, RSV1: h[0]&0x40 != 0, Op: h[0] & 0x0F}
	n := int64(h[1] & 0x7F)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(c.br, ext[:]); err != nil {
			return f, err
		}
		n = int64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(c.br, ext[:]); err != nil {
			return f, err
		}
		n = int64(binary.BigEndian.Uint64(ext[:]))
	}
	if h[1]&0x80 != 0 { // a server must not mask (RFC 6455 §5.1); skip the key
		var k [4]byte
		if _, err := io.ReadFull(c.br, k[:]); err != nil {
			return f, err
		}
	}
	f.Len = n
	if n > keep && f.Op < opClose {
		_, err := io.CopyN(io.Discard, c.br, n)
		return f, err
	}
	f.Payload = make([]byte, n)
	_, err := io.ReadFull(c.br, f.Payload)
	return f, err
}

// appendFrame appends one client frame to dst. The mask key is zero: a
// valid key (RFC 6455 §5.3 asks only that it be unpredictable to
// intermediaries, which loopback has none of) that leaves the payload as it
// is, so floods cost no masking.
func appendFrame(dst []byte, fin, rsv1 bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	if rsv1 {
		b0 |= 0x40
	}
	n := len(payload)
	switch {
	case n < 126:
		dst = append(dst, b0, 0x80|byte(n))
	case n <= 0xFFFF:
		dst = append(dst, b0, 0x80|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, b0, 0x80|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	dst = append(dst, 0, 0, 0, 0)
	return append(dst, payload...)
}

// send writes one whole message, compressed when the connection negotiated
// permessage-deflate and compress is set.
func (c *conn) send(op byte, payload []byte, compress bool) error {
	if compress && c.deflate {
		_, err := c.nc.Write(appendFrame(nil, true, true, op, deflateBytes(payload)))
		return err
	}
	_, err := c.nc.Write(appendFrame(nil, true, false, op, payload))
	return err
}

// sendCompressed writes a frame whose payload is already deflated.
func (c *conn) sendCompressed(op byte, deflated []byte) error {
	_, err := c.nc.Write(appendFrame(nil, true, true, op, deflated))
	return err
}

// closeWith sends a close frame with code and closes the TCP connection
// without waiting for the answer.
func (c *conn) closeWith(code int) {
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	c.nc.Write(appendFrame(nil, true, false, opClose, binary.BigEndian.AppendUint16(nil, uint16(code))))
	c.nc.Close()
}

// readGreeting reads the first frame and checks it is the greeting of
// docs/protocol.md §2 (a text frame, compressed or not).
func (c *conn) readGreeting(timeout time.Duration) error {
	c.nc.SetReadDeadline(time.Now().Add(timeout))
	defer c.nc.SetReadDeadline(time.Time{})
	f, err := c.readFrame(1 << 16)
	if err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	if f.Op != opText {
		return fmt.Errorf("greeting: opcode %d, want text", f.Op)
	}
	p := f.Payload
	if f.RSV1 {
		if p, err = inflateBytes(p); err != nil {
			return fmt.Errorf("greeting: %w", err)
		}
	}
	if !bytes.Contains(p, []byte(`"connected"`)) {
		return fmt.Errorf("greeting: unexpected %q", p)
	}
	return nil
}

// outcome is how a connection ended, as the client saw it.
type outcome struct {
	Code   int    // close code received, 0 when none
	How    string // "close 1009", "EOF without close frame", "reset", "timeout"
	Frames int    // frames read before the end
}

// waitClose reads (discarding data) until the server closes or the timeout
// passes, and says how the connection ended.
func (c *conn) waitClose(timeout time.Duration) outcome {
	c.nc.SetReadDeadline(time.Now().Add(timeout))
	var o outcome
	for {
		f, err := c.readFrame(0)
		if err != nil {
			o.How = describeEnd(err)
			return o
		}
		if f.Op == opClose {
			o.Code = f.closeCode()
			o.How = fmt.Sprintf("close %d", o.Code)
			return o
		}
		o.Frames++
	}
}

// describeEnd names how a read ended.
func describeEnd(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF without close frame"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout (still open)"
	case strings.Contains(err.Error(), "reset"):
		return "reset without close frame"
	}
	return "error: " + err.Error()
}

// deflateBytes compresses p as one permessage-deflate message (RFC 7692
// §7.2.1: a sync flush with its 00 00 FF FF tail removed).
func deflateBytes(p []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	w.Write(p)
	w.Flush()
	return bytes.TrimSuffix(buf.Bytes(), []byte{0, 0, 0xFF, 0xFF})
}

// deflateZeros compresses n zero bytes without holding them.
func deflateZeros(n int64) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	zero := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, int64(len(zero)))
		w.Write(zero[:k])
		n -= k
	}
	w.Flush()
	return bytes.TrimSuffix(buf.Bytes(), []byte{0, 0, 0xFF, 0xFF})
}

// inflateBytes reverses deflateBytes.
func inflateBytes(p []byte) ([]byte, error) {
	r := flate.NewReader(io.MultiReader(bytes.NewReader(p), bytes.NewReader([]byte{0, 0, 0xFF, 0xFF, 1, 0, 0, 0xFF, 0xFF})))
	defer r.Close()
	return io.ReadAll(r)
}

// waitNotice reads until the bus's not-allowed notice (ovos.bus.error) for
// a frame this client sent, or the end of the connection.
func (c *conn) waitNotice(timeout time.Duration) error {
	c.nc.SetReadDeadline(time.Now().Add(timeout))
	defer c.nc.SetReadDeadline(time.Time{})
	for {
		f, err := c.readFrame(1 << 16)
		if err != nil {
			return fmt.Errorf("waiting for the notice: %s", describeEnd(err))
		}
		if f.Op == opClose {
			return fmt.Errorf("waiting for the notice: close %d", f.closeCode())
		}
		p := f.Payload
		if f.RSV1 {
			if p, err = inflateBytes(p); err != nil {
				return err
			}
		}
		if strings.Contains(string(p), "ovos.bus.error") {
			return nil
		}
	}
}
