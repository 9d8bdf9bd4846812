package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/ovbus/ovbus/bus/internal/workers"
	"github.com/ovbus/ovbus/ws"
)

// Greeting is the text frame every client receives first, before it joins
// the fan-out (docs/protocol.md §2), byte for byte.
const Greeting = `{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`

// ErrServerClosed is returned by ListenAndServe, Serve and Emit after
// Shutdown.
var ErrServerClosed = errors.New("bus: server closed")

// Close reasons: the label of the closes metric and the log's reason.
const (
	reasonSlowConsumer  = "slow_consumer"
	reasonOversize      = "oversize"
	reasonProtocolError = "protocol_error"
	reasonOverloaded    = "overloaded"   // max_inflight_bytes refused a message: 1013
	reasonRateLimited   = "rate_limited" // over its permissions' message rate: 1008
	reasonClientClose   = "client_close"
	reasonDisconnect    = "disconnect"
	reasonWriteError    = "write_error"
	reasonShutdown      = "shutdown"
)

// Reasons for rejected frames and refused connections.
const (
	rejectMalformedCarrier = "malformed_carrier"
	rejectPermission       = "permission"
	rejectOrigin           = "origin"
	rejectAuth             = "auth"
	rejectHandshake        = "handshake"
	rejectShuttingDown     = "shutting_down"
	rejectMaxConnections   = "max_connections"
	rejectRateLimited      = "rate_limited" // 429: reconnecting before its rate gave it a token
	// TLS handshakes that failed (wss://), by cause (httpErrorLog).
	rejectTLSTimeout = "tls_timeout" // not finished within handshake_timeout
	rejectTLSAborted = "tls_aborted" // the client closed or reset the connection mid-handshake
	rejectTLSNotTLS  = "tls_not_tls" // the client spoke something else (plain HTTP, say)
	rejectTLSError   = "tls_error"   // the handshake itself failed: version, ciphers, certificate, an alert
)

// MaxHeaderBytes bounds the request line and headers of an HTTP request to
// the bus (the WebSocket upgrade, /health), instead of net/http's 1 MiB: a
// client that sends more gets 431 and is closed, so an unfinished
// handshake holds about this much at most until handshake_timeout. It is
// what common front ends accept (nginx: 4 × 8 KiB) and holds a browser's
// cookies for one site; OVOS clients send a few hundred bytes.
const MaxHeaderBytes = 32 << 10

// Server is an OVOS message bus: an http.Handler that upgrades its route to
// WebSocket connections and relays every message to every client, the
// sender included, in one order that all clients see.
//
// Besides GET on the route it answers GET /health with 200 "ok" (plus a
// line per AddHealth check); every other path is 404.
//
// All methods are safe for concurrent use.
type Server struct {
	opts     Options      // the options New was given, with defaults
	log      *slog.Logger // Options.Logger, its warnings rate-limited
	warns    *rateLimited
	live     atomic.Pointer[liveOptions]
	hub      *hub
	m        *metrics
	greeting *ws.PreparedMessage
	inflight *ws.Budget   // Options.MaxInflightBytes, shared by every connection
	mem      memRelease   // returning a burst's memory to the OS (memrelease.go)
	router   router       // reply routing (routing.go)
	spent    spentBuckets // rate limits outliving their connections (ratelimit.go)

	fileLimit uint64       // the open-file limit at New, 0 when unknown
	conns     atomic.Int64 // connections upgrading or upgraded (max_connections)

	closing  atomic.Bool
	closingC chan struct{} // closed when Shutdown starts
	progress chan struct{} // cap 1: while closing, a writer moved or a session ended
	done     chan struct{} // closed when Shutdown has finished
	wg       sync.WaitGroup

	mu         sync.Mutex
	sessions   []*session // in no order; each knows its place (session.sidx)
	nextID     uint64
	closes     []CloseInfo // the last recentCloses closed sessions, a ring
	closesNext int         // where the next one goes
	health     []healthCheck
	httpSrv    *http.Server
	listener   net.Listener
	metricsSrv *http.Server
	metricsLn  net.Listener
	local      *dispatcher
	shutOnce   sync.Once
}

// New returns a Server for opts; it does not listen yet (see Start,
// ListenAndServe, Serve, or use it as an http.Handler).
func New(opts Options) (*Server, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	greeting, err := ws.NewPreparedMessage(ws.OpText, []byte(Greeting), o.Compression)
	if err != nil {
		return nil, err
	}
	warns := newRateLimited(o.Logger.Handler(), nil)
	fileLimit := openFileLimit()
	s := &Server{
		opts:      o,
		log:       slog.New(warns),
		warns:     warns,
		fileLimit: fileLimit,
		hub:       newHub(o.MaxQueueMessages, o.MaxQueueBytes),
		greeting:  greeting,
		inflight:  ws.NewBudget(o.MaxInflightBytes),
		done:      make(chan struct{}),
		closingC:  make(chan struct{}),
		progress:  make(chan struct{}, 1),
	}
	s.live.Store(newLive(o))
	s.inflight.OnDrained(releaseMinBurst, releaseLow, s.onDrained)
	_, _, held := runtimeStats()
	s.mem.held.Store(held) // what the first handshake burst is measured against
	s.hub.stallAfter.Store(int64(o.cutGrace()))
	s.m = newMetrics(s)
	s.httpSrv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: o.HandshakeTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		IdleTimeout:       time.Minute,
		ErrorLog:          log.New(httpErrorLog{s}, "", 0),
	}
	return s, nil
}

// Start binds the bus's listener (and the metrics listener when
// MetricsAddress is set) and serves in the background. It returns once the
// addresses are bound, or the bind error, which names the address.
func (s *Server) Start() error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	if s.Addr() != nil {
		return errors.New("bus: already started")
	}
	l, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("bus: cannot listen on %s: %w", s.opts.Addr, err)
	}
	if s.opts.MetricsAddress != "" {
		ml, err := net.Listen("tcp", s.opts.MetricsAddress)
		if err != nil {
			l.Close()
			return fmt.Errorf("bus: cannot listen for metrics on %s: %w", s.opts.MetricsAddress, err)
		}
		s.mu.Lock()
		s.metricsLn = ml
		s.metricsSrv = &http.Server{Handler: s.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: MaxHeaderBytes}
		srv := s.metricsSrv
		s.mu.Unlock()
		go srv.Serve(ml)
	}
	ln, err := s.register(l)
	if err != nil {
		return err
	}
	s.log.Info("Connection ceiling", "max_connections", s.MaxConnections(), "open_files", s.fileLimit)
	go s.serve(ln) // Addr works at once: the listener is registered
	return nil
}

// ListenAndServe is Start, then it waits until Shutdown is called and
// returns ErrServerClosed (wait for Shutdown to return before exiting).
func (s *Server) ListenAndServe() error {
	if err := s.Start(); err != nil {
		return err
	}
	<-s.closingC
	return ErrServerClosed
}

// Serve accepts connections on l (wrapped in TLS when Options.TLSConfig is
// set: wss:// on the same port) until Shutdown; then it returns
// ErrServerClosed. Unlike Start, it does not serve MetricsAddress (see
// MetricsHandler).
func (s *Server) Serve(l net.Listener) error {
	ln, err := s.register(l)
	if err != nil {
		return err
	}
	return s.serve(ln)
}

// register wraps l in TLS when Options.TLSConfig is set and records it as
// the bus's listener; after Shutdown it closes l and returns ErrServerClosed.
func (s *Server) register(l net.Listener) (net.Listener, error) {
	if tc := s.opts.TLSConfig; tc != nil {
		tc = tc.Clone()
		tc.NextProtos = []string{"http/1.1"}
		l = tls.NewListener(l, tc)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		l.Close()
		return nil, ErrServerClosed
	}
	s.listener = l
	return l, nil
}

// serve accepts connections on a registered listener until Shutdown.
func (s *Server) serve(l net.Listener) error {
	err := s.httpSrv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) || s.closing.Load() {
		return ErrServerClosed
	}
	return err
}

// Addr returns the address the bus listens on, or nil before Start/Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return nil
	}
	return s.listener.Addr()
}

// MetricsAddr returns the metrics listener's address, or nil.
func (s *Server) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metricsLn == nil {
		return nil
	}
	return s.metricsLn.Addr()
}

// ServeHTTP upgrades requests for the route (and, when the bus has tokens,
// for the route, "/", a token: see Auth.Tokens), answers /health and
// refuses the rest with 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == s.opts.Route {
		s.serveWS(w, r, "", false)
		return
	}
	if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		s.serveHealth(w)
		return
	}
	if tok, ok := strings.CutPrefix(r.URL.Path, strings.TrimSuffix(s.opts.Route, "/")+"/"); ok && len(s.live.Load().access.tokens) > 0 {
		s.serveWS(w, r, tok, true)
		return
	}
	http.NotFound(w, r)
}

// serveWS upgrades a request for the route; routeTok is the token in its
// path, when viaRoute.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request, routeTok string, viaRoute bool) {
	if s.closing.Load() {
		s.m.rejected(rejectShuttingDown)
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	live := s.live.Load()
	o := &live.opts
	// The ceiling, before anything else: a full bus answers at once. An
	// upgraded connection leaves it when its session ends (sideDone).
	started := false
	defer func() {
		if !started {
			s.conns.Add(-1)
		}
	}()
	if n := s.conns.Add(1); n > int64(s.maxConnections(o)) {
		s.m.rejected(rejectMaxConnections)
		s.log.Warn("Refused connection: max_connections reached", "remote", r.RemoteAddr, "max_connections", s.maxConnections(o))
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many connections", http.StatusServiceUnavailable)
		return
	}
	acc := s.admit(live.access, r, routeTok, viaRoute)
	if acc == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ovbus"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	limit, ok := s.limitFor(w, acc, r.RemoteAddr)
	if !ok {
		return
	}
	maxSize := o.MaxMsgSize
	if maxSize <= 0 {
		maxSize = -1 // no limit
	}
	// Counted before the answer, so that a client whose handshake has
	// returned is counted (TestMemoryReleasedAfterHandshakes relies on it).
	s.noteAccept()
	originRefused := false
	// On the poll path the socket leaves Go's runtime poller as ws hijacks
	// it (handOverWriter, poll.go).
	conn, err := ws.Accept(handOverWriter(w), r, &ws.AcceptOptions{
		CheckOrigin: func(r *http.Request) bool {
			ok := o.originAllowed(r.Header.Get("Origin"))
			originRefused = !ok
			return ok
		},
		EnableCompression: !o.DisableCompression,
		Compression:       o.acceptCompression(),
		MaxMessageSize:    maxSize,
		MaxFrameSize:      maxSize,
		Budget:            s.inflight,
		HandshakeTimeout:  o.HandshakeTimeout,
		CloseTimeout:      closeTimeout,
	})
	if err != nil {
		if originRefused {
			s.m.rejected(rejectOrigin)
			s.log.Warn("Refused connection: origin not allowed", "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"))
		} else {
			s.m.rejected(rejectHandshake)
			s.log.Debug("WebSocket handshake failed", "remote", r.RemoteAddr, "error", err)
		}
		return
	}
	setSendBuffer(conn.NetConn(), o.SendBuffer)
	c := &session{
		s:          s,
		conn:       conn,
		acc:        acc,
		limit:      limit,
		windowBits: -1,
		remote:     r.RemoteAddr,
		says:       unique.Make(clientSays{userAgent: r.Header.Get("User-Agent"), origin: r.Header.Get("Origin")}),
		connected:  time.Now().UnixNano(),
	}
	// No wake channel: the hub starts the writer (c.wake).
	c.f.h, c.f.idx, c.f.sleepIdx, c.f.owner, c.f.cuts = s.hub, -1, -1, c, true
	c.sidx = -1 // not in s.sessions yet (addSession)
	c.sides.Store(2)
	// A writer is pending (wpend 1) until the greeting is out: the wakes of
	// publishes before that only count, and the writer started after the
	// greeting fetches what they published.
	c.wpend.Store(1)
	if p := conn.Deflate(); p != nil {
		c.windowBits = int8(p.ServerMaxWindowBits)
		c.ownDeflate = !p.ServerNoContextTakeover // only with a context (Accept)
	}
	c.f.paces = true
	// The reader: readReady, run by the poller when the socket is readable
	// (registered now, before c is shared), or readLoop.
	polled := s.poll(c)
	// The client joins the log first, then gets the greeting, then its
	// writer starts: the greeting is the first frame it receives, and once
	// it has it, it is sure to get everything published afterwards (the
	// Tornado bus writes the greeting and adds the client in one step).
	if !s.addSession(c) {
		conn.CloseNow()
		c.reg.Unregister()
		return
	}
	started = true
	conn.SetWriteDeadline(time.Now().Add(o.WriteTimeout))
	if err := conn.WritePrepared(context.Background(), s.greeting); err != nil {
		// The reader and writer below see the end at once.
		c.finish(reasonWriteError, 0, err.Error(), "error", err.Error())
		conn.CloseNow()
	}
	s.log.Debug("Client connected", "remote", c.remote)
	workers.Start((*writerTask)(c))
	// The handler returns: net/http lets go of the connection's request,
	// response and buffers (8 KiB), and the reader runs: readReady the
	// first time now (the client may have sent frames with its handshake).
	if polled {
		s.hub.cork() // as the poller's claim does (cork.go)
		c.readReady()
		return
	}
	go c.readLoop()
}

// maxConnections is the ceiling in force under o.
func (s *Server) maxConnections(o *Options) int {
	if o.MaxConnections > 0 {
		return o.MaxConnections
	}
	return DefaultMaxConnectionsFor(s.fileLimit)
}

// MaxConnections returns the most clients the bus accepts at once now
// (Options.MaxConnections, or its default from the open-file limit).
func (s *Server) MaxConnections() int { return s.maxConnections(&s.live.Load().opts) }

// setSendBuffer sets the kernel send buffer of a client's TCP connection
// (under TLS too) to n bytes (SO_SNDBUF, which Linux doubles for its own
// bookkeeping and which turns the buffer's autotuning off), so that a
// stalled client pins at most that much kernel memory.
func setSendBuffer(nc net.Conn, n int64) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	// A *net.TCPConn, or the poller's own socket (netpoll.HandOver).
	if tc, ok := nc.(interface{ SetWriteBuffer(int) error }); ok && n > 0 {
		tc.SetWriteBuffer(int(n))
	}
}

// admit finds what the client of an upgrade request may do under ac, or
// refuses it: then it counts and logs why (never the token) and returns
// nil.
func (s *Server) admit(ac *access, r *http.Request, routeTok string, viaRoute bool) *grant {
	tok, shown, cause := requestToken(r, routeTok, viaRoute)
	if cause == "" {
		addr, unix := clientAddr(r)
		var g *grant
		if g, cause = ac.resolve(tok, shown, addr, unix); g != nil {
			return g
		}
	}
	s.m.rejected(rejectAuth)
	s.m.authRefused(cause)
	s.log.Warn("Refused connection: unauthorized", "remote", r.RemoteAddr, "cause", cause)
	return nil
}

// Authorize answers for a client showing token ("" for none) from remote
// (an http.Request's RemoteAddr) as the upgrade would: ok false means it
// is refused; p nil means everything is allowed.
func (s *Server) Authorize(token, remote string) (p *Permissions, ok bool) {
	if len(token) > MaxTokenBytes {
		return nil, false
	}
	addr, _ := clientAddr(&http.Request{RemoteAddr: remote})
	g, _ := s.live.Load().access.resolve(token, token != "", addr, false)
	if g == nil {
		return nil, false
	}
	return g.perms, true
}

func (s *Server) addSession(c *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.nextID++
	c.id = s.nextID
	c.sidx = int32(len(s.sessions))
	s.sessions = append(s.sessions, c)
	s.wg.Add(2) // the session's reader and writer
	s.hub.join(&c.f)
	s.router.join(c)
	c.wrote(c.f.cursor.Load(), c.f.fetched.Load())
	s.m.connected()
	return true
}

// removeSession takes c out of the sessions and records how it closed.
func (s *Server) removeSession(c *session, ci CloseInfo) {
	s.mu.Lock()
	ok := c.sidx >= 0 && int(c.sidx) < len(s.sessions) && s.sessions[c.sidx] == c
	if ok {
		last := len(s.sessions) - 1
		s.sessions[c.sidx] = s.sessions[last]
		s.sessions[c.sidx].sidx = c.sidx
		s.sessions[last] = nil
		s.sessions = shrinkSessions(s.sessions[:last])
		c.sidx = -1
	}
	if len(s.closes) < recentCloses {
		s.closes = append(s.closes, ci)
		s.closesNext = len(s.closes) % recentCloses
	} else {
		s.closes[s.closesNext] = ci
		s.closesNext = (s.closesNext + 1) % recentCloses
	}
	s.mu.Unlock()
	if ok {
		s.m.disconnected()
		s.router.leave(c)
	}
}

// Shutdown stops the bus: it stops accepting connections and relaying new
// frames, lets the writers flush what is queued until ShutdownTimeout less
// shutdownGrace (or until ctx ends), then drops every connection without a
// close frame, or closes it with 1001 when CloseFramesOnShutdown is set (a
// client whose socket does not take the close frame in time is dropped).
// It returns when the connections are gone, within ShutdownTimeout (plus
// the time goroutines take to see their connections closed) whatever the
// clients do, or with ctx's error if ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	first := false
	s.shutOnce.Do(func() { first = true })
	if !first {
		select {
		case <-s.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	s.closing.Store(true)
	close(s.closingC)
	s.mu.Unlock()
	s.httpSrv.Close() // listeners and not-yet-upgraded connections

	live := s.live.Load()
	// The whole shutdown ends by end: the drain stops grace before it, to
	// leave time for the close frames and the goroutines to end.
	timeout := max(live.opts.ShutdownTimeout, 0)
	grace := min(shutdownGrace, timeout/4)
	end := time.Now().Add(timeout)
	deadline := end.Add(-grace)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	target := s.hub.head.Load()
	if !s.flushed(target) {
		t := time.NewTimer(time.Until(deadline))
	drain:
		for !s.flushed(target) {
			select {
			case <-s.progress:
			case <-t.C:
				break drain
			case <-ctx.Done():
				break drain
			}
		}
		t.Stop()
	}

	s.mu.Lock()
	clients := slices.Clone(s.sessions)
	local := s.local
	s.mu.Unlock()
	code := ws.StatusCode(0)
	if live.opts.CloseFramesOnShutdown {
		code = ws.StatusGoingAway
	}
	for _, c := range clients {
		if !c.finish(reasonShutdown, code, "") {
			continue
		}
		if code == 0 {
			c.closeNow()
			continue
		}
		// A writer blocked on a stalled client holds the connection's
		// write lock, which the close frame needs: its write gives up
		// within the grace, and the close frame goes out only if the
		// socket takes it by then.
		c.conn.SetWriteDeadline(time.Now().Add(max(time.Until(end), 0) / 2))
		// The closing handshake waits for the peer's answer: one at a
		// time would add up. ws.Conn.Close may run beside the reader.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.closeConn(code, "bus shutting down")
		}()
	}
	if local != nil {
		local.stop()
	}

	// Whatever the clients do, the connections are gone at end: what has
	// not ended by then is dropped.
	wait := make(chan struct{})
	go func() { s.wg.Wait(); close(wait) }()
	hard := time.NewTimer(time.Until(end))
	var err error
	select {
	case <-wait:
	case <-hard.C:
		s.dropAll(clients)
		<-wait // CloseNow ends every read and write at once
	case <-ctx.Done():
		s.dropAll(clients)
		err = ctx.Err()
	}
	hard.Stop()
	s.mu.Lock()
	if s.metricsSrv != nil {
		s.metricsSrv.Close()
	}
	s.mu.Unlock()
	s.warns.flush()
	close(s.done)
	return err
}

// shutdownGrace is what Shutdown keeps of ShutdownTimeout (at most a
// quarter of it) for sending close frames, waiting for their answers and
// for the sessions' goroutines to end after the drain: the whole of
// Shutdown takes at most ShutdownTimeout.
const shutdownGrace = time.Second

// dropAll drops the connections without a closing handshake.
func (s *Server) dropAll(clients []*session) {
	for _, c := range clients {
		c.closeNow()
	}
}

// noteProgress wakes Shutdown's drain when a writer has moved or a
// follower ended; before Shutdown it costs one atomic load.
func (s *Server) noteProgress() {
	if s.closing.Load() {
		select {
		case s.progress <- struct{}{}:
		default:
		}
	}
}

// flushed reports whether every client has written the log up to target.
func (s *Server) flushed(target uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.sessions {
		if c.written.Load() < target && !c.f.stopped.Load() {
			return false
		}
	}
	if s.local != nil && s.local.f.cursor.Load() < target && !isClosed(s.local.done) {
		return false
	}
	return true
}

// Clients returns the number of connected clients.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}
