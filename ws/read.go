package ws

import (
	"context"
	"errors"
	"io"
)

// ReadMessage reads one whole message and returns its type (TextMessage or
// BinaryMessage) and payload in a newly allocated slice.
func (c *Conn) ReadMessage(ctx context.Context) (Opcode, []byte, error) {
	return c.ReadMessageInto(ctx, nil)
}

// ReadMessageInto reads one whole message and appends its payload to buf. A
// server that passes the same buffer each time reads without allocating.
// When buf has to grow it grows with the data that arrived (never to the
// length a frame header announces), and the payload counts against the
// Budget until the next read call.
func (c *Conn) ReadMessageInto(ctx context.Context, buf []byte) (Opcode, []byte, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.doneMessage()
	stop, err := c.watchRead(ctx)
	if err != nil {
		return 0, buf, err
	}
	op, buf, err := c.readInto(buf, false)
	c.lingerIfFailed()
	return op, buf, stop(err)
}

// NextMessage reads one whole message into a buffer the Conn owns and
// returns its type and payload, valid until the next read call (or Close).
// It is the read for a server of many connections: between messages a
// connection keeps at most a small buffer (4 KiB), and the larger buffers a
// message needed go back to pools shared by every connection when the next
// read call starts, as does the message's charge on the Budget. A message
// past 1 MiB is collected in pooled pieces and joined in one buffer of its
// size at its end. Messages up to 1 MiB are read without allocating.
func (c *Conn) NextMessage(ctx context.Context) (Opcode, []byte, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	buf := c.resumeMessage()
	stop, err := c.watchRead(ctx)
	if err != nil {
		return 0, nil, err
	}
	op, buf, err := c.readInto(buf, true)
	c.keepMessage(buf)
	if err != nil {
		if len(buf) > 0 && c.readError() == nil {
			c.msgPartial = true // a timeout: the stream is intact
		} else {
			c.doneMessage()
			c.lingerIfFailed()
		}
		return 0, nil, stop(err)
	}
	return op, buf, stop(nil)
}

// tryNextMessage is NextMessage that does not wait for the socket
// (nonblock.NextMessage, which documents it). Between messages it gives the
// message buffer and the receive buffer back to the pools.
func (c *Conn) tryNextMessage() (Opcode, []byte, error) {
	if !c.raw {
		return 0, nil, errNoTryRead
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	buf := c.resumeMessage()
	c.trying = true
	op, buf, err := c.readInto(buf, true)
	c.trying = false
	c.keepMessage(buf)
	if err == nil {
		return op, buf, nil
	}
	if c.readError() == nil && (err == errWouldBlock || isTimeout(err)) {
		if len(buf) > 0 {
			c.msgPartial = true // the stream is intact: go on next time
		} else {
			c.doneMessage()
			putBuf(c.msgp, c.message()) // idle: no message buffer either
			c.msgp = nil
		}
		return 0, nil, err
	}
	c.doneMessage()
	c.lingerIfFailed()
	return 0, nil, err
}

// canTryRead reports whether tryNextMessage works on this connection: a
// raw socket on Linux (nonblock.Supported).
func (c *Conn) canTryRead() bool { return c.raw }

// resumeMessage returns the buffer the next message is read into: the part
// of a message the last call left (it timed out, or would have blocked, in
// the middle of it), or, after the end of the last message (doneMessage),
// an empty buffer. The caller holds rmu.
func (c *Conn) resumeMessage() []byte {
	if c.msgPartial {
		c.msgPartial = false
		return c.message()
	}
	c.doneMessage()
	return c.message()[:0]
}

// doneMessage ends the life of the message the last read call returned: its
// charge on the Budget is released, and NextMessage's buffer goes back to
// the pools unless it is small. The caller holds rmu.
func (c *Conn) doneMessage() {
	c.mcharge.release()
	c.dropChunks()
	if m := c.message(); cap(m) > keepBuf {
		putBuf(c.msgp, m)
		c.msgp = nil
	}
}

// keepMessage keeps buf, what the last read call read of a message, in
// the box of the pooled buffer behind it (c.msgp; a box of its own for a
// message joined from pieces) until the next read call; the caller holds
// rmu.
func (c *Conn) keepMessage(buf []byte) {
	if c.msgp == nil {
		if cap(buf) == 0 {
			return
		}
		c.msgp = new([]byte)
	}
	*c.msgp = buf
}

// message returns what keepMessage kept, nil if nothing; the caller holds
// rmu.
func (c *Conn) message() []byte {
	if c.msgp == nil {
		return nil
	}
	return *c.msgp
}

// readInto reads one message, appending it to buf; owned says that buf is
// NextMessage's (c.message(), in c.msgp), which grows from the pools.
func (c *Conn) readInto(buf []byte, owned bool) (Opcode, []byte, error) {
	if err := c.finishActiveRead(); err != nil {
		return 0, buf, err
	}
	start := len(buf)
	if owned {
		start = 0 // a message continued after a timeout counts whole
	}
	for {
		if want := c.p.PayloadWanted(); want >= directReadMin && c.readError() == nil && len(c.pendingInput()) == 0 {
			// The rest of a large frame: read it straight into buf, so
			// that its bytes are copied once, by the read system call.
			if cap(buf)-len(buf) < directReadMin {
				need := len(buf) + int(min(want, 2*int64(c.readMin())))
				if owned && need > maxPooledBuf {
					buf = c.nextChunk(buf)
				} else {
					buf = c.growMsg(buf, need, want, owned)
				}
			}
			free := buf[len(buf):cap(buf)]
			n, err := c.readNet(free[:min(int64(len(free)), want)], false)
			if n > 0 {
				ev, perr := c.p.ReceivePayload(free[:n])
				if perr != nil {
					return 0, buf, c.failMessage(perr)
				}
				buf = buf[:len(buf)+n]
				if !c.chargeMessage(c.chunked() + len(buf) - start) {
					return 0, buf, c.failBusy()
				}
				if ev.Fin {
					return c.endMessage(ev.Op, buf)
				}
				continue
			}
			if err != nil {
				c.releaseUnlessWouldBlock(err)
				return 0, buf, err
			}
			continue
		}
		var ev Event
		err := c.nextEvent(&ev)
		if err != nil {
			c.releaseUnlessWouldBlock(err)
			return 0, buf, err
		}
		if n := len(ev.Payload); n > 0 {
			if !c.chargeMessage(c.chunked() + len(buf) + n - start) {
				return 0, buf, c.failBusy()
			}
			if cap(buf)-len(buf) < n {
				if owned && len(buf)+n > maxPooledBuf {
					buf = c.nextChunk(buf)
				} else {
					buf = c.growMsg(buf, len(buf)+n, int64(n)+c.p.remaining, owned)
				}
			}
			buf = append(buf, ev.Payload...)
		}
		if ev.Fin {
			return c.endMessage(ev.Op, buf)
		}
	}
}

// releaseUnlessWouldBlock gives back the charge of the message being read
// when its read failed or timed out; a tryNextMessage that found no more
// bytes keeps it, since the message goes on with the next call.
func (c *Conn) releaseUnlessWouldBlock(err error) {
	if err != errWouldBlock {
		c.mcharge.release()
	}
}

// A message NextMessage reads that outgrows the largest pooled buffer
// (1 MiB) is collected in pooled pieces of that size (c.chunks, then msg)
// and joined into one buffer of its exact size when complete: growing it
// copies nothing, and a message never completed leaves no garbage.

// nextChunk puts the full piece buf aside and returns a new, empty one.
func (c *Conn) nextChunk(buf []byte) []byte {
	if len(buf) > 0 {
		x := c.extra()
		x.chunks = append(x.chunks, buf)
		x.chunkps = append(x.chunkps, c.msgp)
		x.chunked += len(buf)
	} else {
		putBuf(c.msgp, buf)
	}
	bp, nb := getBuf(maxPooledBuf)
	c.msgp = bp
	return nb
}

// endMessage returns the complete message whose last piece is tail. The
// pieces are copied into one buffer, charged twice for the moment of the
// copy.
func (c *Conn) endMessage(op Opcode, tail []byte) (Opcode, []byte, error) {
	x := c.x.Load()
	if x == nil || len(x.chunks) == 0 {
		return op, tail, nil
	}
	total := x.chunked + len(tail)
	if !c.chargeMessage(2 * total) {
		return 0, tail, c.failBusy()
	}
	out := make([]byte, 0, total)
	for _, ch := range x.chunks {
		out = append(out, ch...)
	}
	out = append(out, tail...)
	c.dropChunks()
	putBuf(c.msgp, tail)
	c.msgp = nil
	c.mcharge.shrink(total)
	return op, out, nil
}

// dropChunks returns the pieces put aside to the pool.
func (c *Conn) dropChunks() {
	x := c.x.Load()
	if x == nil {
		return
	}
	for i, ch := range x.chunks {
		putBuf(x.chunkps[i], ch)
	}
	clear(x.chunks)
	clear(x.chunkps)
	x.chunks, x.chunkps, x.chunked = x.chunks[:0], x.chunkps[:0], 0
}

// failBusy fails the connection because the Budget refused the message.
func (c *Conn) failBusy() error {
	c.p.fail(errBusy)
	return c.failMessage(errBusy)
}

// chargeMessage charges the message being read with size bytes in all and
// reports false when the Budget refuses. A charge taken while CloseNow runs
// on another goroutine is given back at once.
func (c *Conn) chargeMessage(size int) bool {
	if !c.mcharge.grow(size) {
		return false
	}
	if c.flags.has(flagClosed) {
		c.mcharge.release()
	}
	return true
}

// failMessage fails the read side with a protocol error while a message is
// being read: the message's charge goes first, so that the close frame and
// the linger after it hold nothing of the Budget.
func (c *Conn) failMessage(err error) error {
	c.mcharge.release()
	return c.failRead(err)
}

// growMsg returns buf with room for need bytes in all, grown as growCap
// says; rest is what the current frame still carries. A buffer of
// NextMessage's comes from the pools and the one it replaces goes back.
func (c *Conn) growMsg(buf []byte, need int, rest int64, owned bool) []byte {
	bound := int64(-1)
	if p := &c.p; !p.msgCompressed && p.hdr.Fin {
		bound = int64(len(buf)) + rest // the whole message is announced
	} else if p.maxMsg >= 0 {
		bound = p.maxMsg + 1
	}
	if !owned {
		nb := make([]byte, len(buf), growCap(len(buf), need, bound, false))
		copy(nb, buf)
		return nb
	}
	bp, nb := getBuf(growCap(len(buf), need, bound, true))
	nb = append(nb, buf...)
	putBuf(c.msgp, buf)
	c.msgp = bp
	return nb
}

// directReadMin is the least payload still to come for which ReadMessageInto
// reads a frame's payload straight into the caller's buffer. Below it, a
// read into the protocol's buffer, which may take the next frames along in
// the same system call, is the better deal.
const directReadMin = 8 << 10

// Reader returns the next message as a stream: its type and a reader of its
// payload, valid until the next read call. A message need not be read to the
// end; the next read call discards what is left of it. A compressed message
// is streamed once its last frame is in (RFC 7692 §6.1: it is collected
// compressed); one that would inflate past MaxMessageSize fails Reader
// itself with 1009, before any of it is read (see permessage-deflate in the
// package doc).
func (c *Conn) Reader(ctx context.Context) (Opcode, io.Reader, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	stop, err := c.watchRead(ctx)
	if err != nil {
		return 0, nil, err
	}
	c.doneMessage()
	if err := c.finishActiveRead(); err != nil {
		c.lingerIfFailed()
		return 0, nil, stop(err)
	}
	var ev Event
	err = c.nextEvent(&ev)
	if err != nil {
		c.lingerIfFailed()
		return 0, nil, stop(err)
	}
	stop(nil)
	r := &messageReader{c: c, ctx: ctx, op: ev.Op, buf: ev.Payload, eof: ev.Fin}
	c.extra().activeRead = r
	return ev.Op, r, nil
}

func (c *Conn) finishActiveRead() error {
	x := c.x.Load()
	if x == nil || x.activeRead == nil {
		return nil
	}
	r := x.activeRead
	x.activeRead = nil
	for !r.eof {
		var ev Event
		err := c.nextEvent(&ev)
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
		if x := r.c.x.Load(); x == nil || x.activeRead != r {
			return 0, errors.New("ws: read from a message reader after the next message was started")
		}
		stop, err := r.c.watchRead(r.ctx)
		if err != nil {
			return 0, err
		}
		var ev Event
		err = r.c.nextEvent(&ev)
		r.c.lingerIfFailed()
		if err = stop(err); err != nil {
			return 0, err
		}
		r.buf, r.eof = ev.Payload, ev.Fin
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// nextEvent stores the next data event in *ev, handling control frames on
// the way (into *ev too: Protocol.NextInto, an Event is not copied).
func (c *Conn) nextEvent(ev *Event) error {
	if err := c.readError(); err != nil {
		return err
	}
	for {
		if pending := c.pendingInput(); len(pending) > 0 {
			c.p.Receive(pending)
			c.x.Load().pending = nil
		}
		if err := c.p.NextInto(ev); err != nil {
			return c.failRead(err)
		}
		switch ev.Kind {
		case EventMessage:
			return nil
		case EventPing:
			c.queuePong(ev.Payload)
			if x := c.x.Load(); x != nil && x.onPing != nil {
				x.onPing(ev.Payload)
			}
			continue
		case EventPong:
			// Without c.x no Ping has waited (Ping makes it before
			// it sends its ping), and a stale pong is forgotten anyway.
			if x := c.x.Load(); x != nil {
				select {
				case x.pongs <- struct{}{}:
				default:
				}
				if x.onPong != nil {
					x.onPong(ev.Payload)
				}
			}
			continue
		case EventClose:
			return c.peerClosed(ev.Code, ev.Reason)
		}
		// EventNone: the protocol needs more bytes. Read them straight
		// into its buffer, which it gives back while the peer is silent.
		n, err := c.readNet(c.p.ReadBuffer(c.readMin()), true)
		if n > 0 {
			c.p.Commit(n)
			continue
		}
		if err != nil {
			return err
		}
	}
}

// readNet reads from the network into b. Frames buffered by BufferMessage
// are written first: the read may wait, and the peer may be waiting for
// them. An error other than a timeout ends the read side. idle says that b
// is the Protocol's receive buffer (from ReadBuffer), which a raw socket
// read gives back while it waits (Protocol.ReleaseReadBuffer).
func (c *Conn) readNet(b []byte, idle bool) (int, error) {
	if c.flags.has(flagBuffered) {
		c.flushBuffered()
	}
	var n int
	var err error
	switch {
	case c.raw && c.trying:
		n, err = c.rio.tryRead(c.nc, b, c.hooks(idle), c.p.betweenMessages())
		if err == errWouldBlock {
			return 0, err // nothing consumed, the stream is intact
		}
	case c.raw:
		n, err = c.rio.readIdle(c.nc, b, c.hooks(idle))
	default:
		n, err = c.nc.Read(b)
	}
	if err == nil || n > 0 {
		return n, nil
	}
	if isTimeout(err) {
		// A timeout leaves the stream intact; nothing was consumed.
		return 0, err
	}
	if c.flags.has(flagClosed) {
		return 0, c.setReadErr(ErrClosed)
	}
	if errors.Is(err, io.EOF) {
		err = &CloseError{Code: StatusAbnormalClosure, Reason: "connection closed without a close frame"}
	}
	return 0, c.setReadErr(err)
}

func (c *Conn) setReadErr(err error) error {
	if x := c.extra(); x.readErr == nil {
		x.readErr = err
		c.p.Release() // nothing more is received: a partial message and the receive buffer go
		close(x.readDead)
	}
	return err
}
