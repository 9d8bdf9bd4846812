package peers

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// The gobwas peers follow gobwas/ws's README "Usage": ws.UpgradeHTTP, then
// wsutil.ReadClientData to read a whole message (answering control frames)
// and wsutil.WriteServerMessage to write one, with wsutil.SetMaxMessageSize as
// the README's "Limits" asks. Reads go through the bufio.Reader UpgradeHTTP
// returns and writes through a bufio.Writer flushed once per message (echo) or
// once per batch (fan-out), so a frame's header and payload leave in one
// system call rather than two.
//
// gobwas/ws has no hub of its own: fan-out uses the gorilla/coder shape (a
// mutex-guarded client set, a bounded queue and one writer goroutine per
// client, a full queue drops the client) with each message compiled once into
// a frame with ws.CompileFrame — gobwas's documented way to pre-encode a frame
// sent often — and every queued frame a writer finds is written before one
// flush.

// gobwasWriteWait bounds each flush, like gorilla's writeWait.
const gobwasWriteWait = 10 * time.Second

var gobwasGreeting = ws.MustCompileFrame(ws.NewTextFrame([]byte(Greeting)))

// gobwasConn serialises writes to the connection: the reader answers control
// frames while the writer goroutine flushes data frames.
type gobwasConn struct {
	conn net.Conn
	mu   sync.Mutex
	bw   *bufio.Writer
}

// Write writes p (whole frames) and flushes.
func (c *gobwasConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.bw.Write(p)
	if err == nil {
		err = c.bw.Flush()
	}
	return n, err
}

// gobwasControl takes the control frames (pong, close) that wsutil's handler
// writes while reading, which may come as a header and a payload in separate
// Write calls, and passes each complete frame to the connection in one locked
// write, so that no data frame from the writer goroutine can fall in between.
type gobwasControl struct {
	c   *gobwasConn
	buf []byte
}

func (w *gobwasControl) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for len(w.buf) >= 2 {
		// Server frames are unmasked and control payloads are at most 125
		// bytes (RFC 6455 §5.5), so the second byte is the payload length.
		n := 2 + int(w.buf[1]&0x7f)
		if w.buf[1]&0x7f > 125 {
			n = len(w.buf) // not a control frame: pass it on as it is
		}
		if len(w.buf) < n {
			break
		}
		if _, err := w.c.Write(w.buf[:n]); err != nil {
			return 0, err
		}
		w.buf = append(w.buf[:0], w.buf[n:]...)
	}
	return len(p), nil
}

func newGobwas(mode Mode, o Options) http.Handler {
	wsutil.SetMaxMessageSize(o.MaxMessageSize)
	if mode == ModeEcho {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, rw, _, err := ws.UpgradeHTTP(r, w)
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				flushed := &gobwasConn{conn: conn, bw: rw.Writer}
				in := struct {
					io.Reader
					io.Writer
				}{rw.Reader, flushed}
				for {
					msg, op, err := wsutil.ReadClientData(in)
					if err != nil {
						return
					}
					if err := wsutil.WriteServerMessage(rw.Writer, op, msg); err != nil {
						return
					}
					if err := rw.Writer.Flush(); err != nil {
						return
					}
				}
			}()
		})
	}
	h := &gobwasHub{clients: make(map[*gobwasClient]struct{}), queue: o.Queue, logf: o.Logf}
	return http.HandlerFunc(h.serve)
}

type gobwasClient struct {
	c    *gobwasConn
	send chan []byte // compiled frames; closed when the client is dropped
}

type gobwasHub struct {
	mu      sync.Mutex
	clients map[*gobwasClient]struct{}
	queue   int
	logf    func(string, ...any)
}

func (h *gobwasHub) serve(w http.ResponseWriter, r *http.Request) {
	conn, rw, _, err := ws.UpgradeHTTP(r, w)
	if err != nil {
		return
	}
	c := &gobwasConn{conn: conn, bw: rw.Writer}
	cl := &gobwasClient{c: c, send: make(chan []byte, h.queue)}
	// The greeting is the first frame in the client's queue, queued in the
	// critical section that makes it a member: a client that has seen the
	// greeting is a member.
	h.mu.Lock()
	cl.send <- gobwasGreeting
	h.clients[cl] = struct{}{}
	h.mu.Unlock()
	go cl.writeLoop()
	go h.readLoop(cl, rw.Reader)
}

func (h *gobwasHub) readLoop(cl *gobwasClient, br *bufio.Reader) {
	defer func() {
		h.remove(cl)
		cl.c.conn.Close()
	}()
	in := struct {
		io.Reader
		io.Writer
	}{br, &gobwasControl{c: cl.c}}
	for {
		msg, op, err := wsutil.ReadClientData(in)
		if err != nil {
			return
		}
		frame, err := ws.CompileFrame(ws.NewFrame(op, true, msg))
		if err != nil {
			h.logf("gobwas: compile: %v", err)
			return
		}
		h.broadcast(frame)
	}
}

func (h *gobwasHub) broadcast(frame []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cl := range h.clients {
		select {
		case cl.send <- frame:
		default: // too slow: drop it
			delete(h.clients, cl)
			close(cl.send)
			h.logf("gobwas: dropping %v: send queue full", cl.c.conn.RemoteAddr())
		}
	}
}

func (h *gobwasHub) remove(cl *gobwasClient) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.clients[cl]; ok {
		delete(h.clients, cl)
		close(cl.send)
	}
}

func (cl *gobwasClient) writeLoop() {
	c := cl.c
	defer c.conn.Close()
	for frame := range cl.send {
		c.mu.Lock()
		c.conn.SetWriteDeadline(time.Now().Add(gobwasWriteWait))
		_, err := c.bw.Write(frame)
		// Batch whatever else is already queued into the same flush.
		for n := len(cl.send); err == nil && n > 0; n-- {
			f, ok := <-cl.send
			if !ok {
				break
			}
			_, err = c.bw.Write(f)
		}
		if err == nil {
			err = c.bw.Flush()
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
	// Dropped by the hub, or the reader ended: say goodbye if we still can.
	c.conn.SetWriteDeadline(time.Now().Add(gobwasWriteWait))
	c.Write(ws.CompiledCloseNormalClosure)
}
