package ws

import (
	"errors"
	"sync"
	"sync/atomic"
)

// PreparedMessage is a message encoded once as complete server frames, to
// be written unchanged to many connections (a broadcast). It holds the
// plain frame and, computed lazily on first use and cached, compressed
// frames made without context takeover (RFC 7692 §7.1.1): such a frame
// refers to nothing outside itself, so it can be decoded by any client that
// negotiated permessage-deflate. Frames are unmasked, so they are valid
// only from a server (RFC 6455 §5.1).
//
// A PreparedMessage is immutable and safe for concurrent use.
type PreparedMessage struct {
	plain []byte // the uncompressed frame
	co    CompressionOptions
	op    Opcode
	hlen  uint8                           // header length of plain
	z     atomic.Pointer[compressedForms] // made on the first use of a compressed form
}

// compressedForms are the compressed frames of a PreparedMessage, kept
// apart so that a message nobody compresses stays small (a broadcast
// allocates many).
type compressedForms struct {
	fullOnce  sync.Once
	full      []byte // compressed with a 32 KiB window (server_max_window_bits 15)
	smallOnce sync.Once
	small     []byte // compressed with a 256-byte window: valid for any window bits
}

// forms returns m's compressed forms, making them on first use.
func (m *PreparedMessage) forms() *compressedForms {
	if z := m.z.Load(); z != nil {
		return z
	}
	m.z.CompareAndSwap(nil, new(compressedForms))
	return m.z.Load()
}

var errPreparedControl = errors.New("ws: control message payload longer than 125 bytes")

// NewPreparedMessage encodes a message of type op (OpText or OpBinary; a
// control opcode is accepted for payloads up to 125 bytes and is never
// compressed). payload is copied. co decides the level and the threshold
// below which the compressed form is the plain form.
func NewPreparedMessage(op Opcode, payload []byte, co CompressionOptions) (*PreparedMessage, error) {
	_, m, err := AppendPreparedMessage(nil, op, payload, co)
	return m, err
}

// AppendPreparedMessage is NewPreparedMessage encoding the plain frame at
// the end of dst: it returns dst extended by the frame and the message,
// whose plain frame (Frame(false)) is those bytes, shared with dst: they
// must not change afterwards. Messages appended one after another to a
// buffer with room for them lie back to back, so that a run of them can be
// written as one slice (Conn.WritePreparedFrames). PreparedFrameSize tells
// how many bytes the frame takes.
func AppendPreparedMessage(dst []byte, op Opcode, payload []byte, co CompressionOptions) ([]byte, *PreparedMessage, error) {
	m := new(PreparedMessage)
	dst, err := AppendPreparedMessageTo(m, dst, op, payload, co)
	if err != nil {
		return dst, nil, err
	}
	return dst, m, nil
}

// AppendPreparedMessageTo is AppendPreparedMessage storing the message in
// *m, which the caller provides: for instance an element of an array in
// which it allocates many messages at once, to save an allocation per
// message. m must not be in use: a zero PreparedMessage, or one nobody
// refers to any more (it is overwritten whole). On error m is left as it
// was.
func AppendPreparedMessageTo(m *PreparedMessage, dst []byte, op Opcode, payload []byte, co CompressionOptions) ([]byte, error) {
	switch {
	case op.IsData():
	case op.IsControl() && !op.IsReserved():
		if len(payload) > MaxControlPayload {
			return dst, errPreparedControl
		}
	default:
		return dst, errNotData
	}
	h := Header{Fin: true, Op: op, Length: int64(len(payload))}
	hlen := HeaderSize(h)
	if dst == nil {
		dst = make([]byte, 0, hlen+len(payload))
	}
	start := len(dst)
	dst = AppendHeader(dst, h)
	dst = append(dst, payload...)
	*m = PreparedMessage{op: op, co: co.normalize(), plain: dst[start:len(dst):len(dst)], hlen: uint8(hlen)}
	return dst, nil
}

// PreparedFrameSize returns the length of the plain frame of a prepared
// message with a payload of n bytes.
func PreparedFrameSize(n int) int {
	return HeaderSize(Header{Fin: true, Length: int64(n)}) + n
}

// Op returns the message type.
func (m *PreparedMessage) Op() Opcode { return m.op }

// Payload returns the uncompressed payload. It must not be modified.
func (m *PreparedMessage) Payload() []byte { return m.plain[m.hlen:] }

// compressible reports whether the compressed forms differ from the plain.
func (m *PreparedMessage) compressible() bool {
	return m.op.IsData() && len(m.plain)-int(m.hlen) >= m.co.Threshold
}

// Frame returns the complete frame: if compressed, the permessage-deflate
// form made with the configured level, a 32 KiB window and no context
// takeover, valid for connections that negotiated permessage-deflate with
// server_max_window_bits 15 (the default); otherwise the plain frame.
// Payloads shorter than the threshold have compressed form == plain form.
// The result is shared and must not be modified.
func (m *PreparedMessage) Frame(compressed bool) []byte {
	if !compressed || !m.compressible() {
		return m.plain
	}
	z := m.forms()
	z.fullOnce.Do(func() { z.full = m.compressFrame(m.co.Level, 15) })
	return z.full
}

// FrameWindow is like Frame(true) for a connection whose negotiated
// server_max_window_bits is windowBits (8..15): below 15 it returns a form
// compressed with a 256-byte window, which is valid for every window size
// (RFC 7692 §7.1.2.1).
func (m *PreparedMessage) FrameWindow(windowBits int) []byte {
	if windowBits == 0 || windowBits >= 15 {
		return m.Frame(true)
	}
	if !m.compressible() {
		return m.plain
	}
	z := m.forms()
	z.smallOnce.Do(func() { z.small = m.compressFrame(m.co.Level, 8) })
	return z.small
}

func (m *PreparedMessage) compressFrame(level, bits int) []byte {
	payload := m.Payload()
	w := getWriter(level, bits)
	defer putWriter(level, bits, w)
	// The frame header is at most 10 bytes for a server frame; compress
	// after that and move the header in front.
	buf := make([]byte, 10, 10+len(payload)/2+64)
	buf, err := compress(w, buf, payload)
	if err != nil {
		return m.plain
	}
	n := len(buf) - 10
	h := Header{Fin: true, Rsv1: true, Op: m.op, Length: int64(n)}
	hl := HeaderSize(h)
	AppendHeader(buf[10-hl:10-hl], h)
	return buf[10-hl:]
}

var errPreparedClient = errors.New("ws: prepared messages are server frames; the Protocol is a client")

// PreparedFrame returns the frame of m to write on this connection: the
// compressed form if permessage-deflate was negotiated, the plain form
// otherwise. The bytes are shared by every connection (write them, do not
// modify them). Only a server can send prepared frames. If the Protocol
// compresses with context takeover, its compressor's window is reset, since
// the peer's window now holds data the compressor never saw (RFC 7692
// §7.2.3.3).
func (p *Protocol) PreparedFrame(m *PreparedMessage) ([]byte, error) {
	if p.role != RoleServer {
		return nil, errPreparedClient
	}
	if m.op.IsData() {
		if err := p.canSendData(); err != nil {
			return nil, err
		}
		if p.outOpen {
			return nil, errStreamOpen
		}
	} else if m.op == OpClose {
		pl := m.Payload()
		code := StatusCode(0)
		if len(pl) >= 2 {
			code = StatusCode(uint16(pl[0])<<8 | uint16(pl[1]))
		}
		// Validates and records the state change; the frame itself is
		// the prepared one.
		if _, err := p.AppendClose(nil, code, string(pl[min(2, len(pl)):])); err != nil {
			return nil, err
		}
		return m.plain, nil
	}
	if p.fl == nil || !m.compressible() {
		return m.plain, nil
	}
	f := m.FrameWindow(p.fl.bits)
	switch {
	case p.fl.contextual():
		p.fl.addContext(m.Payload()) // the peer inflates it into its window
	case p.fl.takeover:
		p.fl.resetCompressor()
	}
	return f, nil
}

// appendContextFrame appends m's frame for a connection that compresses
// with a context (CompressionOptions.Context): its payload compressed
// against that context, which it then joins. The caller checked that
// the Protocol is contextual and m compressible.
func (p *Protocol) appendContextFrame(dst []byte, m *PreparedMessage) ([]byte, error) {
	if err := p.canSendData(); err != nil {
		return dst, err
	}
	if p.outOpen {
		return dst, errStreamOpen
	}
	return p.fl.appendCompressed(dst, m.op, m.Payload(), false)
}
