package ws

import "context"

// TryWritePreparedFrames is WritePreparedFrames that never waits: for a
// caller that wants to write a broadcast on its own goroutine when the
// socket has room, and hand the write to a goroutine that may wait only
// when it has not.
//
// It writes frames (as WritePreparedFrames would) with non-blocking system
// calls and returns how many bytes the socket took:
//
//   - n == len(frames), held false: all written.
//   - n == 0, held false, err nil: nothing was written and nothing changed:
//     the write lock was taken, frames or control frames were waiting
//     before these, the socket was full, or the connection cannot write
//     without waiting (TLS, not a plain socket, other systems). Write them
//     with WritePreparedFrames.
//   - held true: the socket took n bytes (perhaps all, perhaps part of a
//     frame) and the connection keeps its write lock for the caller, who
//     must call FinishPreparedFrames with frames[n:] (from any goroutine)
//     before anything else is written on the connection. That happens when
//     the socket filled up part way, or when a control frame (a pong) was
//     queued meanwhile: writing it could wait.
//   - err non-nil: as WritePreparedFrames's error; the write lock is free.
//
// Only a server connection sends prepared frames. The write deadline does
// not apply (nothing waits); it applies to FinishPreparedFrames.
func (c *Conn) TryWritePreparedFrames(frames []byte) (n int, held bool, err error) {
	if c.role != RoleServer {
		return 0, false, errPreparedClient
	}
	if c.rio == nil || len(frames) == 0 || !c.wmu.TryLock() {
		return 0, false, nil
	}
	if err := c.writable(); err != nil {
		c.wmu.Unlock()
		return 0, false, err
	}
	if len(c.wbuf) > 0 || c.ctrlPending.Load() || c.buffered.Load() || c.flushWanted.Load() {
		c.wmu.Unlock() // frames first: the ordinary path writes them
		return 0, false, nil
	}
	c.pmu.Lock()
	err = c.p.canSendData()
	if err == nil && c.p.outOpen {
		err = errStreamOpen
	}
	if err == nil && c.p.fl != nil && c.p.fl.takeover {
		c.p.fl.resetCompressor() // as in writeFramesLocked
	}
	c.pmu.Unlock()
	if err != nil {
		c.wmu.Unlock()
		return 0, false, err
	}
	n, err = c.rio.tryWrite(frames)
	if err != nil {
		if c.closed.Load() {
			err = ErrClosed
		}
		c.writeErr = err // part of a frame may be out
		c.wmu.Unlock()
		return n, false, err
	}
	if n == 0 {
		c.wmu.Unlock()
		if c.ctrlPending.Load() || c.flushWanted.Load() {
			// Queued while the lock was held: the reader's tryLock failed.
			if c.tryLockWrite() {
				c.unlockWrite()
			}
		}
		return 0, false, nil
	}
	if n < len(frames) || c.ctrlPending.Load() || c.flushWanted.Load() {
		return n, true, nil
	}
	c.wmu.Unlock()
	if c.ctrlPending.Load() || c.flushWanted.Load() {
		// Queued between the check and the unlock: as unlockWrite does.
		if c.tryLockWrite() {
			c.unlockWrite()
		}
	}
	return n, false, nil
}

// FinishPreparedFrames writes rest, what TryWritePreparedFrames left of its
// frames when it reported held, waiting as WritePreparedFrames does (ctx
// and the write deadline apply), then the control frames queued meanwhile,
// and lets the write lock go. rest may be empty.
func (c *Conn) FinishPreparedFrames(ctx context.Context, rest []byte) error {
	c.takeWbuf()
	defer c.unlockWrite()
	stop, err := c.watchWrite(ctx)
	if err != nil {
		c.writeErr = err // the stream may be cut part way through a frame
		return err
	}
	if err := c.writable(); err != nil {
		return stop(err)
	}
	if len(rest) > 0 {
		err = c.rio.finish(rest) // held: TryWritePreparedFrames had rio
		if err != nil {
			if c.closed.Load() {
				err = ErrClosed
			}
			c.writeErr = err
		}
	}
	return stop(err)
}
