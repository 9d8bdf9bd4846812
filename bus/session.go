package bus

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// A frame's path through the bus, file by file:
//
//	session.go  readLoop: one message read from the client's connection
//	relay.go    relay: size, emit permission, carrier rule, filter log line
//	fanout.go   hub.publish: the frame is encoded once and appended to the log
//	follow.go   follower.next: every session's writer wakes and fetches it
//	session.go  writeLoop: the batch is written to the client in one writev

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

// session is one WebSocket connection: a reader goroutine that relays what
// the client sends, and a writer goroutine that follows the log.
type session struct {
	s     *Server
	conn  *ws.Conn
	perms *Permissions // nil: everything allowed
	f     *follower

	// What Sessions reports; fixed at the upgrade.
	id        uint64
	remote    string
	userAgent string
	origin    string
	token     string
	connected time.Time

	framesIn, bytesIn   atomic.Uint64 // counted by the reader
	framesOut, bytesOut atomic.Uint64 // counted by the writer
	written             atomic.Uint64 // sequence number after the last written frame
	writtenBytes        atomic.Int64  // the log's cumulative bytes through it

	done   chan struct{} // closed by finish
	once   sync.Once
	exited chan struct{} // closed when the writer has returned
}

// finish records why the connection ends (reason, the close code sent or
// received, a detail), the first reason winning, and takes the session out
// of the fan-out. It reports whether this call was the first. The caller
// closes the connection.
func (c *session) finish(reason string, code ws.StatusCode, detail string, attrs ...any) bool {
	first := false
	c.once.Do(func() {
		first = true
		close(c.done)
		c.s.hub.leave(c.f)
		c.s.removeSession(c, CloseInfo{Session: c.info(), Closed: time.Now(), Reason: reason, Code: code, Detail: detail})
		c.s.m.closed(reason)
		lvl := slog.LevelDebug
		msg := "Client disconnected"
		switch reason {
		case reasonSlowConsumer:
			lvl, msg = slog.LevelWarn, "Closing slow consumer"
		case reasonOversize, reasonProtocolError, reasonWriteError:
			lvl, msg = slog.LevelInfo, "Closing client"
		}
		c.s.log.Log(context.Background(), lvl, msg, append([]any{"remote", c.remote, "reason", reason}, attrs...)...)
		c.s.noteProgress()
	})
	return first
}

// readLoop relays what the client sends until the connection ends. It runs
// on the HTTP handler's goroutine.
func (c *session) readLoop() {
	var buf []byte
	ctx := context.Background()
	for {
		op, b, err := c.conn.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			c.readFailed(err)
			return
		}
		if cap(b) <= 1<<20 {
			buf = b // reuse; a huge buffer is let go after its message
		} else {
			buf = nil
		}
		if isClosed(c.done) {
			continue // closing: read on until the connection drops
		}
		c.framesIn.Add(1)
		c.bytesIn.Add(uint64(len(b)))
		c.s.relay(c, c.perms, op, b)
	}
}

// readFailed classifies the end of the read side and ends the session.
func (c *session) readFailed(err error) {
	var ce *ws.CloseError
	var pe *ws.ProtocolError
	switch {
	case errors.As(err, &pe):
		// The Conn has sent the close frame with pe.Code and dropped the
		// connection (RFC 6455 §7.1.7).
		if pe.Code == ws.StatusMessageTooBig {
			c.finish(reasonOversize, pe.Code, pe.Reason, "error", pe.Reason)
		} else {
			c.finish(reasonProtocolError, pe.Code, pe.Reason, "code", int(pe.Code), "error", pe.Reason)
		}
	case errors.As(err, &ce):
		if ce.Code == ws.StatusAbnormalClosure {
			c.finish(reasonDisconnect, 0, "")
		} else {
			c.finish(reasonClientClose, ce.Code, ce.Reason, "code", int(ce.Code), "close_reason", ce.Reason)
		}
	default:
		c.finish(reasonDisconnect, 0, err.Error(), "error", err.Error())
	}
	c.conn.CloseNow()
}

// writeLoop follows the log from the session's cursor and writes what it
// finds in batches, each with its own deadline, until the session is done.
func (c *session) writeLoop() {
	defer close(c.exited)
	s := c.s
	batch := make([]*entry, 0, 64)
	pms := make([]*ws.PreparedMessage, 0, 64)
	var deadline time.Time // the write deadline last set
	for {
		var err error
		batch, err = c.f.next(context.Background(), c.done, nil, batch[:0], maxBatchFrames, maxBatchBytes)
		if err != nil {
			if err == ErrLagged {
				c.slowConsumer("queue limit")
			}
			return
		}
		cursor, sentBytes := c.f.cursor.Load(), c.f.fetched.Load()
		var size int64
		for _, e := range batch {
			if e.to != 0 {
				if e.to != c.id {
					continue // another client's notice
				}
			} else if c.perms != nil && c.perms.Receive != nil && !c.perms.CanReceive(e.mtype) {
				continue
			}
			pms = append(pms, e.pm)
			size += e.size
		}
		born := batch[0].born
		clear(batch)
		if len(pms) == 0 {
			c.wrote(cursor, sentBytes)
			continue
		}
		// Each batch gets its WriteTimeout, give or take deadlineSlack: the
		// deadline is moved only when that gains more than the slack, so
		// a burst of small batches does not reset a timer each time.
		wt := s.live.Load().opts.WriteTimeout
		if want := time.Now().Add(wt); want.Sub(deadline) > min(wt/16, deadlineSlack) || deadline.After(want) {
			c.conn.SetWriteDeadline(want)
			deadline = want
		}
		err = c.conn.WritePreparedBatch(pms)
		n := len(pms)
		clear(pms)
		pms = pms[:0]
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.slowConsumer("write timeout")
				return
			}
			if c.finish(reasonWriteError, 0, err.Error(), "error", err.Error()) {
				c.conn.CloseNow()
			}
			return
		}
		c.wrote(cursor, sentBytes)
		c.framesOut.Add(uint64(n))
		c.bytesOut.Add(uint64(size))
		s.m.sent(n, size, s.hub.now()-born)
	}
}

// wrote records that the log is written up to sequence number cursor.
func (c *session) wrote(cursor uint64, cumBytes int64) {
	c.writtenBytes.Store(cumBytes)
	c.written.Store(cursor)
	c.s.noteProgress()
}

// slowConsumer closes a session that fell too far behind: with 1008 "slow
// consumer" when the stream is intact (a failed write may have left half a
// frame), then the TCP connection is dropped. Nobody else is affected. It
// runs on the writer goroutine: ws.Conn.Close may run concurrently with the
// reader, which reads on until the connection drops.
func (c *session) slowConsumer(why string) {
	lagMsgs, lagBytes := c.f.lag()
	code := ws.StatusPolicyViolation
	if why == "write timeout" {
		code = 0
	}
	if !c.finish(reasonSlowConsumer, code, why, "cause", why, "lag_messages", lagMsgs, "lag_bytes", lagBytes) {
		return
	}
	if code == 0 {
		c.conn.CloseNow()
		return
	}
	c.conn.Close(code, "slow consumer")
}

// SessionInfo describes one connected client.
type SessionInfo struct {
	ID                  uint64
	Remote              string // remote address
	UserAgent, Origin   string // request headers
	Token               string // the token's name (Permissions.Name), never the secret; "" without auth
	Connected           time.Time
	FramesIn, BytesIn   uint64
	FramesOut, BytesOut uint64
	QueuedMessages      int   // how far behind the log it is now
	QueuedBytes         int64 // the frame bytes of those messages
}

func (c *session) info() SessionInfo {
	h := c.s.hub
	return SessionInfo{
		ID:             c.id,
		Remote:         c.remote,
		UserAgent:      c.userAgent,
		Origin:         c.origin,
		Token:          c.token,
		Connected:      c.connected,
		FramesIn:       c.framesIn.Load(),
		BytesIn:        c.bytesIn.Load(),
		FramesOut:      c.framesOut.Load(),
		BytesOut:       c.bytesOut.Load(),
		QueuedMessages: int(max(0, int64(h.head.Load()-c.written.Load()))),
		QueuedBytes:    max(0, h.bytes.Load()-c.writtenBytes.Load()),
	}
}

// Sessions returns the connected clients, oldest first.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	list := make([]*session, 0, len(s.sessions))
	for c := range s.sessions {
		list = append(list, c)
	}
	s.mu.Unlock()
	out := make([]SessionInfo, len(list))
	for i, c := range list {
		out[i] = c.info()
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// CloseInfo records one closed connection: the last 100 are kept, newest first.
type CloseInfo struct {
	Session SessionInfo
	Closed  time.Time
	Reason  string        // the closes-metric label: slow_consumer, oversize, protocol_error, client_close, disconnect, write_error, shutdown
	Code    ws.StatusCode // the close code sent or received, 0 when none
	Detail  string
}

// recentCloses is how many CloseInfo RecentCloses keeps.
const recentCloses = 100

// RecentCloses returns the last closed connections (up to 100), newest first.
func (s *Server) RecentCloses() []CloseInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.closes)
	out := make([]CloseInfo, n)
	for i := range n {
		k := s.closesNext - 1 - i
		if k < 0 {
			k += n
		}
		out[i] = s.closes[k]
	}
	return out
}
