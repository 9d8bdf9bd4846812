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
	"unique"

	"github.com/ovbus/ovbus/bus/internal/netpoll"
	"github.com/ovbus/ovbus/bus/internal/workers"
	"github.com/ovbus/ovbus/ws"
	"github.com/ovbus/ovbus/ws/nonblock"
)

// A frame's path through the bus, file by file:
//
//	poll.go     readReady (poll path), or readLoop here: one message read from the client's connection
//	relay.go    relay: size, emit permission, carrier rule, filter log line
//	fanout.go   hub.publish: the frame is encoded once and appended to the log
//	follow.go   follower.tryBatch: every session's writer is woken (the waker) and fetches it
//	session.go  writeTask: the batch is written to the client in one write (batch.go)
//
// Who runs what. A session owns no goroutine while it is idle:
//
//   - the writer runs only while the log holds frames the client has not
//     been sent. While the socket takes each batch at once, the hub's waker
//     writes for every session a publish woke (wake, writeInline);
//     otherwise, and for clients with a receive rule or deflate, a
//     goroutine (writeTask, started by wakeWriter) writes until it has
//     caught up, sleeps in the hub and returns. Batch buffers come from
//     writeBatches.
//   - these goroutines, the waker and the poll path's readers are tasks of
//     the bus/internal/workers pool, which keeps a few goroutines (and
//     their grown stacks) for the next task.
//   - the reader, on Linux over plain TCP (the poll path, poll.go and
//     bus/internal/netpoll), runs only while the socket has bytes: the
//     poller starts readReady when it is readable, which relays what is
//     there (nonblock.NextMessage, buffers from ws's pools) and arms the
//     poller again. Elsewhere (TLS, other systems, pollDisabled) the reader
//     is a goroutine per session (readLoop) blocked in ws.Conn.NextMessage.
//
// Each side ends once (sideDone): s.wg counts both, and the connection
// leaves max_connections when both have ended.

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

// session is one WebSocket connection: a reader that relays what the client
// sends, and a writer that follows the log (see "Who runs what" above).
//
// An idle session is one allocation: its follower is a field, whose owner
// is the session itself (no closures), and its end is the follower's
// stopped flag (no channel). It fits the 288-byte size class
// (TestSessionSize).
type session struct {
	s     *Server
	conn  *ws.Conn
	acc   *grant   // what the client was let in as (access.go); its perms apply (permissions)
	limit *bucket  // the message-rate limit, read by the reader only; nil: none
	f     follower // its owner is the session (followerOwner)

	// What Sessions reports; fixed at the upgrade.
	id        uint64
	remote    string
	says      unique.Handle[clientSays]
	connected int64 // Unix nanoseconds (a time.Time is 16 bytes more)

	framesIn, bytesIn   atomic.Uint64 // counted by the reader
	framesOut, bytesOut atomic.Uint64 // counted by the writer
	written             atomic.Uint64 // sequence number after the last written frame
	writtenBytes        atomic.Int64  // the log's cumulative bytes through it

	once  sync.Once    // finish; the end is c.f.stopped, set first
	sides atomic.Int32 // the reader and the writer, until each has ended (sideDone)

	// The writer: wpend counts the wakes since the running writer started
	// (0: none runs; only the wake that makes it 1 starts one), wended is
	// set by the writer that saw the session end. wdeadline is the write
	// deadline last set; only the running writer touches it. sidx is the
	// session's place in Server.sessions while it is there, else -1 (under
	// Server.mu). The small fields are packed together.
	wpend  atomic.Int32
	wended atomic.Bool
	// ownDeflate: the client's deflate frames are compressed for it alone,
	// against its context (Options.CompressionContext): nothing of its
	// compression is shared, or counted in the log's bytes.
	ownDeflate bool
	// windowBits is the server window of a deflate client (its compressed
	// copies are counted in the log's bytes: 8 to 15), or -1 without
	// deflate.
	windowBits int8
	// armedAt is when the reader last armed the socket on the poll path,
	// in the hub's stream ticks (linger.go); only the reader touches it.
	armedAt   uint16
	sidx      int32
	wdeadline int64 // Unix nanoseconds; 0: none set
	// reg is the socket's registration with the poller on the poll path
	// (poll), made before the session is shared; zero on the portable path.
	reg netpoll.Registration
}

// sideDone ends the reader or the writer side.
func (c *session) sideDone() {
	if c.sides.Add(-1) == 0 {
		c.s.conns.Add(-1) // max_connections
	}
	c.s.wg.Done()
}

// finish records why the connection ends (reason, the close code sent or
// received, a detail), the first reason winning, and takes the session out
// of the fan-out. It reports whether this call was the first. The caller
// closes the connection.
func (c *session) finish(reason string, code ws.StatusCode, detail string, attrs ...any) bool {
	first := false
	c.once.Do(func() {
		first = true
		c.f.stopped.Store(true)
		c.s.hub.leave(&c.f)
		c.wakeWriter()       // a writer asleep in the hub ends the writer side
		c.s.m.closed(reason) // counted before it is listed: a reader of RecentCloses finds it in the metrics
		c.s.removeSession(c, CloseInfo{Session: c.info(), Closed: time.Now(), Reason: reason, Code: code, Detail: detail})
		ctx, lvl, msg := context.Background(), slog.LevelDebug, "Client disconnected"
		if reason == reasonSlowConsumer {
			lvl, msg = slog.LevelWarn, "Closing slow consumer"
		} else if lc, ok := closeLines[reason]; ok {
			ctx, lvl, msg = lc, slog.LevelInfo, "Closing client"
		}
		c.s.log.Log(ctx, lvl, msg, append([]any{"remote", c.remote, "reason", reason}, attrs...)...)
		c.s.noteProgress()
	})
	return first
}

// closeLines are the contexts of the INFO lines of the closes a client
// causes, by reason: each reason is rate-limited like a warning (a storm of
// hostile clients writes a few lines per window and a summary), and
// counted whole in ovbus_closes_total.
var closeLines = func() map[string]context.Context {
	m := map[string]context.Context{}
	for _, r := range []string{reasonOversize, reasonProtocolError, reasonOverloaded, reasonWriteError, reasonRateLimited} {
		m[r] = limitedAs("close "+r, "more closes", slog.String("reason", r))
	}
	return m
}()

// readLoop relays what the client sends until the connection ends: the
// reader of the portable path, a goroutine of its own.
func (c *session) readLoop() {
	defer c.sideDone()
	ctx := context.Background()
	for {
		op, b, err := c.conn.NextMessage(ctx)
		if err != nil {
			c.readFailed(err)
			return
		}
		c.received(op, b)
	}
}

// received counts and relays one message from the client. b is the Conn's
// until the next read: relay copies what it keeps (the log owns its copy,
// under its own bounds), and the Conn keeps no buffer and nothing of
// max_inflight_bytes after it.
func (c *session) received(op ws.Opcode, b []byte) {
	if c.f.stopped.Load() {
		return // closing: read on until the connection drops
	}
	c.framesIn.Add(1)
	c.bytesIn.Add(uint64(len(b)))
	if c.limit != nil && !c.limit.take(c.s.hub.now()) {
		c.rateLimited()
		return
	}
	c.s.relay(c, c.permissions(), op, b)
	c.s.hub.pace(len(b))
}

// onCut is the follower's (followerOwner): cut while its writer is blocked
// on a client that reads nothing, the write gets cutGrace more, not all of
// write_timeout; if it completes, the client still gets its 1008 close
// frame.
func (c *session) onCut() {
	c.conn.SetWriteDeadline(time.Now().Add(c.s.live.Load().opts.cutGrace()))
}

// holds is the follower's (followerOwner): the writer reads no frame
// before the one after the last batch it wrote (written, stored once the
// batch is out; the next batch is fetched from there), and none once the
// writer side has ended (set after its last write, and no writer fetches
// after it: the session is done).
func (c *session) holds() uint64 {
	if c.wended.Load() {
		return released
	}
	return c.written.Load()
}

// closeNow drops the connection; closeConn closes it with code (the
// closing handshake). Every goroutine but the reader closes through them: on
// the poll path a reader waiting in the poller would never hear of the close
// (a closed socket leaves epoll silently), so they end it here instead.
func (c *session) closeNow() {
	c.conn.CloseNow()
	c.readerClosed()
}

func (c *session) closeConn(code ws.StatusCode, reason string) {
	c.conn.Close(code, reason)
	c.readerClosed()
}

func (c *session) readerClosed() {
	if c.reg.Closed() {
		c.readEnd()
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

// wakeWriter makes sure a writer runs for c: finish calls it, and the hub
// (the follower's owner: wake) when c's follower sleeps and a frame is
// published. A late wake starts a writer that finds nothing to do. Writers
// run one at a time: only the wake that finds none running starts one.
func (c *session) wakeWriter() {
	if c.wpend.Add(1) == 1 {
		workers.Start((*writerTask)(c))
	}
}

// wake is c's follower's (followerOwner, wakeHow), called outside the hub's
// lock: by the publisher itself (wakeStart: it starts a writer goroutine,
// so that the publisher's reader goes on reading), or by the hub's waker,
// which wakes every sleeper at once (wakeInline): when c takes every frame
// as it is and no writer runs, the waker becomes c's writer for one batch
// per round (wakeAgain, writeInline, with system calls that never wait)
// until c has caught up or is handed to a writer goroutine (wakeHandOff).
// So a publish that wakes many sessions starts one goroutine, not one per
// session, and a client that reads nothing never holds up the waker.
func (c *session) wake(how wakeHow) bool {
	switch how {
	case wakeAgain:
		return c.writeInline()
	case wakeHandOff:
		workers.Start((*writerTask)(c))
		return false
	case wakeInline:
		if c.runs() && nonblock.Supported(c.conn) {
			if c.wpend.Add(1) != 1 {
				return false // a writer runs: it sees the wake
			}
			return c.writeInline()
		}
	}
	c.wakeWriter()
	return false
}

// writeInline is one batch of c's writer on the waker (wpend is c's, see
// wake): it takes what the log holds for c, writes it without waiting, and
// reports that it did. Taking when there is nothing puts c's follower to
// sleep in the hub; so does a batch that leaves c at the head of the log,
// after one more take at once, while c's state is in the cache, rather
// than in the waker's next round. Anything else (a socket that does not
// take it all, a cut, the end) goes to a writer goroutine (writeTask) with
// what is left. The log's order is kept: nothing else writes to c
// meanwhile (wpend), and a write cut part way holds the Conn's write lock
// until the rest is out (nonblock.TryWrite).
func (c *session) writeInline() (again bool) {
	wb := writeBatches.Get().(*writeBatch)
	for taken := 0; ; taken++ {
		asleep, err := c.takeBatch(wb)
		switch {
		case err != nil:
			// The writer goroutine meets the same end (lagged and done
			// are for good) where it may wait (closing).
			wb.reset()
			writeBatches.Put(wb)
			workers.Start((*writerTask)(c))
			return false
		case asleep:
			wb.reset()
			writeBatches.Put(wb)
			if !c.wpend.CompareAndSwap(1, 0) {
				workers.Start((*writerTask)(c)) // woken again meanwhile
			}
			return false
		}
		rn := wb.b.rn
		if rn.n == 0 || c.f.cut.Load() {
			go c.writeTask(wb, nonblock.Write{}) // not a run, or cut: written there
			return false
		}
		w, err := nonblock.TryWrite(c.conn, rn.frames)
		switch {
		case err != nil:
			wb.reset()
			writeBatches.Put(wb)
			c.writeFailed(err)
			c.writerEnded()
			return false
		case w.Pending():
			go c.writeTask(wb, w)
			return false
		case w.N() < len(rn.frames): // the socket is full: nothing was written
			go c.writeTask(wb, nonblock.Write{})
			return false
		}
		wb.b.rn = run{}
		c.sent(wb)
		wb.reset()
		// More is in the log already (or this was the second batch): the
		// next one is for the waker's next round, after the others.
		if taken > 0 || c.f.cursor.Load() != c.s.hub.head.Load() {
			writeBatches.Put(wb)
			return true
		}
	}
}

// writeTask writes what the log holds for c until it has caught up, then
// sleeps in the hub and returns: an idle session has no writer goroutine
// and no batch buffers. When it finds the session done, it ends the writer
// side. carry, when not nil, is a batch writeInline took and did not write
// (or, pending, of which the rest is left: the Conn's write lock is this
// writer's, see nonblock.TryWrite); it goes first.
func (c *session) writeTask(carry *writeBatch, pending nonblock.Write) {
	wb := carry
	if wb == nil {
		wb = writeBatches.Get().(*writeBatch)
	}
	defer func() {
		wb.reset()
		writeBatches.Put(wb)
	}()
	if carry != nil && !c.writeRest(wb, pending) {
		c.writerEnded()
		return
	}
	for {
		if !c.drain(wb) {
			c.writerEnded()
			return
		}
		// Asleep in the hub: the next publish starts a writer, unless some
		// wake came while this one ran; then look once more.
		if c.wpend.CompareAndSwap(1, 0) {
			return
		}
		c.wpend.Store(1)
	}
}

// writerEnded ends the writer side, once. From then on holds reports
// released, so the hub forgets c's follower if it had kept it for the
// writer (hub.forget: set first, then forget under the hub's lock, so a
// follower the hub takes out of the log meanwhile is either not kept or
// forgotten here).
func (c *session) writerEnded() {
	if c.wended.CompareAndSwap(false, true) {
		c.s.hub.forget(&c.f)
		c.sideDone()
	}
}

// drain writes batches until the log holds nothing more for c and c's
// follower sleeps in the hub (true), or until the session is done (false).
func (c *session) drain(wb *writeBatch) bool {
	for {
		asleep, err := c.takeBatch(wb)
		if err != nil {
			if err == ErrLagged {
				c.slowConsumer(c.cutWhy(""), true)
			}
			return false
		}
		if asleep {
			return true
		}
		if !c.write(wb) {
			return false
		}
	}
}

// write writes one batch of the log to the client (writeBatch.write: a run
// as one slice, frames in one writev), with its own deadline, and reports
// whether the session goes on.
func (c *session) write(wb *writeBatch) bool {
	return c.writeRest(wb, nonblock.Write{})
}

// writeRest is write, or, when pending, the end of a batch writeInline
// began: what is left of its run.
func (c *session) writeRest(wb *writeBatch, pending nonblock.Write) bool {
	s := c.s
	if wb.n == 0 {
		c.wrote(wb.cursor, wb.fetched)
		return true
	}
	// Each batch gets its WriteTimeout, give or take deadlineSlack: the
	// deadline is moved only when that gains more than the slack, so
	// a burst of small batches does not reset a timer each time.
	wt := s.live.Load().opts.WriteTimeout
	if want := time.Now().Add(wt); time.Duration(want.UnixNano()-c.wdeadline) > min(wt/16, deadlineSlack) || c.wdeadline > want.UnixNano() {
		c.conn.SetWriteDeadline(want)
		c.wdeadline = want.UnixNano()
	}
	var err error
	switch {
	case pending.Pending():
		// Part of a frame may be out: it is finished even when cut,
		// so that the close frame can follow.
		err = pending.Finish(context.Background())
		wb.b.rn = run{}
	case c.f.cut.Load():
		// Cut while fetching: onCut's deadline may have been
		// overwritten just now.
		c.slowConsumer(c.cutWhy(""), true)
		return false
	case wb.b.rn.n > 0 && nonblock.Supported(c.conn):
		err = c.writeRun(wb.b.rn.frames)
		wb.b.rn = run{}
	default:
		err = wb.write(c.conn)
	}
	if err != nil {
		c.writeFailed(err)
		return false
	}
	c.sent(wb)
	return true
}

// writeRun writes a run on a plain socket with the raw calls of
// ws.Conn.TryWritePreparedFrames and FinishPreparedFrames, which wait in
// the runtime's poller when the socket is full but never hand the thread's
// P on as an ordinary system call would: when many writers wait, that
// hand-off costs a thread switch each way per write. Whatever the try
// cannot do goes the ordinary way (WritePreparedFrames).
func (c *session) writeRun(frames []byte) error {
	w, err := nonblock.TryWrite(c.conn, frames)
	switch {
	case err != nil:
		return err
	case w.Pending():
		return w.Finish(context.Background())
	case w.N() == len(frames):
		return nil
	}
	return c.conn.WritePreparedFrames(context.Background(), frames)
}

// writeFailed ends the session after a failed write.
func (c *session) writeFailed(err error) {
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
		c.closeNow()
	}
}

// sent records a batch written.
func (c *session) sent(wb *writeBatch) {
	c.wrote(wb.cursor, wb.fetched)
	c.framesOut.Add(uint64(wb.n))
	c.bytesOut.Add(uint64(wb.size))
	c.s.m.sent(wb.n, wb.size, c.s.hub.now()-wb.born)
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
// §3): with the stream intact it sends 1008 "slow consumer", written within
// closeTimeout, before closing the TCP connection; after a write failed
// part way through a frame it drops the connection without a close frame.
// Either way the close counts as slow_consumer with why as its detail, and
// nobody else is affected. It runs on the writer: ws.Conn.Close may run
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
		c.closeNow()
		return
	}
	c.closeConn(code, "slow consumer")
}

// SessionInfo describes one connected client.
type SessionInfo struct {
	ID                uint64
	Remote            string // remote address
	UserAgent, Origin string // request headers
	Token             string // the token's name (Permissions.Name), never the secret; "" without a token
	// Identity names the rule the client was let in by: "token:NAME"
	// ("token" for a token without a name), "network:CIDR", "loopback",
	// "unix" or "anyone". Never a token.
	Identity            string
	Connected           time.Time
	FramesIn, BytesIn   uint64
	FramesOut, BytesOut uint64
	QueuedMessages      int   // how far behind the log it is now
	QueuedBytes         int64 // the frame bytes of those messages
}

// clientSays is what a client says of itself in its upgrade request. Clients
// of one kind say the same, so each session holds a handle to the one copy
// (unique.Make) instead of two strings of its own.
type clientSays struct {
	userAgent, origin string
}

// permissions returns what the client may send and receive; nil: everything.
func (c *session) permissions() *Permissions {
	if c.acc == nil {
		return nil
	}
	return c.acc.perms
}

func (c *session) info() SessionInfo {
	h := c.s.hub
	var token, identity string
	if c.acc != nil {
		token, identity = c.acc.name, c.acc.identity
	}
	says := c.says.Value()
	return SessionInfo{
		ID:             c.id,
		Remote:         c.remote,
		UserAgent:      says.userAgent,
		Origin:         says.origin,
		Token:          token,
		Identity:       identity,
		Connected:      time.Unix(0, c.connected),
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
	list := slices.Clone(s.sessions)
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
	Reason  string        // the closes-metric label: slow_consumer, oversize, protocol_error, overloaded (1013: max_inflight_bytes), rate_limited, client_close, disconnect, write_error, shutdown
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
