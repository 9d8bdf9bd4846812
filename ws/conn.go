package ws

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
// Concurrency: the read methods (ReadMessage, ReadMessageInto, NextMessage,
// Reader, and nonblock.NextMessage) must be called from one goroutine at a
// time. The write methods (WriteMessage, BufferMessage, Flush, Writer,
// WritePrepared, WritePreparedBatch, WritePreparedFrames, Ping, and
// nonblock.TryWrite), Close, CloseNow, the deadline setters and the
// accessors (NetConn, RemoteAddr, LocalAddr, Subprotocol, Deflate,
// Compressed) are safe to call from any number of goroutines at once: the
// Conn serialises writes itself and never panics on concurrent use. A read
// and a write may run at the same time (split halves).
//
// Input and output: bytes are read straight into the Protocol's receive
// buffer, and ReadMessageInto reads the rest of a large frame straight into
// the caller's buffer (Protocol.ReceivePayload), so a payload is copied at
// most once after the kernel. On Linux, a TCP or Unix socket is read and
// written with raw system calls through syscall.RawConn, which still wait
// for the runtime's poller and honour the deadlines (rawio_linux.go).
//
// Control frames are handled inside the read methods: pings are answered
// with a pong (RFC 6455 §5.5.2), and a received close frame is echoed
// (§5.5.1) and reported as a *CloseError.
//
// A Conn is one allocation with its Protocol and its raw I/O: an idle
// connection keeps nothing else of ws (TestIdleSizes). The fields smaller
// than a word are packed in each group so that it fits the 288-byte size
// class.
type Conn struct {
	nc net.Conn

	// p is the sans-IO protocol. Its read side (Receive, Next) is used by the
	// reading goroutine without a lock; its write side (Append*) is used
	// under pmu, which is held only for short, IO-free calls.
	p   Protocol
	pmu sync.Mutex
	// flags: flagClosed, flagCloseSent and the write side's flagCtrlPending,
	// flagBuffered and flagFlushWanted, each an atomic flag, in one word.
	flags connFlags

	// Read side: rmu is held by each read call, so that Close can tell
	// whether it may read the peer's close frame itself.
	rmu          sync.Mutex
	lingerWanted bool // failRead wrote a close frame: linger, then drop nc
	// msgPartial: NextMessage timed out with part of a message in msg.
	msgPartial bool
	// trying: tryNextMessage is reading; readNet does not wait.
	trying bool
	// raw: rio serves nc (a plain socket on Linux); fixed at creation.
	raw bool
	// The message being read whole: what it holds of the Budget (until the
	// next read call), and NextMessage's buffer in its pool handle (the
	// slice in the box: keepMessage).
	mcharge charge
	msgp    *[]byte

	// Write side: wmu serialises every frame written to nc.
	wmu      sync.Mutex
	wbufSize int32
	ctrlMu   sync.Mutex
	// wbuf is the encode buffer, from writeBufPool while wmu is held or
	// while it holds frames buffered by BufferMessage (between calls,
	// wbuf is exactly those frames).
	wbuf       []byte
	wbufp      *[]byte // the pool's handle of wbuf
	rio        rawIO   // raw system calls on a plain socket (rawio_linux.go) when raw
	ctrlQueued *[]byte // a pong waiting for the write lock, from ctrlBufs; nil: none

	closeOnce    sync.Once
	closeTimeout time.Duration

	// The deadlines last set (deadlineNanos), which a read or write with a
	// context restores when it is over.
	readDeadline  atomic.Int64
	writeDeadline atomic.Int64

	// x holds what most connections never use, made when first needed
	// (extra): an idle connection keeps only the fields above.
	x atomic.Pointer[connExtra]
}

// connFlags are a Conn's atomic flags, one bit each of one word.
type connFlags struct{ v atomic.Uint32 }

const (
	flagClosed      uint32 = 1 << iota // Close or CloseNow was called
	flagCloseSent                      // a close frame was written
	flagCtrlPending                    // ctrlQueued is not empty
	flagBuffered                       // wbuf holds frames buffered by BufferMessage
	flagFlushWanted                    // the reader is about to wait: write the buffered frames
)

func (f *connFlags) has(b uint32) bool { return f.v.Load()&b != 0 }
func (f *connFlags) set(b uint32)      { f.v.Or(b) }
func (f *connFlags) clear(b uint32)    { f.v.And(^b) }

// setFirst sets b and reports whether this call did (it was clear).
func (f *connFlags) setFirst(b uint32) bool { return f.v.Or(b)&b == 0 }

// connExtra is the part of a Conn that few connections need: callbacks
// that are rarely set, leftover handshake bytes, the pieces of a large
// message, the writer's vector for a connection without raw I/O, the
// sticky errors of a failed side, and the channels that Close and Ping
// wait on. Each field keeps the owner it had in Conn (the reader, the
// writer under wmu, or any goroutine for the channels).
type connExtra struct {
	subp           string         // the subprotocol chosen in the handshake (fixed)
	onPing, onPong func([]byte)   // AcceptOptions.OnPing, DialOptions.OnPing (reader)
	pending        []byte         // leftover handshake bytes to feed before reading nc (reader)
	chunks         [][]byte       // the earlier pieces of a large message (endMessage; reader)
	chunkps        []*[]byte      // their pool handles
	chunked        int            // their bytes
	wv             net.Buffers    // what writeBuffers hands to net.Buffers.WriteTo (writer)
	activeRead     *messageReader // the message Reader streams (reader)
	readErr        error          // sticky error of the read side (reader; readError)
	writeErr       error          // sticky: a failed or partial write leaves the stream unusable (writer; writeError)

	readDead      chan struct{} // closed when the read side has a final error (setReadErr)
	closeRecv     chan struct{} // closed when the peer's close frame arrived (peerClosed)
	closeRecvOnce sync.Once
	pongs         chan struct{} // a pong arrived (buffer 1): Ping waits on it
}

// extra returns c.x, making it first if need be. A channel made here after
// the event it stands for cannot miss it: the event itself closes or fills
// it through extra.
func (c *Conn) extra() *connExtra {
	if x := c.x.Load(); x != nil {
		return x
	}
	x := &connExtra{readDead: make(chan struct{}), closeRecv: make(chan struct{}), pongs: make(chan struct{}, 1)}
	if c.x.CompareAndSwap(nil, x) {
		return x
	}
	return c.x.Load()
}

// readError returns the read side's sticky error, nil while it has none;
// the reader's.
func (c *Conn) readError() error {
	if x := c.x.Load(); x != nil {
		return x.readErr
	}
	return nil
}

// writeError returns the write side's sticky error, nil while it has
// none; the caller holds wmu.
func (c *Conn) writeError() error {
	if x := c.x.Load(); x != nil {
		return x.writeErr
	}
	return nil
}

// pendingInput returns the leftover handshake bytes not fed to the
// Protocol yet; the reader's.
func (c *Conn) pendingInput() []byte {
	if x := c.x.Load(); x != nil {
		return x.pending
	}
	return nil
}

// chunked returns the bytes of the pieces of the large message being read
// (connExtra.chunks); the reader's.
func (c *Conn) chunked() int {
	if x := c.x.Load(); x != nil {
		return x.chunked
	}
	return 0
}

type connConfig struct {
	role            Role
	subprotocol     string
	params          *DeflateParams
	compression     CompressionOptions
	maxMessageSize  int64
	maxFrameSize    int64
	budget          *Budget
	readBufferSize  int
	writeBufferSize int
	closeTimeout    time.Duration
	onPing, onPong  func([]byte)
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
		nc:           nc,
		wbufSize:     int32(min(cfg.writeBufferSize, math.MaxInt32)),
		closeTimeout: cfg.closeTimeout,
	}
	c.p.init(Config{
		Role:           cfg.role,
		MaxFrameSize:   cfg.maxFrameSize,
		MaxMessageSize: cfg.maxMessageSize,
		Deflate:        cfg.params,
		Compression:    cfg.compression,
		ReadBufferSize: cfg.readBufferSize,
		Budget:         cfg.budget,
	})
	c.mcharge.b = cfg.budget
	if cfg.subprotocol != "" || cfg.onPing != nil || cfg.onPong != nil || len(cfg.leftover) > 0 {
		x := c.extra()
		x.subp, x.onPing, x.onPong = cfg.subprotocol, cfg.onPing, cfg.onPong
		if len(cfg.leftover) > 0 {
			x.pending = append([]byte(nil), cfg.leftover...)
		}
	}
	c.raw = c.rio.init(nc)
	return c
}

// rawSocket reports whether nc is a socket the Conn may, on Linux, read and
// write with raw system calls through its syscall.RawConn (rawio_linux.go):
// a *net.TCPConn or *net.UnixConn, or a nonblock.Socket (a server's own
// socket, out of the runtime's poller), whose contract nonblock documents.
func rawSocket(nc net.Conn) bool {
	switch c := nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	case interface {
		syscall.Conn
		RawSocket() bool
	}:
		return c.RawSocket()
	}
	return false
}

// bufferHooks is how a raw read (rawIO.readIdle) waits without a buffer:
// idleBuffer gives the read buffer back while the socket has nothing to
// read (it reports whether it did), refillBuffer returns the one to read
// into once it has. A Conn implements them on its Protocol's receive
// buffer; an interface, unlike two method values, costs no allocation.
type bufferHooks interface {
	idleBuffer() bool
	refillBuffer() []byte
}

func (c *Conn) idleBuffer() bool { return c.p.ReleaseReadBuffer() }

// hooks returns c as the bufferHooks of a raw read into the Protocol's
// receive buffer (idle), or nil for a read into another buffer.
func (c *Conn) hooks(idle bool) bufferHooks {
	if idle {
		return c
	}
	return nil
}

func (c *Conn) refillBuffer() []byte { return c.p.ReadBuffer(c.readMin()) }

// readMin is the least free space to read into: half the read buffer.
func (c *Conn) readMin() int { return max(c.p.bufHint/2, 1) }

// NetConn returns the underlying connection. Reading from or writing to it
// directly corrupts the WebSocket stream; it is meant for addresses, socket
// options and TLS state.
func (c *Conn) NetConn() net.Conn { return c.nc }

// RemoteAddr returns the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr returns the local network address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Subprotocol returns the subprotocol chosen in the handshake, or "".
func (c *Conn) Subprotocol() string {
	if x := c.x.Load(); x != nil {
		return x.subp
	}
	return ""
}

// Deflate returns the permessage-deflate parameters negotiated in the
// handshake (RFC 7692 §7), or nil when the extension is not in use.
func (c *Conn) Deflate() *DeflateParams {
	if c.p.fl == nil {
		return nil
	}
	return c.p.fl.params
}

// Compressed reports whether permessage-deflate (RFC 7692) was negotiated:
// Deflate() != nil. Whether a message goes out compressed also depends on
// its size (the compression threshold).
func (c *Conn) Compressed() bool { return c.p.fl != nil }

// SetReadDeadline sets the deadline for reads. A read that times out returns
// an error for which os.IsTimeout is true and leaves the connection intact: a
// later read continues where the stream stopped.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.readDeadline.Store(deadlineNanos(t))
	return c.nc.SetReadDeadline(t)
}

// SetWriteDeadline sets the deadline for writes. Unlike a read, a write that
// times out part way through a frame leaves the stream unusable, so every
// later write fails with the same error.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.writeDeadline.Store(deadlineNanos(t))
	return c.nc.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
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

// deadlineNanos is t as Unix nanoseconds, without an allocation per setter
// call: 0 is no deadline (the zero time), and a time outside what UnixNano
// holds (before 1678 or after 2262) becomes the nearest one it holds,
// which changes no deadline's effect. deadlineTime undoes it.
func deadlineNanos(t time.Time) int64 {
	const limit = math.MaxInt64/int64(time.Second) - 1
	switch s := t.Unix(); {
	case t.IsZero():
		return 0
	case s > limit:
		return math.MaxInt64
	case s < -limit:
		return math.MinInt64
	}
	return cmp.Or(t.UnixNano(), 1) // 0 is taken
}

func deadlineTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func watch(ctx context.Context, set func(time.Time) error, user *atomic.Int64) (func(error) error, error) {
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
		set(deadlineTime(user.Load()))
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
