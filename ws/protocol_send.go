package ws

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"slices"
	"unsafe"
)

// The sending side of a Protocol: frames appended to the caller's buffer,
// masked with a fresh key on a client (RFC 6455 §5.3).

// canSendData reports whether data frames may still be sent: not after our
// Close (RFC 6455 §5.5.1 "MUST NOT send any more data frames").
func (p *Protocol) canSendData() error {
	if st := p.State(); st == StateCloseSent || st == StateClosed {
		return ErrClosed
	}
	return nil
}

// AppendMessage appends a whole message as one frame: compressed if
// permessage-deflate was negotiated and payload is at least the compression
// threshold long (RFC 7692 §6.1), masked if the Protocol is a client.
// op must be OpText or OpBinary; text is not validated.
func (p *Protocol) AppendMessage(dst []byte, op Opcode, payload []byte) ([]byte, error) {
	// The commonest message is encoded here rather than in appendFrame: an
	// uncompressed data frame of up to smallFrameMax bytes while data may be
	// sent and no fragmented message is open. Everything else, errors
	// included, takes appendMessage. The encoding repeats appendFrame's
	// small-frame tail on purpose: as a shared function it would not inline.
	n := len(payload)
	client := p.role == RoleClient
	if st := p.State(); uint8(op)-uint8(OpText) > 1 || p.fl != nil || p.outOpen ||
		(st != StateOpen && st != StateCloseReceived) || n > smallFrameMax(client) {
		return p.appendMessage(dst, op, payload)
	}
	var k32 uint32
	if client {
		k32 = p.maskKey()
	}
	w, hs := smallHeader(bitFin|byte(op), n, client, k32)
	start := len(dst)
	dst = slices.Grow(dst, 8+n)
	// Past Grow the frame's bytes are within dst's capacity: written through
	// a pointer, without a bounds check for each piece.
	at := unsafe.Add(unsafe.Pointer(unsafe.SliceData(dst)), start)
	binary.LittleEndian.PutUint64((*[8]byte)(at)[:], w) // the payload goes over the word's tail
	dst = dst[:start+hs+n]
	to := (*byte)(unsafe.Add(at, hs))
	if client {
		maskXOR(to, unsafe.SliceData(payload), n, k32) // n may be 0
	} else if uint(n-1) < 256 && hasAVX2 {
		// Fewer instructions than memmove up to 256 bytes.
		copySmall(to, unsafe.SliceData(payload), n)
	} else {
		copy(dst[start+hs:], payload)
	}
	return dst, nil
}

// appendMessage is AppendMessage for every other case.
//
//go:noinline
func (p *Protocol) appendMessage(dst []byte, op Opcode, payload []byte) ([]byte, error) {
	if !op.IsData() {
		return dst, errNotData
	}
	if err := p.canSendData(); err != nil {
		return dst, err
	}
	if p.outOpen {
		return dst, errStreamOpen
	}
	if p.fl != nil && len(payload) >= p.fl.threshold {
		return p.fl.appendCompressed(dst, op, payload, p.role == RoleClient)
	}
	return p.appendFrame(dst, true, op, payload), nil
}

// AppendMessageHeader appends only the header of the frame that
// AppendMessage would append for a message of n bytes, for a server that
// writes the payload itself right after it, unchanged (with writev, say,
// instead of copying it behind the header). That is possible when the
// message goes out as one plain frame: ok is false, and nothing is appended,
// for a client (its frames are masked, RFC 6455 §5.3) and when
// permessage-deflate would compress the message; use AppendMessage then.
func (p *Protocol) AppendMessageHeader(dst []byte, op Opcode, n int) (_ []byte, ok bool, err error) {
	if !op.IsData() {
		return dst, false, errNotData
	}
	if err := p.canSendData(); err != nil {
		return dst, false, err
	}
	if p.outOpen {
		return dst, false, errStreamOpen
	}
	if p.role == RoleClient || (p.fl != nil && n >= p.fl.threshold) {
		return dst, false, nil
	}
	return AppendHeader(dst, Header{Fin: true, Op: op, Length: int64(n)}), true, nil
}

// AppendFrame appends one frame of a message sent in pieces: the first with
// op OpText or OpBinary, the rest with OpContinuation, the last with fin
// set (RFC 6455 §5.4). Streamed messages are not compressed. Control
// opcodes are accepted too (fin must be true, payload at most 125 bytes).
func (p *Protocol) AppendFrame(dst []byte, op Opcode, payload []byte, fin bool) ([]byte, error) {
	switch {
	case op.IsControl():
		if !fin || len(payload) > MaxControlPayload || op.IsReserved() {
			return dst, errControlLen
		}
		if op == OpClose {
			if len(payload) == 1 {
				return dst, errSendCloseCode
			}
			if len(payload) >= 2 {
				return p.AppendClose(dst, StatusCode(binary.BigEndian.Uint16(payload)), string(payload[2:]))
			}
			return p.AppendClose(dst, 0, "")
		}
		return p.appendFrame(dst, true, op, payload), nil
	case op == OpContinuation:
		if !p.outOpen {
			return dst, errNoStream
		}
	case op.IsData():
		if p.outOpen {
			return dst, errStreamOpen
		}
	default:
		return dst, errNotData
	}
	if err := p.canSendData(); err != nil {
		return dst, err
	}
	p.outOpen = !fin
	return p.appendFrame(dst, fin, op, payload), nil
}

// AppendPing appends a Ping frame (RFC 6455 §5.5.2). A payload longer than
// 125 bytes is truncated.
func (p *Protocol) AppendPing(dst, payload []byte) []byte {
	return p.appendFrame(dst, true, OpPing, payload[:min(len(payload), MaxControlPayload)])
}

// AppendPong appends a Pong frame (RFC 6455 §5.5.3); to answer a Ping pass
// its payload. A payload longer than 125 bytes is truncated.
func (p *Protocol) AppendPong(dst, payload []byte) []byte {
	return p.appendFrame(dst, true, OpPong, payload[:min(len(payload), MaxControlPayload)])
}

// AppendClose appends a Close frame (RFC 6455 §5.5.1) and records that it
// was sent: StateOpen becomes StateCloseSent, StateCloseReceived becomes
// StateClosed. Code 0 or StatusNoStatusRcvd sends a Close without a
// payload (reason must then be empty); other codes must satisfy
// ValidCloseCode, and reason must be valid UTF-8 of at most 123 bytes.
// It returns ErrClosed if a Close was already sent or the connection
// failed (use AppendPendingClose then).
func (p *Protocol) AppendClose(dst []byte, code StatusCode, reason string) ([]byte, error) {
	if st := p.State(); st == StateCloseSent || st == StateClosed {
		return dst, ErrClosed
	}
	if code == 0 || code == StatusNoStatusRcvd {
		if reason != "" {
			return dst, errSendCloseCode
		}
		code = 0
	} else if !ValidCloseCode(code) {
		return dst, errSendCloseCode
	}
	if len(reason) > MaxControlPayload-2 {
		return dst, errCloseReasonLen
	}
	if !validUTF8([]byte(reason)) {
		return dst, errCloseReasonUTF8
	}
	p.mu.Lock()
	switch p.State() {
	case StateOpen:
		p.st.Store(uint32(StateCloseSent))
	case StateCloseReceived:
		p.st.Store(uint32(StateClosed))
	default:
		p.mu.Unlock()
		return dst, ErrClosed
	}
	p.mu.Unlock()
	return p.appendClose(dst, code, reason), nil
}

func (p *Protocol) appendClose(dst []byte, code StatusCode, reason string) []byte {
	var b [MaxControlPayload]byte
	n := 0
	if code != 0 {
		binary.BigEndian.PutUint16(b[:], uint16(code))
		n = 2 + copy(b[2:], reason)
	}
	return p.appendFrame(dst, true, OpClose, b[:n])
}

// appendFrame appends a frame carrying payload, masking it with a fresh
// random key if the Protocol is a client (RFC 6455 §5.3). The header is
// written in place, with the minimal length encoding (§5.2), behind one
// capacity check for header and payload.
func (p *Protocol) appendFrame(dst []byte, fin bool, op Opcode, payload []byte) []byte {
	n := len(payload)
	client := p.role == RoleClient
	if n > smallFrameMax(client) {
		return p.appendLargeFrame(dst, fin, op, payload)
	}
	b0 := byte(op & 0xF)
	if fin {
		b0 |= bitFin
	}
	var k32 uint32
	if client {
		k32 = p.maskKey()
	}
	w, hs := smallHeader(b0, n, client, k32)
	start := len(dst)
	dst = slices.Grow(dst, 8+n)
	binary.LittleEndian.PutUint64(dst[start:start+8], w) // the payload goes over the word's tail
	dst = dst[:start+hs+n]
	if client {
		maskCopy(dst[start+hs:], payload, k32)
	} else {
		copy(dst[start+hs:], payload)
	}
	return dst
}

// smallFrameMax is the longest payload that appendFrame and AppendMessage
// encode with smallHeader: the 16-bit length's limit, and for a client
// 16 KiB, above which memmove plus an in-place mask beats the one-pass
// maskCopy (appendLargeFrame).
func smallFrameMax(client bool) int {
	if client {
		return 16 << 10
	}
	return 0xFFFF
}

// smallHeader returns the header of a frame with first byte b0 and n <=
// 0xFFFF payload bytes, masked with key when masked is set, as a word to
// store little-endian at the frame's start, and its length hs (2, 4, 6 or
// 8); the word's bytes from hs on are zero. The length is encoded in the
// minimal number of bytes (RFC 6455 §5.2); the choice is made without a
// jump, since n varies from frame to frame.
func smallHeader(b0 byte, n int, masked bool, key uint32) (w uint64, hs int) {
	e := (125 - n) >> 63 & 1 // n > 125: a 16-bit length
	long := 126 | uint64(bits.ReverseBytes16(uint16(n)))<<8
	w = uint64(b0) | (uint64(n)^((uint64(n)^long)&-uint64(e)))<<8
	hs = 2 + 2*e
	if masked {
		w |= bitMask<<8 | uint64(key)<<(8*hs)
		hs += 4
	}
	return w, hs
}

// appendLargeFrame is appendFrame for a payload longer than 0xFFFF bytes,
// or a client's longer than 16 KiB.
func (p *Protocol) appendLargeFrame(dst []byte, fin bool, op Opcode, payload []byte) []byte {
	h := Header{Fin: fin, Op: op, Length: int64(len(payload))}
	if p.role != RoleClient {
		return append(AppendHeader(dst, h), payload...)
	}
	// Large payloads: memmove plus an in-place mask beats maskCopy.
	k32 := p.maskKey()
	h.Masked = true
	binary.LittleEndian.PutUint32(h.Mask[:], k32)
	dst = AppendHeader(dst, h)
	start := len(dst)
	dst = append(dst, payload...)
	maskWords(dst[start:], k32)
	return dst
}

// newMaskKey returns a masking key. RFC 6455 §5.3 asks for keys that the
// application cannot predict; math/rand/v2's global generator is a ChaCha8
// stream seeded by the runtime from the operating system.
func newMaskKey() uint32 { return rand.Uint32() }

// newKeySeed returns the starting state of a client's masking-key
// generator (maskKey): 64 bits of math/rand/v2's global ChaCha8 stream,
// which the runtime seeds from the operating system's random source.
func newKeySeed() uint64 { return rand.Uint64() }

// maskKey returns a masking key for the sending side: a step of wyrand (a
// Weyl sequence through a 64×64→128-bit multiply whose halves are folded)
// on a state of the Protocol's own, seeded from the operating system's
// randomness (newKeySeed): a few instructions instead of a draw from the
// global ChaCha8 generator. gorilla/websocket and gws do not use a
// cryptographic generator either.
//
// Why that is enough (RFC 6455 §5.3, §10.3): masking exists so that a
// hostile script, which chooses the payload, cannot make its frames look
// like other traffic to an intermediary that does not speak WebSocket; for
// that the key of a frame must be unknown to whoever chooses its payload
// before the frame is sent. The state starts from 64 random bits no caller
// sees, and every key depends on all of them. It is not cryptographically
// strong: someone who records many keys (they travel in clear) could in
// principle foresee the next ones. Only a program relaying payloads chosen
// by others who also see its frames on the wire would need more. Messages
// that permessage-deflate compresses still take keys from ChaCha8
// (newMaskKey).
func (p *Protocol) maskKey() uint32 {
	p.keys += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(p.keys, p.keys^0xe7037ed1a0b428db)
	return uint32(hi ^ lo)
}

// AppendPrepared is like PreparedFrame but appends a copy of the frame.
func (p *Protocol) AppendPrepared(dst []byte, m *PreparedMessage) ([]byte, error) {
	f, err := p.PreparedFrame(m)
	if err != nil {
		return dst, err
	}
	return append(dst, f...), nil
}
