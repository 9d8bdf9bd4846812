package ws

import (
	"encoding/binary"
	"io"
	"strconv"
)

// Opcode is a frame opcode (RFC 6455 §5.2, §11.8).
type Opcode byte

// Opcodes defined by RFC 6455 §5.2. 0x3-0x7 and 0xB-0xF are reserved.
const (
	OpContinuation Opcode = 0x0
	OpText         Opcode = 0x1
	OpBinary       Opcode = 0x2
	OpClose        Opcode = 0x8
	OpPing         Opcode = 0x9
	OpPong         Opcode = 0xA
)

// IsControl reports whether o is a control opcode (most significant bit set,
// RFC 6455 §5.5).
func (o Opcode) IsControl() bool { return o&0x8 != 0 }

// IsData reports whether o is OpText or OpBinary.
func (o Opcode) IsData() bool { return o == OpText || o == OpBinary }

// IsReserved reports whether o is one of the reserved opcodes 0x3-0x7, 0xB-0xF.
func (o Opcode) IsReserved() bool {
	return (o >= 0x3 && o <= 0x7) || o >= 0xB
}

func (o Opcode) String() string {
	switch o {
	case OpContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case OpClose:
		return "close"
	case OpPing:
		return "ping"
	case OpPong:
		return "pong"
	}
	return "opcode(" + strconv.Itoa(int(o)) + ")"
}

// Role is the side of the connection an endpoint plays; it decides masking
// (RFC 6455 §5.1, §5.3): a client masks every frame it sends, a server never
// does, and each side fails the connection if the other breaks the rule.
type Role uint8

const (
	RoleServer Role = iota // expects masked input, writes unmasked frames
	RoleClient             // expects unmasked input, writes masked frames
)

func (r Role) String() string {
	if r == RoleClient {
		return "client"
	}
	return "server"
}

// MaxControlPayload is the largest payload of a control frame (RFC 6455 §5.5).
const MaxControlPayload = 125

// MaxHeaderSize is the largest encoded frame header: 2 bytes, an 8 byte
// extended length and a 4 byte masking key (RFC 6455 §5.2).
const MaxHeaderSize = 14

// Header is a frame header (RFC 6455 §5.2).
type Header struct {
	Fin              bool
	Rsv1, Rsv2, Rsv3 bool
	Op               Opcode
	Masked           bool
	Mask             [4]byte
	Length           int64
}

const (
	bitFin  = 0x80
	bitRsv1 = 0x40
	bitRsv2 = 0x20
	bitRsv3 = 0x10
	bitMask = 0x80
)

// HeaderSize returns the encoded size of h.
func HeaderSize(h Header) int {
	n := 2
	switch {
	case h.Length > 0xFFFF:
		n += 8
	case h.Length > 125:
		n += 2
	}
	if h.Masked {
		n += 4
	}
	return n
}

// AppendHeader appends the encoding of h to dst using the minimal length
// encoding (RFC 6455 §5.2: "the minimal number of bytes MUST be used").
// h.Length must not be negative.
func AppendHeader(dst []byte, h Header) []byte {
	b0 := byte(h.Op & 0xF)
	if h.Fin {
		b0 |= bitFin
	}
	if h.Rsv1 {
		b0 |= bitRsv1
	}
	if h.Rsv2 {
		b0 |= bitRsv2
	}
	if h.Rsv3 {
		b0 |= bitRsv3
	}
	var b1 byte
	if h.Masked {
		b1 = bitMask
	}
	switch {
	case h.Length <= 125:
		dst = append(dst, b0, b1|byte(h.Length))
	case h.Length <= 0xFFFF:
		dst = append(dst, b0, b1|126, byte(h.Length>>8), byte(h.Length))
	default:
		dst = append(dst, b0, b1|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.Length))
	}
	if h.Masked {
		dst = append(dst, h.Mask[0], h.Mask[1], h.Mask[2], h.Mask[3])
	}
	return dst
}

// Errors returned by ParseHeader. They are *ProtocolError values with code
// 1002 (RFC 6455 §7.4.1).
var (
	errReservedOpcode   = protoErr(StatusProtocolError, "reserved opcode")
	errControlTooLong   = protoErr(StatusProtocolError, "control frame payload longer than 125 bytes")
	errControlFragment  = protoErr(StatusProtocolError, "fragmented control frame")
	errNonMinimalLength = protoErr(StatusProtocolError, "non-minimal payload length encoding")
	errLengthMSB        = protoErr(StatusProtocolError, "64-bit payload length with most significant bit set")
)

// ParseHeader parses a frame header from the start of b. It returns n == 0
// and a nil error when b does not yet hold a complete header. It validates
// what a header alone can show (RFC 6455 §5.2, §5.5): reserved opcodes,
// control frames that are fragmented or longer than 125 bytes, non-minimal
// length encodings and 64-bit lengths with the most significant bit set.
// Reserved bits and masking depend on the negotiated extensions and the
// role and are checked by Protocol. Violations are *ProtocolError.
func ParseHeader(b []byte) (h Header, n int, err error) {
	if len(b) < 2 {
		return h, 0, nil
	}
	b0, b1 := b[0], b[1]
	h.Fin = b0&bitFin != 0
	h.Rsv1 = b0&bitRsv1 != 0
	h.Rsv2 = b0&bitRsv2 != 0
	h.Rsv3 = b0&bitRsv3 != 0
	h.Op = Opcode(b0 & 0xF)
	h.Masked = b1&bitMask != 0
	if h.Op.IsReserved() {
		return h, 0, errReservedOpcode
	}
	l := int64(b1 & 0x7F)
	n = 2
	switch l {
	case 126:
		if len(b) < 4 {
			return h, 0, nil
		}
		l = int64(binary.BigEndian.Uint16(b[2:]))
		if l < 126 {
			return h, 0, errNonMinimalLength
		}
		n = 4
	case 127:
		if len(b) < 10 {
			return h, 0, nil
		}
		u := binary.BigEndian.Uint64(b[2:])
		if u>>63 != 0 {
			return h, 0, errLengthMSB
		}
		if u <= 0xFFFF {
			return h, 0, errNonMinimalLength
		}
		l = int64(u)
		n = 10
	}
	h.Length = l
	if h.Op.IsControl() {
		if l > MaxControlPayload {
			return h, 0, errControlTooLong
		}
		if !h.Fin {
			return h, 0, errControlFragment
		}
	}
	if h.Masked {
		if len(b) < n+4 {
			return h, 0, nil
		}
		copy(h.Mask[:], b[n:n+4])
		n += 4
	}
	return h, n, nil
}

// ReadHeader reads and parses one frame header from r. It reads exactly the
// header bytes. An io.EOF before the first byte is returned as io.EOF, a
// partial header as io.ErrUnexpectedEOF.
func ReadHeader(r io.Reader) (Header, error) {
	var buf [MaxHeaderSize]byte
	if _, err := io.ReadFull(r, buf[:2]); err != nil {
		return Header{}, err
	}
	need := 2
	switch buf[1] & 0x7F {
	case 126:
		need += 2
	case 127:
		need += 8
	}
	if buf[1]&bitMask != 0 {
		need += 4
	}
	if _, err := io.ReadFull(r, buf[2:need]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Header{}, err
	}
	h, _, err := ParseHeader(buf[:need])
	return h, err
}

// WriteHeader writes the encoding of h to w.
func WriteHeader(w io.Writer, h Header) error {
	var buf [MaxHeaderSize]byte
	_, err := w.Write(AppendHeader(buf[:0], h))
	return err
}
