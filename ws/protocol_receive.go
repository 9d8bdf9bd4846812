package ws

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"unsafe"
)

// The receiving side of a Protocol, bytes in: Receive copies them into the
// receive buffer, ReadBuffer and Commit let the caller read into it, and
// ReceivePayload reads the rest of a large frame into the caller's memory.

// Receive appends bytes read from the network. The bytes are copied; data
// may be reused as soon as Receive returns. Bytes received after the peer's
// Close frame or after a failure are discarded (RFC 6455 §5.5.1).
func (p *Protocol) Receive(data []byte) {
	rs := p.recv()
	// openPlain: no permessage-deflate and neither a Close frame nor a failure
	// received, so nothing is discarded. With every received byte processed,
	// data (1 to cap(buf) bytes) fits from the start.
	buf := rs.buf
	if !p.openPlain || rs.r != len(buf) || uint(len(data)-1) >= uint(cap(buf)) || cap(buf) > 1<<20 {
		p.receiveSlow(data)
		return
	}
	rs.r = 0
	buf = buf[:len(data)] // rs.buf below takes only the length: same array
	// When data is exactly one frame that Next's fast path would take
	// (nextFast's conditions, in the same order), it is decoded here, in the
	// copy: header copied, payload unmasked and checked for ASCII in the same
	// pass (other text is validated here), and the frame marked ready so that
	// Next hands it out as it is. Frames of up to 6 bytes are left to Next,
	// and a frame that breaks a rule is never taken here.
	//
	// data must not start inside the buffer (a caller handing back an Event's
	// Payload, which copy allows): the header, stored first, could overwrite
	// payload bytes not yet read.
	if len(data) >= 8 && !rs.inFrame && !rs.msgOpen &&
		uintptr(unsafe.Pointer(unsafe.SliceData(data)))-uintptr(unsafe.Pointer(unsafe.SliceData(buf))) >= uintptr(cap(buf)) {
		w := binary.LittleEndian.Uint64(data)
		b0 := byte(w)
		masked := w&(bitMask<<8) != 0
		// A final text or binary frame, masked exactly when it comes from
		// a client (RFC 6455 §5.1): the mask bit (bit 15 of w) differs
		// from the role (RoleServer is 0, RoleClient 1).
		if b0-(bitFin|byte(OpText)) <= 1 && (w>>15^uint64(p.role))&1 != 0 {
			l, n := int(w>>8&0x7F), 2
			if l >= 126 {
				// 126: a 16-bit length, minimal only from 126 on
				// (§5.2); 127 (a 64-bit length) is beyond wholeMax.
				l, n = int(bits.ReverseBytes16(uint16(w>>16))), 4
				if w>>8&0x7F == 127 || l < 126 {
					l = -1
				}
			}
			var k32 uint32
			if masked {
				k32 = uint32(w >> (8 * n)) // the key follows the length
				n += 4
			}
			if uint(l) <= uint(p.wholeMax) && n+l == len(data) { // l < 0: no
				binary.LittleEndian.PutUint64(buf, w) // the payload goes over the word's tail
				rs.buf = rs.buf[:len(data)]
				rs.ready = uint8(n)
				// n+l is len(data), within buf's capacity and data. Only
				// text needs to know whether the bytes are ASCII.
				to := (*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(buf)), n))
				from := (*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(data)), n))
				if b0 != bitFin|byte(OpText) {
					maskXOR(to, from, l, k32)
				} else if l > 0 && maskCopyHi(to, from, l, k32) != 0 {
					p.readyText()
				}
				return
			}
		}
	}
	rs.buf = rs.buf[:copy(buf, data)]
}

// readyText validates the text that Receive decoded ahead when it is not
// ASCII; invalid, it is put back as received (unready), for the general
// path to fail the connection.
//
//go:noinline
func (p *Protocol) readyText() {
	if !validUTF8(p.buf[p.ready:]) {
		p.unready()
	}
}

// receiveSlow is Receive but for its fast path.
//
//go:noinline
func (p *Protocol) receiveSlow(data []byte) {
	if p.fl != nil {
		p.fl.releaseOut()
	}
	if st := p.State(); st == StateClosed || st == StateCloseReceived || len(data) == 0 {
		return
	}
	if p.r == len(p.buf) && len(data) <= cap(p.buf) && cap(p.buf) <= 1<<20 {
		// All processed, and data fits from the start.
		p.buf = p.buf[:copy(p.buf[:len(data)], data)]
		p.r = 0
		return
	}
	if p.buf == nil && p.openPlain {
		// No buffer yet (or given back): make it, and take the fast
		// path, which may decode data.
		p.buf, p.r = make([]byte, 0, max(p.bufHint, len(data))), 0
		if cap(p.buf) <= 1<<20 {
			p.Receive(data)
			return
		}
	}
	p.receiveMore(data)
}

// receiveMore is Receive when data does not go to the start of the receive
// buffer: unprocessed bytes are kept, or data does not fit.
//
//go:noinline
func (p *Protocol) receiveMore(data []byte) {
	if p.ready != 0 {
		p.unready()
	}
	if p.r > 0 {
		switch {
		case p.r < len(p.buf):
			n := copy(p.buf, p.buf[p.r:])
			p.buf = p.buf[:n]
		case cap(p.buf) > 1<<20 && len(data) < cap(p.buf)/4:
			p.buf = nil // do not keep a buffer grown by one huge Receive
		default:
			p.buf = p.buf[:0] // all processed: nothing to move
		}
		p.r = 0
	}
	if p.buf == nil {
		p.buf = make([]byte, 0, max(p.bufHint, len(data)))
	}
	p.buf = append(p.buf, data...)
}

// unready turns the frame that Receive decoded ahead back into the bytes
// received (the payload masked again with its key: masking is its own
// inverse), for every path but Next's use of it: more bytes received or
// read in behind it, the general path.
func (p *Protocol) unready() {
	b := p.buf
	n := int(p.ready)
	p.ready = 0
	if b[1]&bitMask != 0 {
		maskWords(b[n:], binary.LittleEndian.Uint32(b[n-4:]))
	}
}

// ReadBuffer returns free space at the end of the receive buffer, at least
// min bytes, for the caller to read network bytes into; Commit(n) then takes
// the first n of them as received. Together they are Receive without the
// copy. ReadBuffer may move the unprocessed bytes, so, like Receive, it ends
// the validity of the last Event's Payload. The buffer starts at
// Config.ReadBufferSize and grows only when min bytes do not fit beside the
// unprocessed ones.
func (p *Protocol) ReadBuffer(min int) []byte {
	p.recv()
	if p.fl != nil {
		p.fl.releaseOut()
	}
	if p.ready != 0 {
		p.unready()
	}
	if p.r == len(p.buf) {
		if cap(p.buf) > 1<<20 && cap(p.buf) > p.bufHint && min < cap(p.buf)/4 {
			p.buf = nil // do not keep a buffer grown for one huge read
		} else {
			p.buf = p.buf[:0]
		}
		p.r = 0
	}
	if cap(p.buf)-len(p.buf) < min {
		if p.r > 0 {
			n := copy(p.buf, p.buf[p.r:])
			p.buf = p.buf[:n]
			p.r = 0
		}
		if cap(p.buf)-len(p.buf) < min {
			if len(p.buf) == 0 && min <= p.bufHint && pooledSize(p.bufHint) {
				// Given back by ReleaseReadBuffer, or new.
				p.bufp, p.buf = getBuf(p.bufHint)
			} else {
				nb := make([]byte, len(p.buf), max(p.bufHint, len(p.buf)+min))
				copy(nb, p.buf)
				p.buf = nb
			}
		}
	}
	return p.buf[len(p.buf):cap(p.buf)]
}

// ReleaseReadBuffer gives the receive buffer back to a pool shared by every
// Protocol when it holds no unprocessed bytes, and reports whether it did,
// so that a connection waiting for input holds no receive buffer; the next
// ReadBuffer takes one from the pool. Like ReadBuffer it ends the validity
// of the last Event's Payload. Only a buffer of ReadBufferSize, when that
// is a power of two from 4 KiB to 1 MiB, is given back. When no frame or
// message is under way either, the receiving side's state goes back to its
// pool with it.
func (p *Protocol) ReleaseReadBuffer() bool {
	if p.rxState == &idleRx || p.r != len(p.buf) || cap(p.buf) != p.bufHint || !pooledSize(p.bufHint) {
		return false
	}
	if p.fl != nil {
		p.fl.releaseOut()
	}
	if !p.inFrame && !p.msgOpen && !p.inflating && p.ready == 0 {
		// Between messages: every other field is dead until the next
		// frame's header sets it, and the buffer goes along with them.
		p.idleRecv(true)
		return true
	}
	if p.bufp == nil {
		p.bufp = new([]byte) // once: the box travels with the buffer
	}
	putBuf(p.bufp, p.buf)
	p.buf, p.bufp, p.r = nil, nil, 0
	return true
}

// betweenMessages reports whether the receiving side holds nothing of a
// message: every byte received processed, no frame or message under way.
func (p *Protocol) betweenMessages() bool {
	rs := p.rxState
	return rs.r == len(rs.buf) && !rs.inFrame && !rs.msgOpen && !rs.inflating && rs.ready == 0
}

// Commit takes n bytes, read into the start of the slice the last ReadBuffer
// returned (n is at most its length), as received. Like Receive, it discards
// them after the peer's Close frame or a failure.
func (p *Protocol) Commit(n int) {
	p.recv()
	if st := p.State(); st == StateClosed || st == StateCloseReceived || n <= 0 {
		return
	}
	if p.ready != 0 {
		p.unready()
	}
	p.buf = p.buf[:len(p.buf)+n]
}

// PayloadWanted returns how many more payload bytes the data frame being
// received has, when the caller may read them from the network straight
// into its own memory and hand them to ReceivePayload instead of Receive:
// while a frame of an uncompressed message is being received and every
// received byte has been processed. Otherwise it returns 0. A large message
// read this way is copied once, by the read system call.
func (p *Protocol) PayloadWanted() int64 {
	if !p.inFrame || p.msgCompressed || p.r != len(p.buf) {
		return 0
	}
	if st := p.State(); st == StateClosed || st == StateCloseReceived {
		return 0
	}
	return p.remaining
}

var errPayloadTooLong = errors.New("ws: ReceivePayload: more bytes than PayloadWanted")

// ReceivePayload takes b, the next bytes of the current frame's payload that
// the caller read from the network itself (at most PayloadWanted bytes), and
// returns the Event that Next would have returned for them: b is unmasked in
// place and text is validated, and Payload is b. It is Receive followed by
// Next, without the copy. After it, decoding goes on with Receive (or
// ReadBuffer) and Next as usual.
func (p *Protocol) ReceivePayload(b []byte) (Event, error) {
	p.recv()
	if p.ready != 0 {
		p.unready() // b stands in for buf below
	}
	if st := p.State(); st == StateOpen || st == StateCloseSent {
		if len(b) == 0 {
			return Event{}, nil
		}
		if int64(len(b)) > p.PayloadWanted() {
			return Event{}, errPayloadTooLong
		}
	}
	// Every received byte has been processed (PayloadWanted), so b can
	// stand in for the receive buffer while Next decodes it: Next's
	// payload path is the only one, and b is at most the rest of the frame,
	// so Next hands it out whole and reads no further.
	buf, r := p.buf, p.r
	p.buf, p.r = b[:len(b):len(b)], 0
	ev, err := p.Next()
	p.buf, p.r = buf, r
	return ev, err
}
