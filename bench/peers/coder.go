package peers

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// The coder peers follow coder/websocket's examples: internal/examples/echo
// (Reader/Writer with io.Copy, streaming each message) for echo, and
// internal/examples/chat for fan-out (a mutex-guarded subscriber set, a
// buffered channel per subscriber, publish never blocks and closes a
// subscriber that cannot keep up, one writer loop per subscriber with a
// per-write timeout). The examples' rate limiters and subprotocol checks are
// demo policy and left out. Publishing under the mutex gives one total order.

var coderGreeting = []byte(Greeting)

// coderWriteTimeout is the chat example's writeTimeout.
const coderWriteTimeout = 5 * time.Second

var coderAccept = &websocket.AcceptOptions{
	InsecureSkipVerify: true, // the OVOS bus accepts every Origin
}

func newCoder(mode Mode, o Options) http.Handler {
	if mode == ModeEcho {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, coderAccept)
			if err != nil {
				return
			}
			defer c.CloseNow()
			c.SetReadLimit(o.MaxMessageSize)
			ctx := r.Context()
			for {
				if err := coderEcho(ctx, c); err != nil {
					if coderUnexpected(err) {
						o.Logf("coder: echo: %v", err)
					}
					return
				}
			}
		})
	}
	s := &coderServer{subs: make(map[*coderSub]struct{}), queue: o.Queue, max: o.MaxMessageSize, logf: o.Logf}
	return http.HandlerFunc(s.serve)
}

// coderUnexpected reports whether err is more than the peer leaving.
func coderUnexpected(err error) bool {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return false
	case -1:
		return !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed)
	}
	return true
}

func coderEcho(ctx context.Context, c *websocket.Conn) error {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return err
	}
	w, err := c.Writer(ctx, typ)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		return err
	}
	return w.Close()
}

type coderMsg struct {
	typ  websocket.MessageType
	data []byte
}

type coderSub struct {
	msgs      chan coderMsg
	closeSlow func()
}

type coderServer struct {
	mu    sync.Mutex
	subs  map[*coderSub]struct{}
	queue int
	max   int64
	logf  func(string, ...any)
}

func (s *coderServer) serve(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, coderAccept)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(s.max)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	sub := &coderSub{
		msgs: make(chan coderMsg, s.queue),
		closeSlow: func() {
			c.Close(websocket.StatusPolicyViolation, "connection too slow to keep up with messages")
		},
	}
	// The greeting is the first message in the subscriber's queue, queued in
	// the critical section that makes it a member: a client that has seen the
	// greeting is a member.
	s.mu.Lock()
	sub.msgs <- coderMsg{websocket.MessageText, coderGreeting}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()

	go func() {
		defer cancel()
		for {
			select {
			case m := <-sub.msgs:
				if err := coderWrite(ctx, c, m.typ, m.data); err != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()

	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			if ctx.Err() == nil && coderUnexpected(err) {
				s.logf("coder: read: %v", err)
			}
			return
		}
		s.publish(coderMsg{typ, data})
	}
}

// publish hands m to every subscriber; it never blocks, and a subscriber
// whose queue is full is closed.
func (s *coderServer) publish(m coderMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		select {
		case sub.msgs <- m:
		default:
			delete(s.subs, sub)
			go sub.closeSlow()
		}
	}
}

func coderWrite(ctx context.Context, c *websocket.Conn, typ websocket.MessageType, p []byte) error {
	ctx, cancel := context.WithTimeout(ctx, coderWriteTimeout)
	defer cancel()
	return c.Write(ctx, typ, p)
}
