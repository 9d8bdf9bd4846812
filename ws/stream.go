package ws

import (
	"context"
	"fmt"
	"io"
)

// Writer returns a writer for one message of type op (TextMessage or
// BinaryMessage). Data is sent in frames of up to the write buffer size as it
// is written (RFC 6455 §5.4 fragmentation); Close sends the final frame.
//
// The writer holds the connection's write lock until it is closed, so other
// data messages wait (frames of two messages never interleave); automatic
// pongs are sent between its frames. Streamed messages are not compressed.
func (c *Conn) Writer(ctx context.Context, op Opcode) (io.WriteCloser, error) {
	if op != OpText && op != OpBinary {
		return nil, fmt.Errorf("ws: Writer: opcode %v is not a data opcode", op)
	}
	c.lockWrite()
	if err := c.writable(); err != nil {
		c.unlockWrite()
		return nil, err
	}
	bp := writeBufPool.Get().(*[]byte)
	buf := *bp
	if cap(buf) < int(c.wbufSize) {
		buf = make([]byte, 0, c.wbufSize)
	}
	return &messageWriter{c: c, ctx: ctx, op: op, buf: buf[:0], limit: int(c.wbufSize), bufp: bp}, nil
}

type messageWriter struct {
	c      *Conn
	ctx    context.Context
	op     Opcode  // the opcode of the next frame: op, then OpContinuation
	buf    []byte  // the frame being filled, at most limit bytes
	limit  int     // the write buffer size: the payload of one frame
	bufp   *[]byte // the pool's handle of buf
	closed bool
	err    error
}

func (w *messageWriter) Write(p []byte) (int, error) {
	if w.closed {
		return 0, ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for len(p) > 0 {
		room := w.limit - len(w.buf)
		if room == 0 {
			if err := w.flush(false); err != nil {
				return n, err
			}
			continue
		}
		k := min(room, len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		n += k
	}
	return n, nil
}

// Close sends the final frame and releases the connection's write lock.
func (w *messageWriter) Close() error {
	if w.closed {
		return nil
	}
	err := w.err
	if err == nil {
		err = w.flush(true)
	}
	w.closed = true
	if cap(w.buf) <= maxPooledWriteBuf {
		*w.bufp = w.buf[:0]
		writeBufPool.Put(w.bufp)
	}
	w.buf, w.bufp = nil, nil
	w.c.unlockWrite()
	return err
}

func (w *messageWriter) flush(fin bool) error {
	c := w.c
	stop, err := c.watchWrite(w.ctx)
	if err != nil {
		w.err = err
		return err
	}
	if err := c.writable(); err != nil {
		w.err = stop(err)
		return w.err
	}
	c.pmu.Lock()
	c.wbuf, err = c.p.AppendFrame(c.flushCtrl(c.wbuf), w.op, w.buf, fin) // buffered frames first
	c.pmu.Unlock()
	if err == nil {
		err = c.writeLocked(c.wbuf)
	}
	c.wbuf = c.wbuf[:0]
	c.flags.clear(flagBuffered)
	w.buf = w.buf[:0]
	w.op = OpContinuation
	if err = stop(err); err != nil {
		w.err = err
	}
	return err
}
