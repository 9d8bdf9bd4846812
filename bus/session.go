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
	// windowBits is the server window of a deflate client (its compressed
	// copies are counted in the log's bytes), or -1 without deflate.
	windowBits int

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
		case reasonOversize, reasonProtocolError, reasonOverloaded, reasonWriteError:
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
	ctx := context.Background()
	for {
		// b is the Conn's until the next read: relay copies what it keeps
		// (the log owns its copy, under its own bounds), and the Conn keeps
		// only a small buffer and nothing of max_inflight_bytes after it.
		op, b, err := c.conn.NextMessage(ctx)
		if err != nil {
			c.readFailed(err)
			return
		}
		if isClosed(c.done) {
			continue // closing: read on until the connection drops
		}
		c.framesIn.Add(1)
		c.bytesIn.Add(uint64(len(b)))
		c.s.relay(c, c.perms, op, b)
		c.s.hub.pace(len(b))
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
		switch pe.Code {
		case ws.StatusMessageTooBig:
			c.finish(reasonOversize, pe.Code, pe.Reason, "error", pe.Reason)
		case ws.StatusTryAgainLater:
			// The in-flight budget (max_inflight_bytes) is taken: the bus
			// is overloaded, the client did nothing wrong.
			c.finish(reasonOverloaded, pe.Code, pe.Reason, "error", pe.Reason)
		default:
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
	var wb writeBatch
	var deadline time.Time // the write deadline last set
	for {
		err := c.takeBatch(&wb)
		if err != nil {
			if err == ErrLagged {
				c.slowConsumer(c.cutWhy(""), true)
			}
			return
		}
		if wb.n == 0 {
			c.wrote(wb.cursor, wb.fetched)
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
		if c.f.cut.Load() {
			// Cut while fetching: the onCut's deadline may have been
			// overwritten just now.
			c.slowConsumer(c.cutWhy(""), true)
			return
		}
		err = wb.write(c.conn)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Part of a frame may be out: no close frame can follow.
				if c.f.cut.Load() {
					c.slowConsumer(c.cutWhy(", write blocked"), false)
				} else {
					c.slowConsumer("write timeout", false)
				}
				return
			}
			if c.finish(reasonWriteError, 0, err.Error(), "error", err.Error()) {
				c.conn.CloseNow()
			}
			return
		}
		c.wrote(wb.cursor, wb.fetched)
		c.framesOut.Add(uint64(wb.n))
		c.bytesOut.Add(uint64(wb.size))
		s.m.sent(wb.n, wb.size, s.hub.now()-wb.born)
	}
}

// cutWhy is the detail of a cut by the queue bounds (hub.cutBehind) or for
// a stall (hub.pressured), plus more.
func (c *session) cutWhy(more string) string {
	if c.f.stalled.Load() {
		return "stalled: nothing taken for a tenth of write_timeout while half the queue bound behind" + more
	}
	return "queue limit" + more
}

// wrote records that the log is written up to sequence number cursor.
func (c *session) wrote(cursor uint64, cumBytes int64) {
	c.writtenBytes.Store(cumBytes)
	c.written.Store(cursor)
	c.s.noteProgress()
}

// slowConsumer closes a session that fell too far behind (docs/protocol.md
// §3). When the stream is intact (no write failed part way), it sends 1008
// "slow consumer", written within closeTimeout, before the TCP connection is
// closed; otherwise (a write timed out or was interrupted part way through a
// frame) it drops the connection without a close frame. Either way the close
// is counted as slow_consumer with why as its detail. Nobody else is
// affected. It runs on the writer goroutine: ws.Conn.Close may run
// concurrently with the reader, which reads on until the connection drops.
func (c *session) slowConsumer(why string, intact bool) {
	lagMsgs, lagBytes := c.f.lag()
	code := ws.StatusPolicyViolation
	if !intact {
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
	Reason  string        // the closes-metric label: slow_consumer, oversize, protocol_error, overloaded (1013: max_inflight_bytes), client_close, disconnect, write_error, shutdown
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
