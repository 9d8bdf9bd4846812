package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// Defaults of Options.
const (
	DefaultReconnectMin    = 500 * time.Millisecond
	DefaultReconnectMax    = 60 * time.Second
	DefaultReconnectJitter = 0.2
	DefaultQueueSize       = 1000
	DefaultHandlerBacklog  = 10000
	// DefaultTimeout is the wait of WaitFor and WaitForResponse when none is given, as in the
	// Python client's wait_for_message and wait_for_response.
	DefaultTimeout = 3 * time.Second
)

// Errors returned by the Client.
var (
	// ErrClosed: the Client has been closed.
	ErrClosed = errors.New("client: closed")
	// ErrDisconnected: Emit while disconnected with queueing turned off (Options.QueueSize < 0).
	ErrDisconnected = errors.New("client: not connected")
	// ErrQueueFull: Emit while disconnected and Options.QueueSize messages are already queued.
	ErrQueueFull = errors.New("client: emit queue full while disconnected")
	// ErrTimeout: WaitFor or WaitForResponse saw no matching message in time.
	ErrTimeout = errors.New("timed out")
)

// State is the connection state of a Client.
type State int32

const (
	Idle         State = iota // created, Connect or Start not called yet
	Connecting                // dialing
	Connected                 // the handshake succeeded and the emit queue has been flushed
	Disconnected              // a dial failed or the connection dropped; a retry follows
	Closed                    // Close was called (or the connection dropped with NoReconnect)
)

func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Connecting:
		return "connecting"
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// StateChange is reported to Options.OnState.
type StateChange struct {
	State State
	// Err is why the client is Disconnected (the dial or read error), or why it is Closed after a
	// drop with NoReconnect.
	Err error
	// Retry is, for Disconnected, the wait before the next dial (0 when none follows).
	Retry time.Duration
	// Attempt counts the failed dials since the last successful one.
	Attempt int
}

// Options configures a Client. A nil *Options means the defaults; a zero field means its default.
type Options struct {
	// Dial is passed to ws.Dial: TLS configuration (e.g. RootCAs holding the bus's self-signed
	// certificate), headers, proxy, compression, timeouts, message size limits.
	Dial *ws.DialOptions

	// Reconnection backoff: after a drop or a failed dial the client waits ReconnectMin, then twice
	// as long after each further failure, up to ReconnectMax; each wait is varied at random by
	// ±ReconnectJitter (a fraction). The defaults, 500 ms doubling to 60 s with ±20 %, reach the
	// Python client's 5 s → 60 s ceiling but retry a restarted bus sooner; the jitter keeps many
	// clients from reconnecting in lock step. A negative ReconnectJitter means none.
	ReconnectMin    time.Duration
	ReconnectMax    time.Duration
	ReconnectJitter float64
	// NoReconnect makes a dropped connection final: the client goes to Closed.
	NoReconnect bool

	// QueueSize bounds the messages Emit queues while the client is not connected; they are sent,
	// in order, as soon as it connects. When the queue is full Emit returns ErrQueueFull. A
	// negative QueueSize turns queueing off: Emit returns ErrDisconnected at once. Default 1000.
	QueueSize int

	// HandlerBacklog bounds the messages waiting for one handler. When a handler falls that far
	// behind, reading from the bus waits for it (nothing is dropped), delaying the other handlers
	// too. Default 10000.
	HandlerBacklog int

	// SessionSync emits {"type":"ovos.session.sync"} after every connect, before the queued
	// messages, as the Python client does to ask ovos-core for the default session. Off by default:
	// tools and tests should not put traffic of their own on the bus.
	SessionSync bool

	// OnState is called, in order and off the read loop, on every change of connection state.
	OnState func(StateChange)
}

func (o *Options) withDefaults() Options {
	var v Options
	if o != nil {
		v = *o
	}
	if v.ReconnectMin <= 0 {
		v.ReconnectMin = DefaultReconnectMin
	}
	if v.ReconnectMax <= 0 {
		v.ReconnectMax = DefaultReconnectMax
	}
	if v.ReconnectMax < v.ReconnectMin {
		v.ReconnectMax = v.ReconnectMin
	}
	if v.ReconnectJitter == 0 {
		v.ReconnectJitter = DefaultReconnectJitter
	} else if v.ReconnectJitter < 0 {
		v.ReconnectJitter = 0
	} else if v.ReconnectJitter > 1 {
		v.ReconnectJitter = 1
	}
	if v.QueueSize == 0 {
		v.QueueSize = DefaultQueueSize
	}
	if v.HandlerBacklog <= 0 {
		v.HandlerBacklog = DefaultHandlerBacklog
	}
	return v
}

// Client is a connection to an OVOS message bus that reconnects by itself.
//
// Messages from the bus are delivered to handlers registered with On, Once and OnFrame. Every
// handler has its own goroutine and backlog: it sees messages one at a time in the order the bus
// sent them, and a slow handler does not hold up reading or the other handlers (up to
// Options.HandlerBacklog). The bus echoes every message to its sender, so a client's own messages
// reach its handlers too, like the greeting "connected" that opens every connection.
//
// All methods are safe for concurrent use.
type Client struct {
	urls []string // the buses to dial, in turn
	opts Options

	ctx    context.Context // lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the connection manager and the reader
	done   chan struct{}

	mu          sync.Mutex
	url         string // the bus dialled last
	nextURL     int    // index in urls of the next dial
	state       State
	started     bool
	closing     bool // no more emits, connects or state changes but Closed
	closeCalled bool
	conn        *ws.Conn // set while Connected (after the queue was flushed)
	queue       [][]byte
	stateD      *dispatcher[StateChange]

	hmu      sync.Mutex
	hclosed  bool
	handlers []*handler
	waiters  []*waiter
	targets  []*handler // the reader's scratch slice
}

// New returns a Client for the bus at rawURL (ws:// or wss://) without connecting: register
// handlers, then call Connect or Start. rawURL may list several nodes of one clustered bus,
// separated by commas: every dial takes the next one in turn, so that after a drop the client
// reconnects to another node.
func New(rawURL string, opts *Options) (*Client, error) {
	var urls []string
	for _, raw := range strings.Split(rawURL, ",") {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("client: bad bus URL: %w", err)
		}
		if u.Scheme != "ws" && u.Scheme != "wss" {
			return nil, fmt.Errorf("client: bad bus URL %q: the scheme must be ws or wss", raw)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("client: bad bus URL %q: no host", raw)
		}
		urls = append(urls, raw)
	}
	c := &Client{urls: urls, url: urls[0], opts: opts.withDefaults(), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if c.opts.OnState != nil {
		c.stateD = newDispatcher(c.opts.OnState, 0)
	}
	return c, nil
}

// Dial returns a Client connected to the bus at rawURL: New then Connect. The greeting
// ("connected") may arrive before handlers registered after Dial exist; to see it, use New, On,
// then Connect.
func Dial(ctx context.Context, rawURL string, opts *Options) (*Client, error) {
	c, err := New(rawURL, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Connect(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// URL returns the bus URL dialled last (the first one before any dial).
func (c *Client) URL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.url
}

// dialURL returns the URL of the next dial: the next one in turn.
func (c *Client) dialURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.url = c.urls[c.nextURL%len(c.urls)]
	c.nextURL++
	return c.url
}

// State returns the current connection state.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Done is closed when Close has finished and the last handler and OnState call have returned
// (see Close).
func (c *Client) Done() <-chan struct{} { return c.done }

// setState records s and reports it; c.mu must be held.
func (c *Client) setStateLocked(ch StateChange) {
	c.state = ch.State
	if c.stateD != nil {
		c.stateD.push(context.Background(), ch) // unbounded: never waits
	}
}

func (c *Client) setState(ch StateChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing && ch.State != Closed {
		return
	}
	c.setStateLocked(ch)
}

// Connect dials the bus once and returns the error if that fails (the client may then be
// connected again, started or closed). It returns when the client is Connected: messages queued
// before have been written and Emit writes straight to the connection. From then on the client
// keeps the connection up by itself: it reconnects after every drop until Close.
func (c *Client) Connect(ctx context.Context) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.started {
		c.mu.Unlock()
		return errors.New("client: already started")
	}
	c.started = true
	c.setStateLocked(StateChange{State: Connecting})
	c.mu.Unlock()

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	unhook := context.AfterFunc(c.ctx, stop) // Close aborts the dial
	defer unhook()
	// Each URL once, in turn.
	var conn *ws.Conn
	var err error
	for range c.urls {
		if conn, _, err = ws.Dial(ctx, c.dialURL(), c.opts.Dial); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		c.mu.Lock()
		c.started = false
		if !c.closing {
			c.setStateLocked(StateChange{State: Disconnected, Err: err, Attempt: 1})
		}
		c.mu.Unlock()
		return fmt.Errorf("client: connect: %w", err)
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		conn.CloseNow()
		return ErrClosed
	}
	c.wg.Add(1)
	c.mu.Unlock()
	ready := make(chan struct{})
	go c.manage(conn, sync.OnceFunc(func() { close(ready) }))
	// Return once Emit writes straight to the connection (the queue is flushed), or the first
	// connection already ended (the client is then reconnecting by itself).
	select {
	case <-ready:
	case <-ctx.Done():
	}
	return nil
}

// Start connects in the background, retrying with backoff until it succeeds, and keeps the
// connection up until Close. Messages emitted meanwhile are queued (Options.QueueSize).
func (c *Client) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return ErrClosed
	}
	if c.started {
		return errors.New("client: already started")
	}
	c.started = true
	c.wg.Add(1)
	go c.manage(nil, func() {})
	return nil
}

// backoff returns the wait before retry number attempt (1 = the first).
func (c *Client) backoff(attempt int) time.Duration {
	d := c.opts.ReconnectMin
	for i := 1; i < attempt && d < c.opts.ReconnectMax; i++ {
		d *= 2
	}
	d = min(d, c.opts.ReconnectMax)
	if j := c.opts.ReconnectJitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
	}
	return d
}

// manage keeps a connection up until Close. conn is the first connection, or nil to dial it;
// ready is called when the first connection is Connected or has ended.
func (c *Client) manage(conn *ws.Conn, ready func()) {
	defer c.wg.Done()
	defer ready()
	attempt := 0
	for {
		if conn == nil {
			c.setState(StateChange{State: Connecting, Attempt: attempt})
			var err error
			conn, _, err = ws.Dial(c.ctx, c.dialURL(), c.opts.Dial)
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				attempt++
				if !c.waitRetry(attempt, err) {
					return
				}
				continue
			}
		}
		attempt = 0
		err := c.serve(conn, ready)
		ready()
		conn = nil
		if c.ctx.Err() != nil {
			return
		}
		if c.opts.NoReconnect {
			c.mu.Lock()
			c.closing = true
			n := len(c.queue)
			c.queue = nil
			c.mu.Unlock()
			if n > 0 {
				err = fmt.Errorf("%w (%d queued messages dropped)", err, n)
			}
			c.setState(StateChange{State: Closed, Err: err})
			go c.Close()
			return
		}
		attempt++
		if !c.waitRetry(attempt, err) {
			return
		}
	}
}

// waitRetry reports the connection as Disconnected by err and waits the
// backoff delay before the given attempt; it returns false when the client
// was closed meanwhile.
func (c *Client) waitRetry(attempt int, err error) bool {
	delay := c.backoff(attempt)
	c.setState(StateChange{State: Disconnected, Err: err, Retry: delay, Attempt: attempt})
	return sleep(c.ctx, delay)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var sessionSyncFrame = []byte(`{"type":"ovos.session.sync","data":{},"context":{}}`)

// serve runs one connection until it drops or the client closes, and returns why it ended.
func (c *Client) serve(conn *ws.Conn, ready func()) error {
	readErr := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		readErr <- c.read(conn)
	}()

	err := c.flush(conn)
	graceful := errors.Is(err, ErrClosed) // closing, and no write was cut short
	if err == nil {
		ready()
		select {
		case err = <-readErr:
			readErr = nil
		case <-c.ctx.Done():
			err, graceful = ErrClosed, true
		}
	}
	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	c.mu.Unlock()
	if graceful && readErr != nil {
		// Stop the reader (a timed-out read leaves the stream intact), then let Close do the
		// closing handshake, reading the peer's close frame itself: one reader at a time.
		conn.SetReadDeadline(time.Now())
		<-readErr
		readErr = nil
		conn.SetReadDeadline(time.Time{})
		conn.Close(ws.StatusNormalClosure, "")
	} else {
		conn.CloseNow()
	}
	if readErr != nil {
		<-readErr
	}
	return err
}

// flush sends the session sync (if on) and the queued messages, then marks the client Connected.
// Messages emitted meanwhile join the queue, so they keep their order.
func (c *Client) flush(conn *ws.Conn) error {
	if c.opts.SessionSync {
		if err := conn.WriteMessage(c.ctx, ws.TextMessage, sessionSyncFrame); err != nil {
			return err
		}
	}
	for {
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return ErrClosed
		}
		if len(c.queue) == 0 {
			c.conn = conn
			c.setStateLocked(StateChange{State: Connected})
			c.mu.Unlock()
			return nil
		}
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		for i, b := range batch {
			if err := conn.WriteMessage(c.ctx, ws.TextMessage, b); err != nil {
				c.mu.Lock()
				c.queue = append(batch[i:], c.queue...)
				c.mu.Unlock()
				return err
			}
		}
	}
}

// read reads frames until the connection fails and hands them to the handlers.
func (c *Client) read(conn *ws.Conn) error {
	for {
		// No context: serve ends the read with CloseNow, or with a read deadline before a
		// closing handshake.
		op, b, err := conn.ReadMessage(context.Background())
		if err != nil {
			return err
		}
		f := Frame{Binary: op == ws.OpBinary, Data: b, Received: time.Now()}
		f.Message, f.Err = message.ParseFrame(f.Binary, b)
		c.dispatch(f)
	}
}

// Close closes the connection (with a closing handshake), stops reconnecting and stops the
// handlers: handlers that are idle are gone when Close returns; a handler that is running (it may be
// the caller) finishes on its own, and nothing is delivered after it. Messages still queued are
// dropped, which Close reports as an error. Calls after the first return nil at once.
//
// Done is closed when the first Close has finished and every handler and OnState call has
// returned, the report of the Closed state included; so a handler or OnState must not wait for
// Done of its own client.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closeCalled {
		c.mu.Unlock()
		return nil
	}
	c.closeCalled = true
	c.closing = true
	unsent := len(c.queue)
	c.queue = nil
	c.mu.Unlock()

	c.cancel()
	c.wg.Wait()

	c.hmu.Lock()
	c.hclosed = true
	hs := c.handlers
	c.handlers = nil
	c.waiters = nil
	c.hmu.Unlock()

	c.mu.Lock()
	if c.state != Closed {
		c.setStateLocked(StateChange{State: Closed})
	}
	c.mu.Unlock()

	// Idle dispatchers end at once: wait for them here. A busy one may be running the caller (a
	// handler or OnState closing its own client), so Close cannot wait for it; Done waits for every
	// one, so that a reader of Done has seen the last state change (Closed, with its error).
	var idle, busy []<-chan struct{}
	for _, h := range hs {
		if h.d.stop() {
			busy = append(busy, h.d.done)
		} else {
			idle = append(idle, h.d.done)
		}
	}
	if c.stateD != nil {
		if c.stateD.finish() {
			busy = append(busy, c.stateD.done)
		} else {
			idle = append(idle, c.stateD.done)
		}
	}
	for _, ch := range idle {
		<-ch
	}
	if len(busy) == 0 {
		close(c.done)
	} else {
		go func() {
			for _, ch := range busy {
				<-ch
			}
			close(c.done)
		}()
	}
	if unsent > 0 {
		return fmt.Errorf("client: closed with %d queued messages unsent", unsent)
	}
	return nil
}
