package ws

import "context"

// tryWritePreparedFrames is WritePreparedFrames that never waits
// (nonblock.TryWrite, which documents the results): n bytes taken by the
// socket; held, the write lock kept for finishPreparedFrames with
// frames[n:]; n == 0 and not held, nothing written and nothing changed.
func (c *Conn) tryWritePreparedFrames(frames []byte) (n int, held bool, err error) {
	if c.p.role != RoleServer {
		return 0, false, errPreparedClient
	}
	if !c.raw || len(frames) == 0 || !c.wmu.TryLock() {
		return 0, false, nil
	}
	if err := c.writable(); err != nil {
		c.wmu.Unlock()
		return 0, false, err
	}
	if len(c.wbuf) > 0 || c.flags.has(flagCtrlPending) || c.flags.has(flagBuffered) || c.flags.has(flagFlushWanted) {
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
	n, err = c.rio.tryWrite(c.nc, frames)
	if err != nil {
		if c.flags.has(flagClosed) {
			err = ErrClosed
		}
		c.extra().writeErr = err // part of a frame may be out
		c.wmu.Unlock()
		return n, false, err
	}
	if n == 0 {
		c.wmu.Unlock()
		if c.flags.has(flagCtrlPending) || c.flags.has(flagFlushWanted) {
			// Queued while the lock was held: the reader's tryLock failed.
			if c.tryLockWrite() {
				c.unlockWrite()
			}
		}
		return 0, false, nil
	}
	if n < len(frames) || c.flags.has(flagCtrlPending) || c.flags.has(flagFlushWanted) {
		return n, true, nil
	}
	c.wmu.Unlock()
	if c.flags.has(flagCtrlPending) || c.flags.has(flagFlushWanted) {
		// Queued between the check and the unlock: as unlockWrite does.
		if c.tryLockWrite() {
			c.unlockWrite()
		}
	}
	return n, false, nil
}

// finishPreparedFrames writes rest, what tryWritePreparedFrames left of its
// frames when it reported held, waiting as WritePreparedFrames does, then
// the control frames queued meanwhile, and lets the write lock go
// (nonblock.Write.Finish). rest may be empty.
func (c *Conn) finishPreparedFrames(ctx context.Context, rest []byte) error {
	c.takeWbuf()
	defer c.unlockWrite()
	stop, err := c.watchWrite(ctx)
	if err != nil {
		c.extra().writeErr = err // the stream may be cut part way through a frame
		return err
	}
	if err := c.writable(); err != nil {
		return stop(err)
	}
	if len(rest) > 0 {
		err = c.rio.finish(c.nc, rest) // held: tryWritePreparedFrames had rio
		if err != nil {
			if c.flags.has(flagClosed) {
				err = ErrClosed
			}
			c.extra().writeErr = err
		}
	}
	return stop(err)
}
