package ws

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Default limits applied when Config leaves them zero.
const (
	DefaultMaxFrameSize   = 16 << 20
	DefaultMaxMessageSize = 32 << 20
	defaultReadBufferSize = 4096
)

// Config configures a Protocol. The zero value is a server without
// extensions and with the default limits.
type Config struct {
	Role Role
	// MaxFrameSize limits the payload length of a single frame as sent on
	// the wire (compressed). 0 means DefaultMaxFrameSize, < 0 unlimited.
	// A larger frame fails the connection with 1009 (RFC 6455 §7.4.1).
	MaxFrameSize int64
	// MaxMessageSize limits a whole message after decompression. 0 means
	// DefaultMaxMessageSize, < 0 unlimited. Exceeding it fails with 1009.
	MaxMessageSize int64
	// Deflate holds the negotiated permessage-deflate parameters
	// (RFC 7692 §7.1); nil means the extension was not negotiated.
	Deflate *DeflateParams
	// Compression tunes the compression of outgoing messages when Deflate
	// is not nil.
	Compression CompressionOptions
	// ReadBufferSize is the initial capacity of the receive buffer.
	ReadBufferSize int
	// Budget, when set, is charged with the compressed bytes the Protocol
	// buffers until a compressed message's last frame (see Budget); a
	// message that would exceed it fails with 1013.
	Budget *Budget
}

// State is the closing-handshake state of a Protocol (RFC 6455 §7).
type State uint8

const (
	StateOpen          State = iota // data may flow both ways
	StateCloseSent                  // we sent Close and wait for the peer's Close
	StateCloseReceived              // the peer sent Close; we have to answer
	StateClosed                     // both Close frames exchanged, or the connection failed
)

func (s State) String() string {
	switch s {
	case StateOpen:
		return "open"
	case StateCloseSent:
		return "close sent"
	case StateCloseReceived:
		return "close received"
	}
	return "closed"
}

// EventKind says what an Event carries.
type EventKind uint8

const (
	EventNone    EventKind = iota // more input is needed
	EventMessage                  // a whole data message or a piece of one
	EventPing                     // a Ping frame (RFC 6455 §5.5.2)
	EventPong                     // a Pong frame (RFC 6455 §5.5.3)
	EventClose                    // a Close frame (RFC 6455 §5.5.1)
)

func (k EventKind) String() string {
	switch k {
	case EventNone:
		return "none"
	case EventMessage:
		return "message"
	case EventPing:
		return "ping"
	case EventPong:
		return "pong"
	case EventClose:
		return "close"
	}
	return "unknown"
}

// Event is what Protocol.Next reports.
type Event struct {
	Kind EventKind
	// Op is OpText or OpBinary for EventMessage: the type of the message,
	// also on the pieces carried by continuation frames.
	Op Opcode
	// Payload is the unmasked (and inflated) data. It points into the
	// Protocol's buffers and stays valid until the next call to Next or
	// Receive; the Append methods do not invalidate it.
	Payload []byte
	// Fin is true on the last piece of a message.
	Fin bool
	// Code and Reason are the peer's close status for EventClose; Code is
	// StatusNoStatusRcvd when the Close frame had no payload.
	Code   StatusCode
	Reason string
}

// Protocol is a sans-IO WebSocket endpoint (RFC 6455, RFC 7692): bytes read
// from the network go in with Receive and come out as Events from Next; the
// Append methods encode frames to be written. It performs no I/O, starts no
// goroutines. The receiving side (Receive, ReadBuffer, Commit, Next,
// PayloadWanted, ReceivePayload) must be used by one goroutine at a time and
// the sending side (the Append methods and PreparedFrame) by one goroutine at
// a time; the two sides may run concurrently with each other: they share only
// the close state, which is synchronised internally.
//
// It implements framing (RFC 6455 §5.2: minimal length encodings, 64-bit
// lengths with the top bit clear, reserved bits and opcodes, control frames
// of at most 125 bytes, never fragmented), masking (§5.3: a server requires
// masked frames and sends unmasked ones, a client the opposite), fragmentation
// (§5.4: control frames between fragments, no interleaved messages), UTF-8
// validated incrementally, failing at the first impossible byte with 1007
// (§5.6, §8.1), and the closing handshake (§5.5.1, §7: close codes checked,
// nothing processed after a Close frame, a violation queues a Close frame
// with its code, §7.1.7). MaxFrameSize and MaxMessageSize are on by default
// (1009). The frame-level helpers (Header, ParseHeader, AppendHeader,
// ReadHeader, WriteHeader, MaskBytes) are usable on their own.
//
// Copies can be avoided on both sides: ReadBuffer and Commit let the caller
// read from the network straight into the receive buffer, PayloadWanted and
// ReceivePayload let it read the rest of a large frame straight into its own
// memory, and AppendMessageHeader lets a server send a payload from where it
// is, behind the header.
//
// Data is streamed: Next returns the payload of a data frame as far as it
// has arrived, so a message larger than any buffer can be consumed piece by
// piece; text is handed out only after it passed the UTF-8 validator.
// Compressed messages are buffered (compressed) until their last frame has
// arrived and are then inflated piece by piece, never beyond the limit.
//
// In steady state a Protocol does not allocate for uncompressed traffic.
//
// (The fields smaller than a word are packed together: a Protocol fits the
// 192-byte size class.)
type Protocol struct {
	maxFrame int64 // < 0: unlimited
	maxMsg   int64 // < 0: unlimited
	bufHint  int
	fl       *deflateState // nil: permessage-deflate not negotiated
	role     Role

	// openPlain: permessage-deflate is off and the receiving side has seen
	// neither a Close frame nor a failure (State is Open or CloseSent), so
	// that NextInto may answer an empty buffer inline. Cleared by the
	// receiving side (control, fail), which alone reads it.
	openPlain bool

	// Close state, shared by both sides: st is read atomically; changes,
	// err and the pending close (pending, below) are guarded by mu.
	pendCode StatusCode
	st       atomic.Uint32 // State
	mu       sync.Mutex
	err      error // sticky error after a failure
	pendMsg  string

	buf  []byte  // received bytes; buf[r:] not yet processed
	bufp *[]byte // a box for buf in bufPools (ReleaseReadBuffer)
	r    int

	// frame being received (and inFrame, below)
	hdr       Header
	remaining int64
	maskPos   int

	// message being received
	msgOpen       bool
	msgOp         Opcode
	msgCompressed bool
	inflating     bool
	utf8          UTF8Validator
	msgSize       int64

	// message being sent with AppendFrame
	outOpen bool
	// Two flags of the groups above, packed here: a frame is being received
	// (inFrame); a close frame is queued after a failure (pending, under mu).
	inFrame bool
	pending bool
	// ready, when not 0, is the header length of the frame that Receive
	// decoded ahead: buf, all of it (r is 0), is that one frame, its header
	// as received, its payload unmasked and, for text, validated. Next
	// hands it out without parsing it again; unready puts the bytes back as
	// they were received for every other use.
	ready uint8

	// wholeMax is the largest payload Next's fast path may take: the smaller of
	// the limits that are on, capped at 0xFFFF (the 16-bit length).
	wholeMax int32

	// keys is the state of the masking-key generator (maskKey).
	keys uint64
}

// NewProtocol returns a Protocol configured by cfg.
func NewProtocol(cfg Config) *Protocol {
	p := &Protocol{
		role:     cfg.Role,
		maxFrame: cfg.MaxFrameSize,
		maxMsg:   cfg.MaxMessageSize,
		bufHint:  cfg.ReadBufferSize,
	}
	if p.maxFrame == 0 {
		p.maxFrame = DefaultMaxFrameSize
	}
	if p.maxMsg == 0 {
		p.maxMsg = DefaultMaxMessageSize
	}
	if p.bufHint <= 0 {
		p.bufHint = defaultReadBufferSize
	}
	p.wholeMax = 0xFFFF
	for _, l := range [2]int64{p.maxFrame, p.maxMsg} {
		if l >= 0 && l < int64(p.wholeMax) {
			p.wholeMax = int32(l)
		}
	}
	if p.role == RoleClient {
		p.keys = newKeySeed()
	}
	if cfg.Deflate != nil {
		p.fl = newDeflateState(cfg.Role, *cfg.Deflate, cfg.Compression)
		p.fl.zcharge.b = cfg.Budget
	}
	p.openPlain = p.fl == nil
	return p
}

// Role returns the role the Protocol plays.
func (p *Protocol) Role() Role { return p.role }

// State returns the closing-handshake state.
func (p *Protocol) State() State { return State(p.st.Load()) }

// Compressed reports whether permessage-deflate (RFC 7692) was negotiated:
// Config.Deflate was not nil.
func (p *Protocol) Compressed() bool { return p.fl != nil }

// Buffered returns the number of received bytes not yet processed.
func (p *Protocol) Buffered() int { return len(p.buf) - p.r }

// Err returns the error that failed the connection, if any.
func (p *Protocol) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Receive appends bytes read from the network. The bytes are copied; data
// may be reused as soon as Receive returns. Bytes received after the peer's
// Close frame or after a failure are discarded (RFC 6455 §5.5.1).
func (p *Protocol) Receive(data []byte) {
	// openPlain: no permessage-deflate, and neither a Close frame nor a
	// failure received, so the state is Open or CloseSent (the sending side
	// changes it only from Open to CloseSent) and nothing is discarded.
	// Then all received bytes processed, and data (1 to cap(buf) bytes)
	// fits from the start.
	buf := p.buf
	if !p.openPlain || p.r != len(buf) || uint(len(data)-1) >= uint(cap(buf)) || cap(buf) > 1<<20 {
		p.receiveSlow(data)
		return
	}
	p.r = 0
	buf = buf[:len(data)]
	// When data is exactly one frame that Next's fast path would take
	// (nextFast: the same conditions, in the same order), it is decoded
	// here, in the copy: the header is copied as it is, the payload
	// unmasked, with the check of whether it is ASCII in the same pass
	// (text that is not is validated here), and the frame is marked
	// decoded (ready), so that Next hands it out without parsing,
	// unmasking or validating it again. Frames of 6 bytes or less (a
	// client's with 4 bytes of payload or less) are left to Next. A frame
	// that breaks a rule is never taken here: the general path fails it,
	// as before.
	//
	// data must not start inside the buffer (a caller handing back a piece
	// of it, an Event's Payload say, which copy allows): the header, stored
	// first, could overwrite payload bytes not yet read (6 instructions).
	if len(data) >= 8 && !p.inFrame && !p.msgOpen &&
		uintptr(unsafe.Pointer(unsafe.SliceData(data)))-uintptr(unsafe.Pointer(unsafe.SliceData(buf))) >= uintptr(cap(buf)) {
		w := binary.LittleEndian.Uint64(data)
		b0 := byte(w)
		masked := w&(bitMask<<8) != 0
		if (b0 == bitFin|byte(OpText) || b0 == bitFin|byte(OpBinary)) && masked == (p.role == RoleServer) {
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
				p.buf = buf
				p.ready = uint8(n)
				if l > 0 && maskCopyHi(&buf[n], &data[n], l, k32) != 0 && b0 == bitFin|byte(OpText) {
					p.readyText()
				}
				return
			}
		}
	}
	p.buf = buf[:copy(buf, data)]
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
// is a power of two from 4 KiB to 1 MiB, is given back.
func (p *Protocol) ReleaseReadBuffer() bool {
	if p.r != len(p.buf) || cap(p.buf) != p.bufHint || !pooledSize(p.bufHint) {
		return false
	}
	if p.fl != nil {
		p.fl.releaseOut()
	}
	if p.bufp == nil {
		p.bufp = new([]byte) // once: the box travels with the buffer
	}
	putBuf(p.bufp, p.buf)
	p.buf, p.bufp, p.r = nil, nil, 0
	return true
}

// Commit takes n bytes, read into the start of the slice the last ReadBuffer
// returned (n is at most its length), as received. Like Receive, it discards
// them after the peer's Close frame or a failure.
func (p *Protocol) Commit(n int) {
	if st := p.State(); st == StateClosed || st == StateCloseReceived || n <= 0 {
		return
	}
	if p.ready != 0 {
		p.unready()
	}
	p.buf = p.buf[:len(p.buf)+n]
}

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

// NextInto is Next that stores the event in *ev, every field of it, instead
// of returning it: the form to use in a receive loop, with one Event
// reused from call to call, because an Event is too large to come back in
// registers and Next's result is copied on the way (BenchmarkRoundTrip).
// What Next says of the Event and the errors holds for NextInto; on an
// error *ev is the zero Event.
func (p *Protocol) NextInto(ev *Event) error {
	// Small enough to be inlined in the loop: the call that finds every
	// received byte processed (the loop's last) returns at once, with what
	// the general path returns then: EventNone while the state is Open or
	// CloseSent (openPlain). Without permessage-deflate nothing is being
	// inflated, and
	// in the middle of a frame (more payload to come: a frame's end is
	// dealt with in the call that reaches it) the general path has no
	// payload to hand out either.
	if p.r == len(p.buf) && p.openPlain {
		*ev = Event{}
		return nil
	}
	return p.nextFast(ev)
}

// nextFast is NextInto's fast path and the way to the general path.
func (p *Protocol) nextFast(ev *Event) error {
	if n := int(p.ready); n != 0 {
		// A frame that Receive decoded: buf is that frame, its payload
		// ready to hand out. Without permessage-deflate, there is
		// nothing to release.
		p.ready = 0
		b := p.buf // r is 0
		p.r = len(b)
		ev.Kind, ev.Op, ev.Payload, ev.Fin, ev.Code, ev.Reason = EventMessage, Opcode(b[0]&0xF), b[n:len(b):len(b)], true, 0, ""
		return nil
	}
	if p.fl != nil {
		p.fl.releaseOut()
	}
	// The fast path, for the commonest frame: a whole uncompressed message
	// in one frame (FIN set, RSV1-3 clear, OpText or OpBinary) of at most
	// 0xFFFF bytes (and wholeMax), masked as the role requires (RFC 6455
	// §5.1), that sits wholly in the buffer while no fragmented message is
	// open (§5.4). Anything else, including every violation, goes to the
	// general path (next) with nothing consumed, which applies all the
	// rules. The fast path consumes the frame, unmasks the payload in
	// place, validates text and leaves the Protocol in the state the
	// general path would leave it in after the frame, but for the state
	// of a frame and a message, which nothing reads after their end.
	if st := p.State(); (st == StateOpen || st == StateCloseSent) && !p.inFrame && !p.msgOpen && !p.inflating {
		b := p.buf[p.r:]
		if len(b) < 2 {
			if len(b) == 0 {
				// All received bytes are processed: what the general
				// path returns here too, without its frame.
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
		// The frame and its message end here, so the state of the frame
		// and the message being received (hdr, maskPos, msgOp,
		// msgCompressed, msgSize, utf8) is not read again before the next
		// frame sets it: the general path's values are left unwritten.
		if masked {
			maskWords(payload, k32)
		}
		if op == OpText {
			if i := asciiPrefix(payload); i < len(payload) && !validRest(payload[i:]) {
				return p.failInto(ev, errBadUTF8)
			}
		}
		// Field by field: a composite literal would be built on the
		// stack and copied.
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

// fail moves the Protocol to StateClosed and queues a close frame with the
// error's code unless a Close was already sent (RFC 6455 §7.1.7).
func (p *Protocol) fail(e *ProtocolError) (Event, error) {
	p.openPlain = false
	p.mu.Lock()
	if st := p.State(); st == StateOpen || st == StateCloseReceived {
		p.pending = true
		p.pendCode = e.Code
		p.pendMsg = e.Reason
	}
	p.st.Store(uint32(StateClosed))
	p.err = e
	p.mu.Unlock()
	p.inflating = false
	if p.fl != nil {
		p.fl.abortInflate()
	}
	return Event{}, e
}

// Release drops what the Protocol holds for receiving: the compressed bytes
// of a message collected so far, their charge on the Budget, and the
// receive buffer (to the collector, not to the pool: the last Event's
// Payload may still be read). Call it when the connection is abandoned;
// Next's failures release the message's bytes themselves. The Protocol must
// not receive after it.
func (p *Protocol) Release() {
	p.inflating = false
	if p.fl != nil {
		p.fl.abortInflate()
	}
	p.buf, p.bufp, p.r, p.ready = nil, nil, 0, 0
}

// HasPendingClose reports whether a Close frame was queued by a failure and
// not yet fetched with AppendPendingClose.
func (p *Protocol) HasPendingClose() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending
}

// AppendPendingClose appends the Close frame queued when Next failed the
// connection, if any, and forgets it. The caller writes it and then closes
// the underlying connection (RFC 6455 §7.1.7).
func (p *Protocol) AppendPendingClose(dst []byte) []byte {
	p.mu.Lock()
	pending, code, msg := p.pending, p.pendCode, p.pendMsg
	p.pending = false
	p.mu.Unlock()
	if !pending {
		return dst
	}
	return p.appendClose(dst, code, msg)
}

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
	// The commonest message, encoded here rather than in appendFrame (one
	// call less): a data frame of up to smallFrameMax bytes, uncompressed,
	// while data may be sent and no fragmented message is being sent. The
	// rest, errors included, takes appendMessage in the order of its checks.
	// The encoding below is appendFrame's small-frame tail, copied on
	// purpose: shared as a function it does not inline (cost 338) and the
	// small round trip took 984 → 1 079 instructions (callgrind).
	n := len(payload)
	client := p.role == RoleClient
	if st := p.State(); (op != OpText && op != OpBinary) || p.fl != nil || p.outOpen ||
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
	binary.LittleEndian.PutUint64(dst[start:start+8], w) // the payload goes over the word's tail
	dst = dst[:start+hs+n]
	if client {
		maskCopy(dst[start+hs:], payload, k32)
	} else if uint(n-1) < 256 && hasAVX2 {
		// Fewer instructions than memmove up to 256 bytes.
		copySmall(&dst[start+hs], &payload[0], n)
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
// 16 KiB, above which memmove and an in-place mask measured faster than the
// one-pass maskCopy (appendLargeFrame, BenchmarkRoundTrip/large).
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
	// For large payloads memmove and an in-place mask measured faster
	// than the one-pass maskCopy (BenchmarkRoundTrip/large).
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

// maskKey returns a masking key for the sending side: a step of wyrand
// (Wang Yi's generator: a Weyl sequence, the state plus an odd constant,
// through a 64×64→128-bit multiply whose halves are folded), on a state of
// the Protocol's own seeded from the operating system's randomness
// (newKeySeed). A few instructions instead of a draw from the global
// ChaCha8 generator (about 40 a small round trip, issue 13); gorilla/websocket
// (math/rand) and gws (a generator of its own) do not use a cryptographic
// one either.
//
// Why that is enough (RFC 6455 §5.3, §10.3): masking exists so that a
// hostile script in a browser, which chooses the payload, cannot make its
// frames look like other traffic (an HTTP request) to an intermediary that
// does not speak WebSocket; for that the key of a frame must not be known
// to whoever chooses its payload, before the frame is sent. Here the state
// starts from 64 random bits that no caller sees, and every key depends on
// all of them. What the generator does not give is cryptographic
// strength: someone who records many keys (they travel in clear in the
// frame headers: the server, an observer of the connection) could in
// principle work the state out and foresee the next keys. A program whose
// payloads are chosen by others who also see its frames on the wire (a
// relay of untrusted messages to a server they run, through a proxy that
// misreads WebSocket) would be the case that needs more than this; a Go
// program forging its own bytes on the wire needs no help from a masking
// key. The messages that permessage-deflate compresses still take their
// keys from ChaCha8 (newMaskKey).
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
