package bus

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// Writer batch limits: one WritePreparedBatch (one writev) carries at most
// this many frames (Linux's IOV_MAX) and stops adding frames once this many
// bytes are in it.
const (
	maxBatchFrames = 1024
	maxBatchBytes  = 1 << 20
)

// closeTimeout bounds the closing handshake the bus starts (slow consumer,
// 1001 on shutdown): the close frame's write and the wait for the echo.
const closeTimeout = 2 * time.Second

// deadlineSlack is how much of WriteTimeout (at most a sixteenth of it) a
// batch may lose because the writer did not move the deadline for it.
const deadlineSlack = 50 * time.Millisecond

// client is one WebSocket connection: a reader goroutine that publishes what
// the client sends, and a writer goroutine that follows the log.
type client struct {
	s     *Server
	conn  *ws.Conn
	addr  string
	perms *Permissions // nil: everything allowed
	f     *follower

	joinBytes int64 // the log's cumulative bytes when the client joined

	written atomic.Uint64 // sequence number after the last written frame
	done    chan struct{} // closed by finish
	once    sync.Once
	reason  string // why the connection ended (set in finish)
	exited  chan struct{}

	// A close frame the reader goroutine is asked to send (see
	// closeWithFrame): the closing handshake reads, so only the reader may
	// run it.
	closeMu     sync.Mutex
	wantClose   bool
	closeCode   ws.StatusCode
	closeReason string
}

// closeWithFrame has the reader goroutine close the connection with a close
// frame (code, reason), wait a little for the peer's answer and drop the
// connection. It kicks the reader out of a blocked read with a past
// deadline.
func (c *client) closeWithFrame(code ws.StatusCode, reason string) {
	c.closeMu.Lock()
	c.wantClose, c.closeCode, c.closeReason = true, code, reason
	c.closeMu.Unlock()
	c.conn.SetReadDeadline(time.Unix(1, 0))
}

// pendingClose runs the close asked for by closeWithFrame, if any.
func (c *client) pendingClose() bool {
	c.closeMu.Lock()
	want, code, reason := c.wantClose, c.closeCode, c.closeReason
	c.closeMu.Unlock()
	if !want {
		return false
	}
	c.conn.SetReadDeadline(time.Time{})
	c.conn.Close(code, reason)
	return true
}

func (c *client) isDone() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// finish records why the connection ends, the first reason winning, and
// takes the client out of the fan-out. It reports whether this call was the
// first. The caller closes the connection.
func (c *client) finish(reason string, attrs ...any) bool {
	first := false
	c.once.Do(func() {
		first = true
		c.reason = reason
		close(c.done)
		c.s.hub.leave(c.f)
		c.s.removeClient(c)
		c.s.m.closed(reason)
		lvl := slog.LevelDebug
		msg := "Client disconnected"
		switch reason {
		case reasonSlowConsumer:
			lvl, msg = slog.LevelWarn, "Closing slow consumer"
		case reasonOversize, reasonProtocolError, reasonWriteError:
			lvl, msg = slog.LevelInfo, "Closing client"
		}
		c.s.log.Log(context.Background(), lvl, msg, append([]any{"remote", c.addr, "reason", reason}, attrs...)...)
	})
	return first
}

// readLoop relays what the client sends until the connection ends. It runs
// on the HTTP handler's goroutine.
func (c *client) readLoop() {
	ctx := context.Background()
	for {
		// b is the Conn's until the next read: relay copies what it keeps
		// (the log owns its copy, under its own bounds), and the Conn keeps
		// only a small buffer and nothing of max_inflight_bytes after it.
		op, b, err := c.conn.NextMessage(ctx)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && c.pendingClose() {
				return
			}
			c.readFailed(err)
			return
		}
		if c.isDone() {
			if c.pendingClose() {
				return
			}
			continue // closing: read on until the connection drops
		}
		c.s.relay(c, op, b)
	}
}

// readFailed classifies the end of the read side and ends the client.
func (c *client) readFailed(err error) {
	var ce *ws.CloseError
	var pe *ws.ProtocolError
	switch {
	case errors.As(err, &pe):
		// The Conn has sent the close frame with pe.Code and dropped the
		// connection (RFC 6455 §7.1.7).
		if pe.Code == ws.StatusMessageTooBig {
			c.finish(reasonOversize, "error", pe.Reason)
		} else {
			c.finish(reasonProtocolError, "code", int(pe.Code), "error", pe.Reason)
		}
	case errors.As(err, &ce):
		if ce.Code == ws.StatusAbnormalClosure {
			c.finish(reasonDisconnect)
		} else {
			c.finish(reasonClientClose, "code", int(ce.Code), "close_reason", ce.Reason)
		}
	default:
		c.finish(reasonDisconnect, "error", err.Error())
	}
	c.conn.CloseNow()
}

// writeLoop follows the log from the client's cursor and writes what it
// finds in batches, each with its own deadline, until the client is done.
func (c *client) writeLoop() {
	defer close(c.exited)
	s := c.s
	h := s.hub
	batch := make([]*entry, 0, 64)
	pms := make([]*ws.PreparedMessage, 0, 64)
	cursor := c.f.cursor.Load()
	sentBytes := c.joinBytes // cumulative log bytes through the last fetched entry
	var deadline time.Time   // the write deadline last set
	for {
		if c.isDone() {
			return
		}
		var lagged bool
		batch, lagged = h.fetch(cursor, batch[:0], maxBatchFrames, maxBatchBytes)
		if lagged {
			c.slowConsumer(h, cursor, sentBytes, "queue limit")
			return
		}
		if len(batch) == 0 {
			if h.sleep(c.f, cursor) {
				select {
				case <-c.f.wake:
				case <-c.done:
					return
				}
			}
			continue
		}
		cursor += uint64(len(batch))
		c.f.cursor.Store(cursor)
		sentBytes = batch[len(batch)-1].end

		live := s.live.Load()
		var size int64
		for _, e := range batch {
			if c.perms != nil && c.perms.Receive != nil && !c.perms.CanReceive(e.mtype) {
				continue
			}
			pms = append(pms, e.pm)
			size += e.size
		}
		born := batch[0].born
		clear(batch)
		if len(pms) == 0 {
			c.written.Store(cursor)
			continue
		}
		// Each batch gets its WriteTimeout, give or take deadlineSlack: the
		// deadline is moved only when that gains more than the slack, so
		// a burst of small batches does not reset a timer each time.
		wt := live.opts.WriteTimeout
		if want := time.Now().Add(wt); want.Sub(deadline) > min(wt/16, deadlineSlack) || deadline.After(want) {
			c.conn.SetWriteDeadline(want)
			deadline = want
		}
		err := c.conn.WritePreparedBatch(context.Background(), pms)
		n := len(pms)
		clear(pms)
		pms = pms[:0]
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.slowConsumer(h, cursor, sentBytes, "write timeout")
				return
			}
			if c.finish(reasonWriteError, "error", err.Error()) {
				c.conn.CloseNow()
			}
			return
		}
		c.written.Store(cursor)
		s.m.sent(n, size, h.now()-born)
	}
}

// slowConsumer closes a client that fell too far behind: with 1008 "slow
// consumer" when the stream is intact (a failed write may have left half a
// frame), then the TCP connection is dropped. Nobody else is affected.
func (c *client) slowConsumer(h *hub, cursor uint64, sentBytes int64, why string) {
	lagMsgs := h.head.Load() - cursor
	lagBytes := h.bytes.Load() - sentBytes
	if !c.finish(reasonSlowConsumer, "cause", why, "lag_messages", lagMsgs, "lag_bytes", lagBytes) {
		return
	}
	if why == "write timeout" {
		c.conn.CloseNow()
		return
	}
	c.closeWithFrame(ws.StatusPolicyViolation, "slow consumer")
}
