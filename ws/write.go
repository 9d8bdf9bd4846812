package ws

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
)

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
	if !c.flags.has(flagBuffered) {
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

// stageChunk is the most of a message's payload that the encode buffer
// takes at a time. A plain server frame with a larger payload is not encoded
// whole: its header goes into the buffer and the payload follows through it
// stageChunk bytes at a time, one write each (writeStaged), so a writer
// holds at most about stageChunk of buffer.
//
// The payload is copied behind the header, not written from where it lies
// with writev: a large Go buffer starts at a page, and a payload that the
// header shifts off that alignment in the stream makes the kernel's copy
// into the socket slow on some CPUs (AMD EPYC). Copied, the frame lies in
// memory as it goes in the stream. A chunk is large because every write
// also wakes the reader.
const stageChunk = 1 << 20

// writeMessageLocked appends the message's frame to the buffered ones and
// writes them all, or, with buffer set, leaves them buffered while they fit
// in the write buffer. The caller holds wmu.
func (c *Conn) writeMessageLocked(op Opcode, p []byte, buffer bool) error {
	if err := c.writable(); err != nil {
		return err
	}
	c.pmu.Lock()
	dst := c.flushCtrl(c.wbuf)
	var staged bool
	var err error
	if len(p) > stageChunk {
		// A plain server frame: the payload is staged (writeStaged).
		dst, staged, err = c.p.AppendMessageHeader(dst, op, len(p))
	}
	if !staged && err == nil {
		dst, err = c.p.AppendMessage(dst, op, p)
	}
	c.pmu.Unlock()
	c.wbuf = dst
	if err != nil {
		c.flushLocked() // what was buffered still goes out
		return err
	}
	if buffer && !staged && len(c.wbuf) < int(c.wbufSize) {
		c.flags.set(flagBuffered)
		return nil
	}
	if staged {
		err = c.writeStaged(p)
	} else {
		err = c.writeLocked(c.wbuf)
	}
	c.wbuf = c.wbuf[:0]
	c.flags.clear(flagBuffered)
	return err
}

// flushLocked writes the buffered frames and the queued control frames; the
// caller holds wmu. On a connection that can no longer write they are
// dropped.
func (c *Conn) flushLocked() error {
	c.wbuf = c.flushCtrl(c.wbuf)
	c.flags.clear(flagBuffered)
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
	c.flags.set(flagFlushWanted)
	if c.tryLockWrite() {
		c.unlockWrite()
	}
}

// WritePrepared writes a message encoded once by NewPreparedMessage. A server
// connection writes the prepared bytes as they are (their compressed form when
// Compressed is true, see Protocol.PreparedFrame); a client connection must
// mask its frames (RFC 6455 §5.3), so it encodes the message itself. ctx
// bounds the write as in WriteMessage; a context that can never end (nil,
// context.Background) costs nothing, and the write deadline still applies.
func (c *Conn) WritePrepared(ctx context.Context, m *PreparedMessage) error {
	return c.WritePreparedBatch(ctx, []*PreparedMessage{m})
}

// WritePreparedBatch writes many prepared messages with as few system calls
// as the connection allows (one writev on a TCP connection). It is the write
// path of a broadcast: no copy and no allocation per message. ctx is used as
// in WritePrepared.
func (c *Conn) WritePreparedBatch(ctx context.Context, ms []*PreparedMessage) error {
	if c.p.role != RoleServer {
		for _, m := range ms {
			if err := c.WriteMessage(ctx, m.Op(), m.Payload()); err != nil {
				return err
			}
		}
		return nil
	}
	stop, err := c.watchWrite(ctx)
	if err != nil {
		return err
	}
	c.lockWrite()
	defer c.unlockWrite()
	return stop(c.writePreparedLocked(ms))
}

// writePreparedLocked is WritePreparedBatch on a server; the caller holds
// wmu.
func (c *Conn) writePreparedLocked(ms []*PreparedMessage) error {
	if err := c.writable(); err != nil {
		return err
	}
	c.wbuf = c.flushCtrl(c.wbuf) // buffered frames and pongs first
	c.flags.clear(flagBuffered)
	// While everything is one buffer (one message, or frames back to back) it
	// is written as one, and a connection that only ever wrote that keeps no
	// vector.
	one := c.wbuf
	var bufs net.Buffers
	var vec *net.Buffers // bufs's box in vectors, once there are two buffers
	c.pmu.Lock()
	contextual := c.p.fl != nil && c.p.fl.contextual()
	for _, m := range ms {
		var f []byte
		var err error
		if contextual && m.compressible() {
			// Compressed for this connection, into the encode buffer.
			start := len(c.wbuf)
			c.wbuf, err = c.p.appendContextFrame(c.wbuf, m)
			f = c.wbuf[start:]
		} else {
			f, err = c.p.PreparedFrame(m)
		}
		if err != nil {
			c.pmu.Unlock()
			putVector(vec, bufs)
			c.flushLocked() // what was buffered still goes out
			return err
		}
		// Frames that lie back to back in memory (AppendPreparedMessage
		// into one buffer) go out as one buffer.
		switch k := len(bufs) - 1; {
		case k < 0 && len(one) == 0:
			one = f
		case k < 0 && adjacent(one, f):
			one = one[:len(one)+len(f)]
		case k < 0:
			vec = vectors.Get().(*net.Buffers)
			bufs = append((*vec)[:0], one, f)
		case adjacent(bufs[k], f):
			bufs[k] = bufs[k][:len(bufs[k])+len(f)]
		default:
			bufs = append(bufs, f)
		}
	}
	c.pmu.Unlock()
	if len(bufs) == 0 {
		if len(one) == 0 {
			return nil
		}
		err := c.writeLocked(one)
		c.wbuf = c.wbuf[:0]
		return err
	}
	if _, ok := c.nc.(*tls.Conn); ok {
		// TLS seals each Write in its own records: one buffer is cheaper.
		b := c.wbuf[:0]
		for _, f := range bufs {
			b = append(b, f...)
		}
		c.wbuf = b
		putVector(vec, bufs)
		err := c.writeLocked(b)
		c.wbuf = c.wbuf[:0]
		return err
	}
	err := c.writeBuffers(bufs)
	putVector(vec, bufs) // let the frames go
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.extra().writeErr = err
	}
	return err
}

// adjacent reports whether b starts where a ends, in a's array.
func adjacent(a, b []byte) bool {
	return len(b) > 0 && cap(a)-len(a) >= len(b) && &a[:len(a)+1][len(a)] == &b[0]
}

// WritePreparedFrames writes frames, the plain frames of one or more
// prepared data messages back to back (as AppendPreparedMessage lays them
// out), in one system call on a TCP connection: the broadcast path for a
// connection that takes every message as it is. Only a server connection
// sends prepared frames. With permessage-deflate negotiated they go out
// uncompressed, which RFC 7692 §6 allows; WritePreparedBatch sends them
// compressed. The bytes are neither modified nor retained. ctx is used as
// in WritePrepared.
func (c *Conn) WritePreparedFrames(ctx context.Context, frames []byte) error {
	if c.p.role != RoleServer {
		return errPreparedClient
	}
	stop, err := c.watchWrite(ctx)
	if err != nil {
		return err
	}
	c.lockWrite()
	defer c.unlockWrite()
	return stop(c.writeFramesLocked(frames))
}

// writeFramesLocked is WritePreparedFrames; the caller holds wmu.
func (c *Conn) writeFramesLocked(frames []byte) error {
	if err := c.writable(); err != nil {
		return err
	}
	c.wbuf = c.flushCtrl(c.wbuf) // buffered frames and pongs first
	c.flags.clear(flagBuffered)
	c.pmu.Lock()
	err := c.p.canSendData()
	if err == nil && c.p.outOpen {
		err = errStreamOpen
	}
	if err == nil && c.p.fl != nil && c.p.fl.takeover {
		// The peer's window now holds data the compressor never saw
		// (RFC 7692 §7.2.3.3), as in PreparedFrame.
		c.p.fl.resetCompressor()
	}
	c.pmu.Unlock()
	if err != nil {
		c.flushLocked() // what was buffered still goes out
		return err
	}
	switch _, tlsConn := c.nc.(*tls.Conn); {
	case len(c.wbuf) == 0:
		return c.writeLocked(frames)
	case tlsConn:
		// TLS seals each Write in its own records: one buffer is cheaper.
		c.wbuf = append(c.wbuf, frames...)
		err = c.writeLocked(c.wbuf)
	default:
		err = c.writeVectored(c.wbuf, frames)
	}
	c.wbuf = c.wbuf[:0]
	return err
}

// writeBuffers writes bufs with writev; the caller holds wmu.
func (c *Conn) writeBuffers(bufs net.Buffers) error {
	if c.raw {
		return c.rio.writeBuffers(c.nc, bufs)
	}
	// WriteTo consumes its receiver: give it a field (a local whose
	// address is taken would be allocated on every call).
	x := c.extra()
	x.wv = bufs
	_, err := x.wv.WriteTo(c.nc)
	x.wv = nil
	return err
}

// Ping sends a ping and waits for a pong or for ctx to end. Pongs are only
// seen while some goroutine reads from the connection.
func (c *Conn) Ping(ctx context.Context, payload []byte) error {
	if len(payload) > 125 {
		return errors.New("ws: ping payload longer than 125 bytes")
	}
	x := c.extra() // before the ping goes out: the reader sends on x.pongs
	select {       // forget a stale pong
	case <-x.pongs:
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
		c.flags.clear(flagBuffered)
	}
	c.unlockWrite()
	if err = stop(err); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	select {
	case <-x.pongs:
		return nil
	case <-x.closeRecv:
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
	if c.ctrlQueued == nil {
		c.ctrlQueued = ctrlBufs.Get().(*[]byte)
	}
	c.pmu.Lock()
	// Only the latest pong matters (RFC 6455 §5.5.3 allows answering only
	// the most recent ping).
	*c.ctrlQueued = c.p.AppendPong((*c.ctrlQueued)[:0], payload)
	c.pmu.Unlock()
	c.flags.set(flagCtrlPending)
	c.ctrlMu.Unlock()
	if c.tryLockWrite() {
		c.unlockWrite()
	}
}

// vectors holds the vectors of buffers that one writev writes, so that a
// connection holds one only while it writes.
var vectors = sync.Pool{New: func() any { return new(net.Buffers) }}

// putVector gives vec back to vectors with bufs, the vector taken from it
// and grown, emptied (the frames go); a nil vec is none.
func putVector(vec *net.Buffers, bufs net.Buffers) {
	if vec != nil {
		clear(bufs)
		*vec = bufs[:0]
		vectors.Put(vec)
	}
}

// ctrlBufs holds the buffers of queued pongs (Conn.ctrlQueued), so that a
// connection holds one only while a pong waits for the write lock.
var ctrlBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 2+4+MaxControlPayload) // header, mask key (a client's), payload
	return &b
}}

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
		if c.flags.has(flagCtrlPending) || c.flags.has(flagFlushWanted) {
			c.flags.clear(flagFlushWanted)
			// On a connection that can no longer write, flushing just
			// drops the frames.
			c.flushLocked()
		}
		c.releaseWbuf()
		c.wmu.Unlock()
		if (!c.flags.has(flagCtrlPending) && !c.flags.has(flagFlushWanted)) || !c.tryLockWrite() {
			return
		}
	}
}

// flushCtrl appends queued control frames to dst. The caller holds wmu.
// With none queued it takes no lock (once per message written): a pong
// queued just after the check sets ctrlPending, which unlockWrite looks at
// before and after it lets the write lock go.
func (c *Conn) flushCtrl(dst []byte) []byte {
	if !c.flags.has(flagCtrlPending) {
		return dst
	}
	c.ctrlMu.Lock()
	if q := c.ctrlQueued; q != nil {
		dst = append(dst, *q...)
		*q = (*q)[:0]
		ctrlBufs.Put(q)
		c.ctrlQueued = nil
	}
	c.flags.clear(flagCtrlPending)
	c.ctrlMu.Unlock()
	return dst
}

func (c *Conn) writable() error {
	if err := c.writeError(); err != nil {
		return err
	}
	if c.flags.has(flagCloseSent) {
		return ErrClosed
	}
	return nil
}

// writeLocked writes b to the connection; the caller holds wmu. A failed
// write is sticky: part of a frame may have gone out.
func (c *Conn) writeLocked(b []byte) error {
	var err error
	if c.raw {
		err = c.rio.write(c.nc, b)
	} else {
		_, err = c.nc.Write(b)
	}
	if err != nil {
		if c.flags.has(flagClosed) {
			err = ErrClosed
		}
		c.extra().writeErr = err
	}
	return err
}

// writeStaged writes the encode buffer and then p, copying p into the
// buffer behind what it holds, at most stageChunk bytes of p a write; the
// caller holds wmu. It leaves the buffer empty.
func (c *Conn) writeStaged(p []byte) error {
	for {
		n := min(len(p), stageChunk)
		c.wbuf = append(c.wbuf, p[:n]...)
		p = p[n:]
		err := c.writeLocked(c.wbuf)
		c.wbuf = c.wbuf[:0]
		if err != nil || len(p) == 0 {
			return err
		}
	}
}

// writeVectored writes a and then b with one writev; the caller holds wmu.
func (c *Conn) writeVectored(a, b []byte) error {
	vec := vectors.Get().(*net.Buffers)
	bufs := append((*vec)[:0], a, b)
	err := c.writeBuffers(bufs)
	putVector(vec, bufs)
	if err != nil {
		if c.flags.has(flagClosed) {
			err = ErrClosed
		}
		c.extra().writeErr = err
	}
	return err
}
