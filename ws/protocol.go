package ws

import (
	"sync"
	"sync/atomic"
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
// While it waits for input with nothing of a frame or a message under way,
// it holds neither a receive buffer nor the state of the receiving side
// (ReleaseReadBuffer); the fields smaller than a word are packed together.
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
	// err and the pending close are guarded by mu.
	st   atomic.Uint32 // State
	mu   sync.Mutex
	err  *ProtocolError // sticky error after a failure
	pend *ProtocolError // the failure whose close frame is queued, until AppendPendingClose

	// The receiving side's state, from rxStates while it is in use (recv):
	// &idleRx, shared and never written, once ReleaseReadBuffer gave it
	// back with the receive buffer, nothing of a frame or a message being
	// under way, until the next Receive or ReadBuffer. Its fields are
	// promoted (p.buf, p.hdr...) and read as they are; whatever writes them
	// calls recv first.
	*rxState

	// message being sent with AppendFrame
	outOpen bool

	// wholeMax is the largest payload Next's fast path may take: the smaller of
	// the limits that are on, capped at 0xFFFF (the 16-bit length).
	wholeMax int32

	// keys is the state of the masking-key generator (maskKey).
	keys uint64
}

// rxState is what the receiving side of a Protocol keeps between calls:
// the receive buffer, the frame and the message being received.
type rxState struct {
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

	// a frame is being received
	inFrame bool
	// ready, when not 0, is the header length of the frame that Receive
	// decoded ahead: buf, all of it (r is 0), is that one frame, its header
	// as received, its payload unmasked and, for text, validated. Next
	// hands it out without parsing it again; unready puts the bytes back as
	// they were received for every other use.
	ready uint8
}

// rxStates holds the receiving states of idle Protocols: rxStates[i], each
// with a receive buffer of class i (ReleaseReadBuffer keeps it in the
// state, so that a wake-up takes one thing from a pool, not two), and
// rxStates[numBufPools] those without one.
var rxStates [numBufPools + 1]sync.Pool

// idleRx is the state of every receiving side that has nothing under way
// and no buffer: zero, never written.
var idleRx rxState

// recv makes sure the receiving side has a state of its own, taking one
// from the pools when ReleaseReadBuffer gave it back (takeRecv), and
// returns it, for a hot path to hold in a register instead of reloading
// p.rxState after each of its stores. Small enough to inline: every entry
// point of the receiving side calls it.
func (p *Protocol) recv() *rxState {
	if rs := p.rxState; rs != &idleRx {
		return rs
	}
	return p.takeRecv()
}

// takeRecv takes a receiving state from the pools: with a receive buffer of
// bufHint bytes when one is there.
//
//go:noinline
func (p *Protocol) takeRecv() *rxState {
	rs, ok := (*rxState)(nil), false
	if pooledSize(p.bufHint) {
		rs, ok = rxStates[bufClass(p.bufHint)].Get().(*rxState)
	}
	if !ok {
		rs, ok = rxStates[numBufPools].Get().(*rxState)
	}
	if !ok {
		rs = new(rxState)
	}
	p.rxState = rs
	return rs
}

// idleRecv gives the receiving side's state back to the pools, zeroed but
// for its receive buffer when withBuf (a pooled size, nothing unprocessed
// in it: ReleaseReadBuffer), which goes along; otherwise the buffer is
// dropped.
func (p *Protocol) idleRecv(withBuf bool) {
	rs := p.rxState
	if rs == &idleRx {
		return
	}
	p.rxState = &idleRx
	buf, bufp := rs.buf, rs.bufp
	*rs = rxState{}
	if withBuf {
		if bufp == nil {
			bufp = new([]byte) // once: the box travels with the buffer
		}
		rs.buf, rs.bufp = buf[:0], bufp
		rxStates[bufClass(cap(buf))].Put(rs)
		return
	}
	rxStates[numBufPools].Put(rs)
}

// NewProtocol returns a Protocol configured by cfg.
func NewProtocol(cfg Config) *Protocol {
	p := new(Protocol)
	p.init(cfg)
	return p
}

// init configures a zero Protocol by cfg (a Conn's is a field of it).
func (p *Protocol) init(cfg Config) {
	*p = Protocol{
		role:     cfg.Role,
		maxFrame: cfg.MaxFrameSize,
		maxMsg:   cfg.MaxMessageSize,
		bufHint:  cfg.ReadBufferSize,
		rxState:  &idleRx,
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
		p.fl.params = cfg.Deflate
	}
	p.openPlain = p.fl == nil
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
	if p.err == nil {
		return nil // not a nil *ProtocolError
	}
	return p.err
}

// fail moves the Protocol to StateClosed and queues a close frame with the
// error's code unless a Close was already sent (RFC 6455 §7.1.7).
func (p *Protocol) fail(e *ProtocolError) (Event, error) {
	p.openPlain = false
	p.mu.Lock()
	if st := p.State(); st == StateOpen || st == StateCloseReceived {
		p.pend = e
	}
	p.st.Store(uint32(StateClosed))
	p.err = e
	p.mu.Unlock()
	if p.inflating { // idleRx's is false, and stays so
		p.inflating = false
	}
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
	if p.fl != nil {
		p.fl.abortInflate()
	}
	p.idleRecv(false)
}

// HasPendingClose reports whether a Close frame was queued by a failure and
// not yet fetched with AppendPendingClose.
func (p *Protocol) HasPendingClose() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pend != nil
}

// AppendPendingClose appends the Close frame queued when Next failed the
// connection, if any, and forgets it. The caller writes it and then closes
// the underlying connection (RFC 6455 §7.1.7).
func (p *Protocol) AppendPendingClose(dst []byte) []byte {
	p.mu.Lock()
	e := p.pend
	p.pend = nil
	p.mu.Unlock()
	if e == nil {
		return dst
	}
	return p.appendClose(dst, e.Code, e.Reason)
}
