package bus

import (
	"errors"
	"net/http"

	"github.com/ovbus/ovbus/bus/internal/netpoll"
	"github.com/ovbus/ovbus/ws/nonblock"
)

// The poll path: on Linux over plain TCP a session's socket leaves Go's
// runtime poller at the upgrade (handOverWriter) and is registered with
// the process's epoll loop (poll), which runs the session's reader,
// readReady, whenever the socket is readable (session.go, "Who runs
// what"). Both are bus/internal/netpoll's; the goroutines it and the bus
// start per event are bus/internal/workers'.

// pollDisabled makes every session use the portable reader (readLoop), as
// on other systems; the tests set it to run the bus's tests on that path
// too (OVBUS_TEST_PORTABLE).
var pollDisabled = !netpoll.Supported

// handOverWriter returns w, or, on the poll path, a writer whose Hijack
// takes a plain TCP socket out of the runtime's poller (netpoll.HandOver),
// so that ws.Accept makes the Conn on the poller's own socket.
func handOverWriter(w http.ResponseWriter) http.ResponseWriter {
	if pollDisabled {
		return w
	}
	return netpoll.HandOver(w)
}

// poll registers c's socket with the poller, readReady being its reader,
// and reports whether it did: then c's reader counts as running and the
// caller runs it. Otherwise (TLS, not a socket, pollDisabled, no epoll)
// c's reader is readLoop. It runs before c is shared, so that whoever
// closes c later sees c.reg.
func (s *Server) poll(c *session) bool {
	if pollDisabled || !nonblock.Supported(c.conn) {
		return false
	}
	reg, err := netpoll.Register(c.conn.NetConn(), (*readTask)(c))
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			s.log.Warn("Not on the poller: a reader goroutine for this connection", "error", err) // rate-limited
		}
		return false
	}
	c.reg = reg
	return true
}

// readReady is the reader of the poll path: run by the poller when the
// socket is readable (one at a time: the registration's claim), it relays
// every message the socket holds, then arms the poller again and returns.
// It may wait (pacing the sender, answering a ping on a full socket, a
// closing handshake): the poller's loop does not, and an unarmed socket is
// not read, which is the back-pressure pacing wants. A client that streams
// frames is read in batches: the reader lingers before it arms (linger.go).
func (c *session) readReady() {
	h := c.s.hub
	defer h.uncork() // the poller's claim, or serveWS, took the cork (cork.go)
	fresh := false   // relayed since the reader started or last lingered
	for relayed := 1; ; relayed++ {
		op, b, err := nonblock.NextMessage(c.conn)
		if err == nonblock.ErrWouldBlock {
			if fresh && c.streaming() {
				c.linger() // a stream: let more come before reading on (linger.go)
				c.armedAt, fresh = h.streamTick(), false
				continue
			}
			c.armedAt = h.streamTick()
			if !c.reg.Arm() {
				c.readEnd() // closed meanwhile: nobody else will end the reader
			}
			return
		}
		if err != nil {
			c.readFailed(err)
			c.readEnd()
			return
		}
		c.received(op, b)
		fresh = true
		if relayed%corkFrames == 0 {
			h.letGo() // a sender flooding: what it published so far goes out
		}
	}
}

// readEnd ends the reader side on the poll path, once the connection is
// closed.
func (c *session) readEnd() {
	c.finish(reasonDisconnect, 0, "") // no-op unless nobody said why
	c.conn.CloseNow()
	c.reg.Unregister()
	c.sideDone()
}

// The bus's tasks for the workers and the poller. Each is a pointer
// conversion of the structure it runs for, so that starting one stores a
// pointer in an interface and allocates nothing.
type (
	// readTask is a session's reader on the poll path (readReady).
	readTask session
	// writerTask is a session's writer with nothing carried over
	// (session.writeTask(nil, nonblock.Write{})).
	writerTask session
	// wakerTask is the hub's waker (hub.wakeSleepers).
	wakerTask hub
)

func (t *readTask) Run()     { (*session)(t).readReady() }
func (t *readTask) Claimed() { (*session)(t).s.hub.cork() } // netpoll.RoundReader: readReady lets it go
func (t *writerTask) Run()   { (*session)(t).writeTask(nil, nonblock.Write{}) }
func (t *wakerTask) Run()    { (*hub)(t).wakeSleepers() }
