package ws

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Message types for the whole-message API. They are the data opcodes of
// RFC 6455 §5.6.
const (
	TextMessage   = OpText
	BinaryMessage = OpBinary
)

// Default sizes and timeouts of a Conn. Every one can be changed in
// AcceptOptions or DialOptions.
const (
	DefaultReadBufferSize   = 32 << 10
	DefaultWriteBufferSize  = 32 << 10
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultCloseTimeout     = 5 * time.Second
)

// Conn is a WebSocket connection after a successful opening handshake.
//
// Concurrency: the read methods (ReadMessage, Read, ReadMessageInto, Reader)
// must be called from one goroutine at a time. The write methods
// (WriteMessage, Write, BufferMessage, Flush, Writer, WritePrepared,
// WritePreparedBatch, Ping), Close, CloseNow and the deadline setters are safe
// to call from any number of goroutines at once: the Conn serialises writes
// itself and never panics on concurrent use. A read and a write may run at the
// same time (split halves).
//
// Input and output: bytes are read straight into the Protocol's receive
// buffer (Protocol.ReadBuffer), and ReadMessageInto reads the rest of a large
// frame straight into the caller's buffer (Protocol.ReceivePayload), so a
// payload is copied once by the kernel and at most once more. A server writes
// a large uncompressed message as its header and the caller's payload in one
// writev, without copying it. On Linux, a TCP or Unix socket is read and
// written with raw system calls through syscall.RawConn, which still waits
// for the runtime's poller and honours the deadlines (rawio_linux.go).
//
// Control frames are handled inside the read methods: pings are answered with
// a pong automatically (RFC 6455 §5.5.2), and a received close frame is echoed
// (RFC 6455 §5.5.1) and reported as a *CloseError.
type Conn struct {
	nc     net.Conn
	role   Role
	subp   string
	params *DeflateParams

	// p is the sans-IO protocol. Its read side (Receive, Next) is used by the
	// reading goroutine without a lock; its write side (Append*) is used
	// under pmu, which is held only for short, IO-free calls.
	pmu sync.Mutex
	p   *Protocol

	// Read side: rmu is held by each read call, so that Close can tell
	// whether it may read the peer's close frame itself.
	rmu         sync.Mutex
	readDead    chan struct{} // closed when the read side has a final error
	readMin     int           // the least free space to read into (half the read buffer)
	pending     []byte        // leftover handshake bytes to feed before reading nc
	activeRead  *messageReader
	readErr     error // sticky error of the read side
	pingHandler func([]byte)
	pongHandler func([]byte)

	// Write side: wmu serialises every frame written to nc.
	wmu sync.Mutex
	// wbuf is the encode buffer, from writeBufPool while wmu is held or
	// while it holds frames buffered by BufferMessage (between calls,
	// wbuf is exactly those frames).
	wbuf        []byte
	wbufp       *[]byte // the pool's handle of wbuf
	bufs        net.Buffers
	wv          net.Buffers // what writeBuffers hands to net.Buffers.WriteTo
	vectored    bool        // nc writes net.Buffers with one writev
	rio         *rawIO      // raw system calls on a plain socket (rawio_linux.go), or nil
	writeErr    error       // sticky: a failed or partial write leaves the stream unusable
	ctrlMu      sync.Mutex
	ctrlQueued  []byte      // control frames (pongs) waiting for the write lock
	ctrlPending atomic.Bool // ctrlQueued is not empty
	buffered    atomic.Bool // wbuf holds frames buffered by BufferMessage
	flushWanted atomic.Bool // the reader is about to wait: write the buffered frames
	wbufSize    int

	closeSent     atomic.Bool
	closeRecv     chan struct{}
	closeRecvOnce sync.Once
	closeOnce     sync.Once
	closeTimeout  time.Duration
	closed        atomic.Bool
	pongs         chan struct{}

	readDeadline  atomic.Pointer[time.Time]
	writeDeadline atomic.Pointer[time.Time]
}

type connConfig struct {
	role            Role
	subprotocol     string
	params          *DeflateParams
	compression     CompressionOptions
	maxMessageSize  int64
	maxFrameSize    int64
	readBufferSize  int
	writeBufferSize int
	closeTimeout    time.Duration
	leftover        []byte
}

func newConn(nc net.Conn, cfg connConfig) *Conn {
	if cfg.readBufferSize <= 0 {
		cfg.readBufferSize = DefaultReadBufferSize
	}
	if cfg.writeBufferSize <= 0 {
		cfg.writeBufferSize = DefaultWriteBufferSize
	}
	if cfg.closeTimeout <= 0 {
		cfg.closeTimeout = DefaultCloseTimeout
	}
	c := &Conn{
		nc:     nc,
		role:   cfg.role,
		subp:   cfg.subprotocol,
		params: cfg.params,
		p: NewProtocol(Config{
			Role:           cfg.role,
			MaxFrameSize:   cfg.maxFrameSize,
			MaxMessageSize: cfg.maxMessageSize,
			Deflate:        cfg.params,
			Compression:    cfg.compression,
			ReadBufferSize: cfg.readBufferSize,
		}),
		readMin:      max(cfg.readBufferSize/2, 1),
		wbufSize:     cfg.writeBufferSize,
		closeRecv:    make(chan struct{}),
		readDead:     make(chan struct{}),
		closeTimeout: cfg.closeTimeout,
		pongs:        make(chan struct{}, 1),
	}
	if len(cfg.leftover) > 0 {
		c.pending = append([]byte(nil), cfg.leftover...)
	}
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		c.vectored = true
	}
	c.rio = newRawIO(nc)
	return c
}

// NetConn returns the underlying connection. Reading from or writing to it
// directly corrupts the WebSocket stream; it is meant for addresses, socket
// options and TLS state.
func (c *Conn) NetConn() net.Conn { return c.nc }

// RemoteAddr returns the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr returns the local network address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Subprotocol returns the subprotocol chosen in the handshake, or "".
func (c *Conn) Subprotocol() string { return c.subp }

// Deflate returns the permessage-deflate parameters negotiated in the
// handshake (RFC 7692 §7), or nil when the extension is not in use.
func (c *Conn) Deflate() *DeflateParams { return c.params }

// Compressed reports whether this is a server connection whose negotiated
// permessage-deflate parameters let it send the shared compressed form of a
// PreparedMessage: that needs server_no_context_takeover (RFC 7692 §7.1.1.1),
// so that every compressed message stands alone.
func (c *Conn) Compressed() bool {
	return c.role == RoleServer && c.params != nil && c.params.ServerNoContextTakeover
}

// SetPingHandler sets a function called with the payload of each received
// ping, after the automatic pong is queued. It runs on the reading goroutine.
func (c *Conn) SetPingHandler(h func(payload []byte)) { c.pingHandler = h }

// SetPongHandler sets a function called with the payload of each received
// pong. It runs on the reading goroutine.
func (c *Conn) SetPongHandler(h func(payload []byte)) { c.pongHandler = h }

// SetReadDeadline sets the deadline for reads. A read that times out returns
// an error for which os.IsTimeout is true and leaves the connection intact: a
// later read continues where the stream stopped.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.readDeadline.Store(&t)
	return c.nc.SetReadDeadline(t)
}

// SetWriteDeadline sets the deadline for writes. Unlike a read, a write that
// times out part way through a frame leaves the stream unusable, so every
// later write fails with the same error.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.writeDeadline.Store(&t)
	return c.nc.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// ---- reading ----

// ReadMessage reads one whole message and returns its type (TextMessage or
// BinaryMessage) and payload in a newly allocated slice.
func (c *Conn) ReadMessage(ctx context.Context) (Opcode, []byte, error) {
	return c.ReadMessageInto(ctx, nil)
}

// Read is ReadMessage.
func (c *Conn) Read(ctx context.Context) (Opcode, []byte, error) { return c.ReadMessageInto(ctx, nil) }

// ReadMessageInto reads one whole message and appends its payload to buf. A
// server that passes the same buffer each time reads without allocating.
func (c *Conn) ReadMessageInto(ctx context.Context, buf []byte) (Opcode, []byte, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	stop, err := c.watchRead(ctx)
	if err != nil {
		return 0, buf, err
	}
	op, buf, err := c.readInto(buf)
	return op, buf, stop(err)
}

func (c *Conn) readInto(buf []byte) (Opcode, []byte, error) {
	if err := c.finishActiveRead(); err != nil {
		return 0, buf, err
	}
	for {
		if want := c.p.PayloadWanted(); want >= directReadMin && c.readErr == nil && len(c.pending) == 0 {
			// The rest of a large frame: read it straight into buf, so
			// that its bytes are copied once, by the read system call.
			if cap(buf)-len(buf) < directReadMin {
				// Grow as append would, by what is known to come.
				buf = slices.Grow(buf, int(min(want, int64(max(len(buf), 2*c.readMin)))))
			}
			free := buf[len(buf):cap(buf)]
			n, err := c.readNet(free[:min(int64(len(free)), want)])
			if n > 0 {
				ev, perr := c.p.ReceivePayload(free[:n])
				if perr != nil {
					return 0, buf, c.failRead(perr)
				}
				buf = buf[:len(buf)+n]
				if ev.Fin {
					return ev.Op, buf, nil
				}
				continue
			}
			if err != nil {
				return 0, buf, err
			}
			continue
		}
		ev, err := c.nextEvent()
		if err != nil {
			return 0, buf, err
		}
		buf = append(buf, ev.Payload...)
		if ev.Fin {
			return ev.Op, buf, nil
		}
	}
}

// directReadMin is the least payload still to come for which ReadMessageInto
// reads a frame's payload straight into the caller's buffer. Below it, a
// read into the protocol's buffer, which may take the next frames along in
// the same system call, is the better deal.
const directReadMin = 8 << 10

// Reader returns the next message as a stream: its type and a reader of its
// payload, valid until the next read call. A message need not be read to the
// end; the next read call discards what is left of it.
func (c *Conn) Reader(ctx context.Context) (Opcode, io.Reader, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	stop, err := c.watchRead(ctx)
	if err != nil {
		return 0, nil, err
	}
	if err := c.finishActiveRead(); err != nil {
		return 0, nil, stop(err)
	}
	ev, err := c.nextEvent()
	if err != nil {
		return 0, nil, stop(err)
	}
	stop(nil)
	r := &messageReader{c: c, ctx: ctx, op: ev.Op, buf: ev.Payload, eof: ev.Fin}
	c.activeRead = r
	return ev.Op, r, nil
}

func (c *Conn) finishActiveRead() error {
	r := c.activeRead
	if r == nil {
		return nil
	}
	c.activeRead = nil
	for !r.eof {
		ev, err := c.nextEvent()
		if err != nil {
			return err
		}
		r.eof = ev.Fin
	}
	return nil
}

// messageReader streams one message's payload.
type messageReader struct {
	c   *Conn
	ctx context.Context
	op  Opcode
	buf []byte
	eof bool
}

func (r *messageReader) Read(p []byte) (int, error) {
	r.c.rmu.Lock()
	defer r.c.rmu.Unlock()
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		if r.c.activeRead != r {
			return 0, errors.New("ws: read from a message reader after the next message was started")
		}
		stop, err := r.c.watchRead(r.ctx)
		if err != nil {
			return 0, err
		}
		ev, err := r.c.nextEvent()
		if err = stop(err); err != nil {
			return 0, err
		}
		r.buf, r.eof = ev.Payload, ev.Fin
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// nextEvent returns the next data event, handling control frames on the way.
func (c *Conn) nextEvent() (Event, error) {
	if c.readErr != nil {
		return Event{}, c.readErr
	}
	for {
		if len(c.pending) > 0 {
			c.p.Receive(c.pending)
			c.pending = nil
		}
		ev, err := c.p.Next()
		if err != nil {
			return Event{}, c.failRead(err)
		}
		switch ev.Kind {
		case EventMessage:
			return ev, nil
		case EventPing:
			c.queuePong(ev.Payload)
			if c.pingHandler != nil {
				c.pingHandler(ev.Payload)
			}
			continue
		case EventPong:
			select {
			case c.pongs <- struct{}{}:
			default:
			}
			if c.pongHandler != nil {
				c.pongHandler(ev.Payload)
			}
			continue
		case EventClose:
			return Event{}, c.peerClosed(ev.Code, ev.Reason)
		}
		// EventNone: the protocol needs more bytes. Read them straight
		// into its buffer.
		n, err := c.readNet(c.p.ReadBuffer(c.readMin))
		if n > 0 {
			c.p.Commit(n)
			continue
		}
		if err != nil {
			return Event{}, err
		}
	}
}

// readNet reads from the network into b. Frames buffered by BufferMessage
// are written first: the read may wait, and the peer may be waiting for
// them. An error other than a timeout ends the read side.
func (c *Conn) readNet(b []byte) (int, error) {
	if c.buffered.Load() {
		c.flushBuffered()
	}
	var n int
	var err error
	if c.rio != nil {
		n, err = c.rio.read(b)
	} else {
		n, err = c.nc.Read(b)
	}
	if err == nil || n > 0 {
		return n, nil
	}
	if isTimeout(err) {
		// A timeout leaves the stream intact; nothing was consumed.
		return 0, err
	}
	if c.closed.Load() {
		return 0, c.setReadErr(ErrClosed)
	}
	if errors.Is(err, io.EOF) {
		err = &CloseError{Code: StatusAbnormalClosure, Reason: "connection closed without a close frame"}
	}
	return 0, c.setReadErr(err)
}

func (c *Conn) setReadErr(err error) error {
	if c.readErr == nil {
		c.readErr = err
		close(c.readDead)
	}
	return err
}

// failRead answers a protocol violation with the close code the protocol
// chose (RFC 6455 §7.1.7) and drops the connection.
func (c *Conn) failRead(err error) error {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		c.writeClose(func(dst []byte) ([]byte, error) { return c.p.AppendPendingClose(dst), nil })
		c.lingerClose()
	}
	return c.setReadErr(err)
}

// peerClosed echoes the peer's close frame (RFC 6455 §5.5.1) and closes the
// TCP connection.
func (c *Conn) peerClosed(code StatusCode, reason string) error {
	c.closeRecvOnce.Do(func() { close(c.closeRecv) })
	c.sendClose(code, "") // 1005 (no status) echoes as an empty close frame
	c.closeNC()
	return c.setReadErr(&CloseError{Code: code, Reason: reason})
}

// watchRead applies ctx to the read side: its deadline and its cancellation.
// The returned function undoes that and maps a timeout caused by ctx to
// ctx's error. A context that can never end costs nothing.
func (c *Conn) watchRead(ctx context.Context) (func(error) error, error) {
	if ctx == nil || ctx.Done() == nil {
		return noop, nil
	}
	return watch(ctx, c.nc.SetReadDeadline, &c.readDeadline)
}

func (c *Conn) watchWrite(ctx context.Context) (func(error) error, error) {
	if ctx == nil || ctx.Done() == nil {
		return noop, nil
	}
	return watch(ctx, c.nc.SetWriteDeadline, &c.writeDeadline)
}

func noop(err error) error { return err }

func watch(ctx context.Context, set func(time.Time) error, user *atomic.Pointer[time.Time]) (func(error) error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		set(d)
	}
	// done, under mu, tells a cancellation that fires late (stopping an
	// AfterFunc does not wait for a running one) that the operation is over,
	// so it must not move the deadline into the past any more.
	var mu sync.Mutex
	done := false
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		if !done {
			set(time.Unix(1, 0))
		}
		mu.Unlock()
	})
	return func(err error) error {
		stopAfter()
		mu.Lock()
		done = true
		mu.Unlock()
		restore := time.Time{}
		if t := user.Load(); t != nil {
			restore = *t
		}
		set(restore)
		if err != nil && isTimeout(err) {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			// The socket deadline taken from ctx may fire a moment before
			// ctx's own timer.
			if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
				return context.DeadlineExceeded
			}
		}
		return err
	}, nil
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// ---- writing ----

// WriteMessage writes one whole message of type TextMessage or BinaryMessage.
// It compresses the message when permessage-deflate was negotiated and the
// message is not smaller than the compression threshold. Frames buffered by
// BufferMessage go out first, in the same system call. It returns after the
// write: p is not retained.
func (c *Conn) WriteMessage(ctx context.Context, op Opcode, p []byte) error {
	if op != OpText && op != OpBinary {
		return fmt.Errorf("ws: WriteMessage: opcode %v is not a data opcode", op)
	}
	stop, err := c.watchWrite(ctx)
	if err != nil {
		return err
	}
	c.lockWrite()
	defer c.unlockWrite()
	return stop(c.writeMessageLocked(op, p, false))
}

// BufferMessage is WriteMessage for a connection that answers what it reads
// (an echo, a server answering pipelined requests): it encodes the message
// into the connection's write buffer and returns without writing it, so that
// the answers to everything one network read brought leave together, in one
// system call. The buffered frames are written, in order:
//
//   - before a read method of this connection waits for the network (the
//     peer may be waiting for them), whichever goroutine reads;
//   - by Flush, and by every other write, ahead of its own frame;
//   - at once, with this message, when the write buffer (WriteBufferSize
//     in AcceptOptions and DialOptions) would be full; a large message is
//     written at once.
//
// p is not retained. BufferMessage takes no context: a write it makes is
// bounded by the write deadline only. A write that fails later is sticky: it
// is reported by the next write call. Close sends the buffered frames before
// its close frame; CloseNow drops them. Frames buffered while another
// goroutine already waits in a read stay buffered until one of the above: in
// that case call Flush.
func (c *Conn) BufferMessage(op Opcode, p []byte) error {
	if op != OpText && op != OpBinary {
		return fmt.Errorf("ws: BufferMessage: opcode %v is not a data opcode", op)
	}
	c.lockWrite()
	defer c.unlockWrite()
	return c.writeMessageLocked(op, p, true)
}

// Flush writes the frames buffered by BufferMessage, if any.
func (c *Conn) Flush(ctx context.Context) error {
	if !c.buffered.Load() {
		return nil
	}
	stop, err := c.watchWrite(ctx)
	if err != nil {
		return err
	}
	c.lockWrite()
	defer c.unlockWrite()
	return stop(c.flushLocked())
}

// vectoredWriteMin is the least payload that a server connection writes
// with writev right behind its frame header instead of copying it into the
// encode buffer.
const vectoredWriteMin = 2 << 10

// writeMessageLocked appends the message's frame to the buffered ones and
// writes them all, or, with buffer set, leaves them buffered while they fit
// in the write buffer. The caller holds wmu.
func (c *Conn) writeMessageLocked(op Opcode, p []byte, buffer bool) error {
	if err := c.writable(); err != nil {
		return err
	}
	c.pmu.Lock()
	dst := c.flushCtrl(c.wbuf)
	var vec bool
	var err error
	if c.vectored && len(p) >= vectoredWriteMin && (!buffer || len(dst)+len(p)+MaxHeaderSize > c.wbufSize) {
		// A plain server frame: the payload goes out as it is.
		dst, vec, err = c.p.AppendMessageHeader(dst, op, len(p))
	}
	if !vec && err == nil {
		dst, err = c.p.AppendMessage(dst, op, p)
	}
	c.pmu.Unlock()
	c.wbuf = dst
	if err != nil {
		c.flushLocked() // what was buffered still goes out
		return err
	}
	if buffer && !vec && len(c.wbuf) < c.wbufSize {
		c.buffered.Store(true)
		return nil
	}
	if vec {
		err = c.writeVectored(c.wbuf, p)
	} else {
		err = c.writeLocked(c.wbuf)
	}
	c.wbuf = c.wbuf[:0]
	c.buffered.Store(false)
	return err
}

// flushLocked writes the buffered frames and the queued control frames; the
// caller holds wmu. On a connection that can no longer write they are
// dropped.
func (c *Conn) flushLocked() error {
	c.wbuf = c.flushCtrl(c.wbuf)
	c.buffered.Store(false)
	if len(c.wbuf) == 0 {
		return nil
	}
	err := c.writable()
	if err == nil {
		err = c.writeLocked(c.wbuf)
	}
	c.wbuf = c.wbuf[:0]
	return err
}

// flushBuffered has the frames buffered by BufferMessage written before the
// reader waits: now if the write lock is free, else by its holder when it
// lets the lock go (unlockWrite).
func (c *Conn) flushBuffered() {
	c.flushWanted.Store(true)
	if c.tryLockWrite() {
		c.unlockWrite()
	}
}

// Write is WriteMessage.
func (c *Conn) Write(ctx context.Context, op Opcode, p []byte) error {
	return c.WriteMessage(ctx, op, p)
}

// WritePrepared writes a message encoded once by NewPreparedMessage. A server
// connection writes the prepared bytes as they are (their compressed form when
// Compressed is true); a client connection must mask its frames, so it
// encodes the message itself.
func (c *Conn) WritePrepared(m *PreparedMessage) error {
	return c.WritePreparedBatch([]*PreparedMessage{m})
}

// WritePreparedBatch writes many prepared messages with as few system calls
// as the connection allows (one writev on a TCP connection). It is the write
// path of a broadcast: no copy and no allocation per message.
func (c *Conn) WritePreparedBatch(ms []*PreparedMessage) error {
	if c.role != RoleServer {
		for _, m := range ms {
			if err := c.WriteMessage(context.Background(), m.Op(), m.Payload()); err != nil {
				return err
			}
		}
		return nil
	}
	c.lockWrite()
	defer c.unlockWrite()
	if err := c.writable(); err != nil {
		return err
	}
	c.wbuf = c.flushCtrl(c.wbuf) // buffered frames and pongs first
	c.buffered.Store(false)
	bufs := c.bufs[:0]
	if len(c.wbuf) > 0 {
		bufs = append(bufs, c.wbuf)
	}
	c.pmu.Lock()
	for _, m := range ms {
		f, err := c.p.PreparedFrame(m)
		if err != nil {
			c.pmu.Unlock()
			clear(bufs)
			c.flushLocked() // what was buffered still goes out
			return err
		}
		bufs = append(bufs, f)
	}
	c.pmu.Unlock()
	c.bufs = bufs
	if _, ok := c.nc.(*tls.Conn); ok {
		// TLS seals each Write in its own records: one buffer is cheaper.
		b := c.wbuf[:0]
		for _, f := range bufs {
			b = append(b, f...)
		}
		c.wbuf = b
		clear(c.bufs)
		err := c.writeLocked(b)
		c.wbuf = c.wbuf[:0]
		return err
	}
	err := c.writeBuffers(bufs)
	clear(c.bufs) // let the frames go
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.writeErr = err
	}
	return err
}

// writeBuffers writes bufs with writev; the caller holds wmu.
func (c *Conn) writeBuffers(bufs net.Buffers) error {
	if c.rio != nil {
		return c.rio.writeBuffers(bufs)
	}
	// WriteTo consumes its receiver: give it a field (a local whose
	// address is taken would be allocated on every call).
	c.wv = bufs
	_, err := c.wv.WriteTo(c.nc)
	c.wv = nil
	return err
}

// Ping sends a ping and waits for a pong or for ctx to end. Pongs are only
// seen while some goroutine reads from the connection.
func (c *Conn) Ping(ctx context.Context, payload []byte) error {
	if len(payload) > 125 {
		return errors.New("ws: ping payload longer than 125 bytes")
	}
	select { // forget a stale pong
	case <-c.pongs:
	default:
	}
	stop, err := c.watchWrite(ctx)
	if err != nil {
		return err
	}
	c.lockWrite()
	err = c.writable()
	if err == nil {
		c.pmu.Lock()
		c.wbuf = c.p.AppendPing(c.flushCtrl(c.wbuf), payload)
		c.pmu.Unlock()
		err = c.writeLocked(c.wbuf)
		c.wbuf = c.wbuf[:0]
		c.buffered.Store(false)
	}
	c.unlockWrite()
	if err = stop(err); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	select {
	case <-c.pongs:
		return nil
	case <-c.closeRecv:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// queuePong answers a ping (RFC 6455 §5.5.2). The reader never waits for the
// write lock: when a writer holds it, the pong goes out with that writer's
// next frame or when it releases the lock (unlockWrite).
func (c *Conn) queuePong(payload []byte) {
	c.ctrlMu.Lock()
	c.pmu.Lock()
	// Only the latest pong matters (RFC 6455 §5.5.3 allows answering only
	// the most recent ping).
	c.ctrlQueued = c.p.AppendPong(c.ctrlQueued[:0], payload)
	c.pmu.Unlock()
	c.ctrlPending.Store(true)
	c.ctrlMu.Unlock()
	if c.tryLockWrite() {
		c.unlockWrite()
	}
}

// writeBufPool holds encode buffers, so that a connection holds one only
// while it writes: idle connections cost no write buffer.
var writeBufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 4096)
	return &b
}}

// maxPooledWriteBuf is the largest buffer returned to writeBufPool; a larger
// one, grown for a large message, is left to the garbage collector.
const maxPooledWriteBuf = 4<<20 + MaxHeaderSize

// lockWrite takes the write lock and an encode buffer (which holds the
// frames buffered by BufferMessage, if any).
func (c *Conn) lockWrite() {
	c.wmu.Lock()
	c.takeWbuf()
}

func (c *Conn) tryLockWrite() bool {
	if !c.wmu.TryLock() {
		return false
	}
	c.takeWbuf()
	return true
}

func (c *Conn) takeWbuf() {
	if c.wbufp != nil {
		return // kept for buffered frames
	}
	c.wbufp = writeBufPool.Get().(*[]byte)
	c.wbuf = (*c.wbufp)[:0]
}

// releaseWbuf returns the encode buffer to the pool unless it holds
// buffered frames; the caller holds wmu.
func (c *Conn) releaseWbuf() {
	if c.wbufp == nil || len(c.wbuf) > 0 {
		return
	}
	if cap(c.wbuf) <= maxPooledWriteBuf {
		*c.wbufp = c.wbuf[:0]
		writeBufPool.Put(c.wbufp)
	}
	c.wbuf, c.wbufp = nil, nil
}

// unlockWrite releases the write lock after sending any control frame that
// was queued while it was held, and the buffered frames if the reader asked
// for them (flushBuffered). The check after the release closes the gap in
// which a reader queued a pong or asked for a flush and failed to take the
// lock just before the writer let it go.
func (c *Conn) unlockWrite() {
	for {
		if c.ctrlPending.Load() || c.flushWanted.Load() {
			c.flushWanted.Store(false)
			// On a connection that can no longer write, flushing just
			// drops the frames.
			c.flushLocked()
		}
		c.releaseWbuf()
		c.wmu.Unlock()
		if (!c.ctrlPending.Load() && !c.flushWanted.Load()) || !c.tryLockWrite() {
			return
		}
	}
}

// flushCtrl appends queued control frames to dst. The caller holds wmu.
func (c *Conn) flushCtrl(dst []byte) []byte {
	c.ctrlMu.Lock()
	if len(c.ctrlQueued) > 0 {
		dst = append(dst, c.ctrlQueued...)
		c.ctrlQueued = c.ctrlQueued[:0]
	}
	c.ctrlPending.Store(false)
	c.ctrlMu.Unlock()
	return dst
}

func (c *Conn) writable() error {
	if c.writeErr != nil {
		return c.writeErr
	}
	if c.closeSent.Load() {
		return ErrClosed
	}
	return nil
}

// writeLocked writes b to the connection; the caller holds wmu. A failed
// write is sticky: part of a frame may have gone out.
func (c *Conn) writeLocked(b []byte) error {
	var err error
	if c.rio != nil {
		err = c.rio.write(b)
	} else {
		_, err = c.nc.Write(b)
	}
	if err != nil {
		if c.closed.Load() {
			err = ErrClosed
		}
		c.writeErr = err
	}
	return err
}

// writeVectored writes a and then b with one writev (c.vectored); the caller
// holds wmu.
func (c *Conn) writeVectored(a, b []byte) error {
	c.bufs = append(c.bufs[:0], a, b)
	err := c.writeBuffers(c.bufs)
	clear(c.bufs)
	if err != nil {
		if c.closed.Load() {
			err = ErrClosed
		}
		c.writeErr = err
	}
	return err
}

// ---- closing ----

// Close performs the closing handshake (RFC 6455 §7.1.2): it sends a close
// frame with code and reason, waits up to the close timeout for the peer's
// close frame, and closes the connection. It is safe to call more than once
// and concurrently with reads and writes.
func (c *Conn) Close(code StatusCode, reason string) error {
	err := c.sendClose(code, reason)
	if errors.Is(err, ErrClosed) {
		c.closeNC()
		return nil
	}
	if c.rmu.TryLock() {
		// Nobody is reading: read until the peer's close frame arrives.
		c.nc.SetReadDeadline(time.Now().Add(c.closeTimeout))
		for {
			if _, _, rerr := c.readInto(nil); rerr != nil {
				break
			}
		}
		c.rmu.Unlock()
	} else {
		// Another goroutine reads; it will see the peer's close or fail.
		t := time.NewTimer(c.closeTimeout)
		select {
		case <-c.closeRecv:
		case <-c.readDead:
		case <-t.C:
		}
		t.Stop()
	}
	c.closeNC()
	return err
}

// lingerClose closes the connection after failing it. Closing a socket
// with unread input makes the kernel send a reset, and a reset can destroy
// the close frame just written before the peer reads it: so shut down the
// sending side, then read and discard what the peer still sends (the rest of
// an oversize message, say) until it closes or the close timeout passes.
func (c *Conn) lingerClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.nc.SetReadDeadline(time.Now().Add(min(c.closeTimeout, time.Second)))
		io.Copy(io.Discard, io.LimitReader(c.nc, lingerLimit))
	}
	c.closeNC()
}

// lingerLimit bounds what lingerClose reads and throws away.
const lingerLimit = 64 << 20

// CloseNow drops the connection without a closing handshake.
func (c *Conn) CloseNow() error {
	return c.closeNC()
}

func (c *Conn) closeNC() error {
	var err error
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		err = c.nc.Close()
	})
	return err
}

// sendClose writes one close frame; later calls return ErrClosed. A zero
// code sends a close frame without a body.
func (c *Conn) sendClose(code StatusCode, reason string) error {
	return c.writeClose(func(dst []byte) ([]byte, error) { return c.p.AppendClose(dst, code, reason) })
}

func (c *Conn) writeClose(appendClose func([]byte) ([]byte, error)) error {
	if c.closeSent.Swap(true) {
		return ErrClosed
	}
	c.lockWrite()
	defer c.unlockWrite()
	if c.writeErr != nil {
		return c.writeErr
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.closeTimeout))
	c.pmu.Lock()
	var err error
	c.wbuf, err = appendClose(c.flushCtrl(c.wbuf)) // buffered frames first
	c.pmu.Unlock()
	c.buffered.Store(false)
	if err != nil {
		c.wbuf = c.wbuf[:0]
		return err
	}
	err = c.writeLocked(c.wbuf)
	c.wbuf = c.wbuf[:0]
	return err
}
