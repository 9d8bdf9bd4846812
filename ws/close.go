package ws

import (
	"errors"
	"io"
	"time"
)

// failRead answers a protocol violation with the close code the protocol
// chose (RFC 6455 §7.1.7); the read call then drops the connection
// (lingerIfFailed), once it has given back the message's buffers.
func (c *Conn) failRead(err error) error {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		c.writeClose(func(dst []byte) ([]byte, error) { return c.p.AppendPendingClose(dst), nil })
		c.lingerWanted = true
	}
	return c.setReadErr(err)
}

// lingerIfFailed runs lingerClose after failRead, at the end of the read
// call (which holds rmu): the linger may take a second, and a message that
// failed (one inflating past the limit, say) must not hold its memory that
// long after its Budget charge was given back.
func (c *Conn) lingerIfFailed() {
	if c.lingerWanted {
		c.lingerWanted = false
		c.lingerClose()
	}
}

// peerClosed echoes the peer's close frame (RFC 6455 §5.5.1) and closes the
// TCP connection.
func (c *Conn) peerClosed(code StatusCode, reason string) error {
	x := c.extra()
	x.closeRecvOnce.Do(func() { close(x.closeRecv) })
	c.sendClose(code, "") // 1005 (no status) echoes as an empty close frame
	c.closeNC()
	return c.setReadErr(&CloseError{Code: code, Reason: reason})
}

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
			c.doneMessage()
			if _, _, rerr := c.readInto(nil, false); rerr != nil {
				break
			}
		}
		c.doneMessage()
		c.lingerIfFailed()
		c.rmu.Unlock()
	} else {
		// Another goroutine reads; it will see the peer's close or fail.
		t := time.NewTimer(c.closeTimeout)
		x := c.extra()
		select {
		case <-x.closeRecv:
		case <-x.readDead:
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
		c.flags.set(flagClosed)
		err = c.nc.Close()
		c.mcharge.release()
		if c.rmu.TryLock() {
			// Nobody reads: drop a message left half read, with its
			// charge on the Budget. (A reader does so when its read ends.)
			c.p.Release()
			c.rmu.Unlock()
		}
	})
	return err
}

// sendClose writes one close frame; later calls return ErrClosed. A zero
// code sends a close frame without a body.
func (c *Conn) sendClose(code StatusCode, reason string) error {
	return c.writeClose(func(dst []byte) ([]byte, error) { return c.p.AppendClose(dst, code, reason) })
}

func (c *Conn) writeClose(appendClose func([]byte) ([]byte, error)) error {
	if !c.flags.setFirst(flagCloseSent) {
		return ErrClosed
	}
	c.lockWrite()
	defer c.unlockWrite()
	if err := c.writeError(); err != nil {
		return err
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.closeTimeout))
	c.pmu.Lock()
	var err error
	c.wbuf, err = appendClose(c.flushCtrl(c.wbuf)) // buffered frames first
	c.pmu.Unlock()
	c.flags.clear(flagBuffered)
	if err != nil {
		c.wbuf = c.wbuf[:0]
		return err
	}
	err = c.writeLocked(c.wbuf)
	c.wbuf = c.wbuf[:0]
	return err
}
