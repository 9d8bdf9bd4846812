package ws

import (
	"encoding/binary"
	"errors"
)

// Events out of a Protocol: Next decodes the received bytes frame by frame
// and enforces every rule of RFC 6455 on them (framing, masking,
// fragmentation, UTF-8, control frames, limits).

var (
	errRsv             = protoErr(StatusProtocolError, "reserved bit set without a negotiated extension")
	errRsv1Control     = protoErr(StatusProtocolError, "RSV1 set on a control or continuation frame")
	errUnmasked        = protoErr(StatusProtocolError, "unmasked frame from client")
	errMasked          = protoErr(StatusProtocolError, "masked frame from server")
	errContNoStart     = protoErr(StatusProtocolError, "continuation frame without a message to continue")
	errMsgOpen         = protoErr(StatusProtocolError, "new data frame while a fragmented message is open")
	errFrameTooBig     = protoErr(StatusMessageTooBig, "frame exceeds the size limit")
	errMsgTooBig       = protoErr(StatusMessageTooBig, "message exceeds the size limit")
	errBadUTF8         = protoErr(StatusInvalidFramePayloadData, "invalid UTF-8 in text message")
	errBadCloseUTF8    = protoErr(StatusInvalidFramePayloadData, "invalid UTF-8 in close reason")
	errCloseLen1       = protoErr(StatusProtocolError, "close frame with a 1-byte payload")
	errCloseCode       = protoErr(StatusProtocolError, "invalid close code")
	errBadDeflate      = protoErr(StatusInvalidFramePayloadData, "invalid compressed data")
	errNotData         = errors.New("ws: opcode is not text or binary")
	errStreamOpen      = errors.New("ws: a fragmented message is being sent")
	errNoStream        = errors.New("ws: continuation without a fragmented message being sent")
	errControlLen      = errors.New("ws: control frame payload longer than 125 bytes")
	errCloseReasonLen  = errors.New("ws: close reason longer than 123 bytes")
	errCloseReasonUTF8 = errors.New("ws: close reason is not valid UTF-8")
	errSendCloseCode   = errors.New("ws: close code may not be sent")
)

// Next returns the next event decoded from the received bytes; Kind is
// EventNone when more bytes are needed.
//
// On a violation of the protocol or a limit Next returns a *ProtocolError,
// queues a Close frame with its code (fetch it with AppendPendingClose),
// and the Protocol moves to StateClosed (RFC 6455 §7.1.7); later calls
// return the same error. After an EventClose later calls return ErrClosed:
// nothing that follows a Close frame is processed (RFC 6455 §5.5.1).
//
// EventPing should be answered with AppendPong; EventClose, if the Protocol
// had not sent Close itself (State is StateCloseReceived), with AppendClose
// (RFC 6455 §5.5.1: echo the status code).
//
// A receive loop should call NextInto, which is Next without the copy of
// the Event.
func (p *Protocol) Next() (Event, error) {
	var ev Event
	err := p.NextInto(&ev)
	return ev, err
}

// NextInto is Next that stores every field of the event in *ev: the form
// for a receive loop reusing one Event, since an Event is too large to
// come back in registers and Next's result is copied on the way. What Next
// says of the Event and the errors holds; on an error *ev is the zero
// Event.
func (p *Protocol) NextInto(ev *Event) error {
	// Small enough to inline: the loop's last call, with every received byte
	// processed, returns what the general path would: EventNone while the
	// state is Open or CloseSent (openPlain), since without permessage-deflate
	// nothing is being inflated and a frame's end is dealt with by the call
	// that reaches it.
	if p.r == len(p.buf) && p.openPlain {
		*ev = Event{}
		return nil
	}
	return p.nextFast(ev)
}

// nextFast is NextInto's fast path and the way to the general path.
func (p *Protocol) nextFast(ev *Event) error {
	// idleRx, shared while the state is given back, has ready 0: the state
	// is taken (recv) only past the frame that Receive decoded.
	if rs := p.rxState; rs.ready != 0 {
		// A frame that Receive decoded: buf is that frame, its payload ready.
		n := int(rs.ready)
		rs.ready = 0
		b := rs.buf // r is 0
		rs.r = len(b)
		ev.Kind, ev.Op, ev.Payload, ev.Fin, ev.Code, ev.Reason = EventMessage, Opcode(b[0]&0xF), b[n:len(b):len(b)], true, 0, ""
		return nil
	}
	p.recv() // given back while idle: a Close or a failure is still reported
	if p.fl != nil {
		p.fl.releaseOut()
	}
	// The fast path, for the commonest frame: a whole uncompressed text or
	// binary message in one frame of at most wholeMax bytes, masked as the
	// role requires (RFC 6455 §5.1), wholly in the buffer while no fragmented
	// message is open (§5.4). Anything else, every violation included, goes to
	// the general path (next) with nothing consumed. The fast path leaves the
	// Protocol as the general path would, but for the state of the frame and
	// the message, which nothing reads after their end.
	if st := p.State(); (st == StateOpen || st == StateCloseSent) && !p.inFrame && !p.msgOpen && !p.inflating {
		b := p.buf[p.r:]
		if len(b) < 2 {
			if len(b) == 0 {
				// All received bytes are processed.
				*ev = Event{}
				return nil
			}
			goto general
		}
		b0, b1 := b[0], b[1]
		if b0 != bitFin|byte(OpText) && b0 != bitFin|byte(OpBinary) {
			goto general
		}
		masked := b1&bitMask != 0
		if masked != (p.role == RoleServer) {
			goto general
		}
		l, n := int(b1&0x7F), 2
		if l >= 126 {
			// 126: a 16-bit length, minimal only from 126 on (§5.2); 127
			// (a 64-bit length) is beyond wholeMax.
			if l == 127 || len(b) < 4 {
				goto general
			}
			l, n = int(binary.BigEndian.Uint16(b[2:])), 4
			if l < 126 {
				goto general
			}
		}
		if l > int(p.wholeMax) {
			goto general
		}
		var k32 uint32
		if masked {
			if len(b) < n+4 {
				goto general
			}
			k32 = binary.LittleEndian.Uint32(b[n:])
			n += 4
		}
		if len(b)-n < l {
			goto general
		}
		op := Opcode(b0 & 0xF)
		payload := b[n : n+l : n+l]
		p.r += n + l
		// The frame and its message end here: the general path's frame and
		// message state (hdr, maskPos, msgOp, msgSize, utf8...) is not read again
		// before the next frame sets it, so it is left unwritten.
		if masked {
			maskWords(payload, k32)
		}
		if op == OpText {
			if i := asciiPrefix(payload); i < len(payload) && !validRest(payload[i:]) {
				return p.failInto(ev, errBadUTF8)
			}
		}
		// Field by field: a composite literal would be built and copied.
		ev.Kind, ev.Op, ev.Payload, ev.Fin, ev.Code, ev.Reason = EventMessage, op, payload, true, 0, ""
		return nil
	}
general:
	return p.nextInto(ev)
}

// nextInto is the general path of NextInto, out of line so that its Event
// does not enlarge NextInto's frame.
//
//go:noinline
func (p *Protocol) nextInto(ev *Event) error {
	e, err := p.next()
	*ev = e
	return err
}

// failInto is fail for NextInto.
//
//go:noinline
func (p *Protocol) failInto(ev *Event, e *ProtocolError) error {
	*ev = Event{}
	_, err := p.fail(e)
	return err
}

// next is Next without the fast path: every frame goes through the general
// rules. The differential tests call it directly.
func (p *Protocol) next() (Event, error) {
	if p.ready != 0 {
		p.unready() // the general path decodes the frame itself
	}
	if p.fl != nil {
		p.fl.releaseOut()
	}
	if st := p.State(); st == StateClosed || st == StateCloseReceived {
		if err := p.Err(); err != nil {
			return Event{}, err
		}
		return Event{}, ErrClosed
	}
	if p.inflating {
		return p.nextInflated()
	}
	for {
		if !p.inFrame {
			h, n, err := ParseHeader(p.buf[p.r:])
			if err != nil {
				return p.fail(err.(*ProtocolError))
			}
			if n == 0 {
				return Event{}, nil
			}
			if perr := p.checkHeader(&h); perr != nil {
				return p.fail(perr)
			}
			if h.Op.IsControl() {
				total := n + int(h.Length)
				if len(p.buf)-p.r < total {
					return Event{}, nil
				}
				payload := p.buf[p.r+n : p.r+total]
				p.r += total
				if h.Masked {
					MaskBytes(h.Mask, 0, payload)
				}
				return p.control(h.Op, payload)
			}
			p.r += n
			p.hdr = h
			p.inFrame = true
			p.remaining = h.Length
			p.maskPos = 0
			if h.Op != OpContinuation {
				p.msgOpen = true
				p.msgOp = h.Op
				p.msgCompressed = h.Rsv1 // msgSize was set by checkHeader
				p.utf8.Reset()
			}
		}

		// Payload of a data frame, as far as it has arrived.
		avail := len(p.buf) - p.r
		if int64(avail) > p.remaining {
			avail = int(p.remaining)
		}
		chunk := p.buf[p.r : p.r+avail : p.r+avail]
		p.r += avail
		p.remaining -= int64(avail)
		if p.hdr.Masked {
			p.maskPos = MaskBytes(p.hdr.Mask, p.maskPos, chunk)
		}
		frameDone := p.remaining == 0
		if frameDone {
			p.inFrame = false
		}

		if p.msgCompressed {
			if perr := p.fl.appendInput(chunk, p.maxMsg); perr != nil {
				return p.fail(perr)
			}
			if frameDone && p.hdr.Fin {
				p.msgOpen = false
				if perr := p.fl.startInflate(p.maxMsg); perr != nil {
					return p.fail(perr)
				}
				p.inflating = true
				return p.nextInflated()
			}
			if !frameDone {
				return Event{}, nil
			}
			continue
		}

		fin := frameDone && p.hdr.Fin
		if p.msgOp == OpText {
			if !p.utf8.Write(chunk) || (fin && !p.utf8.Complete()) {
				return p.fail(errBadUTF8)
			}
		}
		if fin {
			p.msgOpen = false
		} else if avail == 0 {
			if frameDone {
				continue // empty non-final frame
			}
			return Event{}, nil
		}
		return Event{Kind: EventMessage, Op: p.msgOp, Payload: chunk, Fin: fin}, nil
	}
}

// checkHeader applies the rules that depend on the role, the negotiated
// extensions, the fragmentation state and the limits.
func (p *Protocol) checkHeader(h *Header) *ProtocolError {
	// RFC 6455 §5.2: RSV1-3 MUST be 0 unless an extension defines them;
	// RFC 7692 §6: permessage-deflate defines RSV1 on the first frame of a
	// data message only (§6.1, §6.2).
	if h.Rsv2 || h.Rsv3 {
		return errRsv
	}
	if h.Rsv1 {
		if p.fl == nil {
			return errRsv
		}
		if !h.Op.IsData() {
			return errRsv1Control
		}
	}
	// RFC 6455 §5.1: a server MUST close on an unmasked frame, a client on
	// a masked frame.
	if p.role == RoleServer {
		if !h.Masked {
			return errUnmasked
		}
	} else if h.Masked {
		return errMasked
	}
	if h.Op.IsControl() {
		// §5.4: control frames may be injected in the middle of a
		// fragmented message. ParseHeader checked FIN and length.
		return nil
	}
	// §5.4: fragments of one message are not interleaved with another.
	if h.Op == OpContinuation {
		if !p.msgOpen {
			return errContNoStart
		}
	} else if p.msgOpen {
		return errMsgOpen
	}
	if p.maxFrame >= 0 && h.Length > p.maxFrame {
		return errFrameTooBig
	}
	compressed := h.Rsv1 || (h.Op == OpContinuation && p.msgCompressed)
	if !compressed && p.maxMsg >= 0 {
		size := h.Length
		if h.Op == OpContinuation {
			size += p.msgSize
		}
		if size > p.maxMsg || size < 0 {
			return errMsgTooBig
		}
		p.msgSize = size
	}
	return nil
}

// control handles a complete, unmasked control frame.
func (p *Protocol) control(op Opcode, payload []byte) (Event, error) {
	switch op {
	case OpPing:
		return Event{Kind: EventPing, Payload: payload}, nil
	case OpPong:
		return Event{Kind: EventPong, Payload: payload}, nil
	}
	// OpClose, RFC 6455 §5.5.1.
	ev := Event{Kind: EventClose, Code: StatusNoStatusRcvd, Payload: payload}
	switch len(payload) {
	case 0:
	case 1:
		return p.fail(errCloseLen1)
	default:
		ev.Code = StatusCode(binary.BigEndian.Uint16(payload))
		if !ValidCloseCode(ev.Code) {
			return p.fail(errCloseCode)
		}
		reason := payload[2:]
		if !validUTF8(reason) {
			return p.fail(errBadCloseUTF8)
		}
		ev.Reason = string(reason)
	}
	p.openPlain = false
	p.mu.Lock()
	if p.State() == StateCloseSent {
		p.st.Store(uint32(StateClosed))
	} else {
		p.st.Store(uint32(StateCloseReceived))
	}
	p.mu.Unlock()
	return ev, nil
}
