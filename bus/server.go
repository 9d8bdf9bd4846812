package bus

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// Greeting is the text frame every client receives first, before it joins
// the fan-out (spec §2), byte for byte.
const Greeting = `{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`

// ErrServerClosed is returned by ListenAndServe, Serve and Emit after
// Shutdown.
var ErrServerClosed = errors.New("bus: server closed")

// Close reasons: the label of the closes metric and the log's reason.
const (
	reasonSlowConsumer  = "slow_consumer"
	reasonOversize      = "oversize"
	reasonProtocolError = "protocol_error"
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
)

// Server is an OVOS message bus: an http.Handler that upgrades its route to
// WebSocket connections and relays every message to every client, the
// sender included, in one order that all clients see.
//
// Besides GET on the route it answers GET /health with 200 "ok"; every
// other path is 404.
//
// All methods are safe for concurrent use.
type Server struct {
	opts     Options // the options New was given, with defaults
	log      *slog.Logger
	live     atomic.Pointer[liveOptions]
	hub      *hub
	m        *metrics
	greeting *ws.PreparedMessage

	closing  atomic.Bool
	closingC chan struct{} // closed when Shutdown starts
	done     chan struct{} // closed when Shutdown has finished
	wg       sync.WaitGroup

	mu         sync.Mutex
	clients    map[*client]struct{}
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
	s := &Server{
		opts:     o,
		log:      o.Logger,
		hub:      newHub(o.MaxQueueMessages, o.MaxQueueBytes),
		greeting: greeting,
		done:     make(chan struct{}),
		closingC: make(chan struct{}),
		clients:  make(map[*client]struct{}),
	}
	s.live.Store(newLive(o))
	s.m = newMetrics(s)
	s.httpSrv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: o.HandshakeTimeout,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
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
		s.metricsSrv = &http.Server{Handler: s.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		srv := s.metricsSrv
		s.mu.Unlock()
		go srv.Serve(ml)
	}
	go s.Serve(l)
	// Wait until Serve has registered the listener, so Addr works at once.
	for {
		s.mu.Lock()
		ok := s.listener != nil
		s.mu.Unlock()
		if ok || s.closing.Load() {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
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
	if tc := s.opts.TLSConfig; tc != nil {
		tc = tc.Clone()
		tc.NextProtos = []string{"http/1.1"}
		l = tls.NewListener(l, tc)
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listener = l
	s.mu.Unlock()
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

// ServeHTTP upgrades requests for the route, answers /health and refuses
// the rest with 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == s.opts.Route {
		s.serveWS(w, r)
		return
	}
	if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.closing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("shutting down"))
			return
		}
		w.Write([]byte("ok"))
		return
	}
	http.NotFound(w, r)
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	if s.closing.Load() {
		s.m.rejected(rejectShuttingDown)
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	live := s.live.Load()
	o := &live.opts
	perms, ok := authenticate(r, &o.Auth)
	if !ok {
		s.m.rejected(rejectAuth)
		s.log.Warn("Refused connection: missing or unknown token", "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="ovbus"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	maxSize := o.MaxMsgSize
	if maxSize <= 0 {
		maxSize = -1 // no limit
	}
	originRefused := false
	conn, err := ws.Accept(w, r, &ws.AcceptOptions{
		CheckOrigin: func(r *http.Request) bool {
			ok := o.originAllowed(r.Header.Get("Origin"))
			originRefused = !ok
			return ok
		},
		EnableCompression: !o.DisableCompression,
		Compression:       o.Compression,
		MaxMessageSize:    maxSize,
		MaxFrameSize:      maxSize,
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
	c := &client{
		s:      s,
		conn:   conn,
		addr:   r.RemoteAddr,
		perms:  perms,
		f:      newFollower(),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	// The client joins the log first, then gets the greeting, then its
	// writer starts: the greeting is the first frame it receives, and once
	// it has it, it is sure to get everything published afterwards (the
	// Tornado bus writes the greeting and adds the client in one step).
	if !s.addClient(c) {
		conn.CloseNow()
		return
	}
	conn.SetWriteDeadline(time.Now().Add(o.WriteTimeout))
	if err := conn.WritePrepared(s.greeting); err != nil {
		// The reader and writer below see the end at once.
		c.finish(reasonWriteError, "error", err.Error())
		conn.CloseNow()
	}
	s.log.Debug("Client connected", "remote", c.addr)
	defer s.wg.Done()
	go func() {
		defer s.wg.Done()
		c.writeLoop()
	}()
	c.readLoop()
	<-c.exited
}

// authenticate finds the permissions of the token a request presents, as
// ?token=... or Authorization: Bearer .... ok is false when the request must
// be refused. nil permissions allow everything.
func authenticate(r *http.Request, a *Auth) (perms *Permissions, ok bool) {
	if !a.Enabled() {
		return nil, true
	}
	tok := r.URL.Query().Get("token")
	if tok == "" {
		h := r.Header.Get("Authorization")
		if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			tok = strings.TrimSpace(h[7:])
		}
	}
	if tok == "" {
		return nil, !a.Required
	}
	var found *Permissions
	for k, p := range a.Tokens { // constant time per token: no early exit
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			p := p
			found = &p
		}
	}
	if found == nil {
		return nil, false
	}
	if found.Emit == nil && found.Receive == nil {
		return nil, true
	}
	return found, true
}

func (s *Server) addClient(c *client) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.clients[c] = struct{}{}
	s.wg.Add(2) // the client's reader and writer
	c.joinBytes = s.hub.join(c.f)
	c.written.Store(c.f.cursor.Load())
	s.m.connected()
	return true
}

func (s *Server) removeClient(c *client) {
	s.mu.Lock()
	_, ok := s.clients[c]
	delete(s.clients, c)
	s.mu.Unlock()
	if ok {
		s.m.disconnected()
	}
}

// relay runs the bus's rules on one frame a client (nil: in-process) sent
// and publishes it. JSON is looked at only when a rule needs it.
func (s *Server) relay(c *client, op ws.Opcode, b []byte) {
	live := s.live.Load()
	s.m.received(len(b))
	if s.closing.Load() {
		return // shutting down: nothing new is relayed
	}
	if c != nil && live.opts.MaxMsgSize > 0 && int64(len(b)) > live.opts.MaxMsgSize {
		// The limit was lowered by Apply after this client connected.
		if c.finish(reasonOversize, "size", len(b)) {
			c.conn.Close(ws.StatusMessageTooBig, "message too big") // on the reader goroutine
		}
		return
	}
	var mtype string
	typed := false
	if c != nil && c.perms != nil && c.perms.Emit != nil {
		mtype, typed = messageType(b), true
		if !c.perms.CanEmit(mtype) {
			s.m.rejected(rejectPermission)
			s.log.Warn("Dropped message: not allowed to emit", "remote", c.addr, "token", c.perms.Name, "msg_type", mtype)
			return
		}
	}
	if mayCarrySession(b) && sessionSuspect(b) {
		if rej, bad := checkCarrier(b); bad {
			s.rejectCarrier(c, rej)
			return
		}
	}
	if live.opts.Filter && s.log.Enabled(context.Background(), slog.LevelDebug) {
		if t, line, ok := filterLine(b); ok && !slices.Contains(live.opts.FilterLogs, t) {
			s.log.Debug(line)
		}
	}
	if live.needTypes && !typed {
		mtype = messageType(b)
	}
	s.publish(op, b, mtype)
}

// rejectCarrier drops a frame with a malformed session carrier and tells
// every client, the sender included (spec §3). The connection stays open.
func (s *Server) rejectCarrier(c *client, r rejection) {
	s.m.rejected(rejectMalformedCarrier)
	remote := "in-process"
	if c != nil {
		remote = c.addr
	}
	s.log.Warn("Dropped message with a malformed session carrier", "remote", remote, "msg_type", string(r.msgType))
	msg := rejectedMessage(r)
	mtype := ""
	if s.live.Load().needTypes {
		mtype = "ovos.session.rejected"
	}
	s.publish(ws.OpText, msg, mtype)
}

// publish encodes the frame once and appends it to the log.
func (s *Server) publish(op ws.Opcode, b []byte, mtype string) {
	pm, err := ws.NewPreparedMessage(op, b, s.opts.Compression)
	if err != nil {
		s.log.Error("Cannot encode message", "error", err)
		return
	}
	e := &entry{pm: pm, size: int64(len(pm.Frame(false))), born: s.hub.now(), mtype: mtype}
	s.hub.publish(e)
	s.m.published()
}

// Shutdown stops the bus: it stops accepting connections and relaying new
// frames, lets the writers flush what is queued for up to ShutdownTimeout
// (or until ctx ends), then drops every connection without a close frame, or
// closes it with 1001 when CloseFramesOnShutdown is set. It returns when the
// connections are gone, or ctx's error if ctx ends first.
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
	deadline := time.Now().Add(live.opts.ShutdownTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	target := s.hub.head.Load()
	for !s.flushed(target) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}

	s.mu.Lock()
	clients := slices.Collect(maps.Keys(s.clients))
	local := s.local
	s.mu.Unlock()
	for _, c := range clients {
		if !c.finish(reasonShutdown) {
			continue
		}
		if live.opts.CloseFramesOnShutdown {
			c.closeWithFrame(ws.StatusGoingAway, "bus shutting down")
		} else {
			c.conn.CloseNow()
		}
	}
	if local != nil {
		local.stop()
	}

	wait := make(chan struct{})
	go func() { s.wg.Wait(); close(wait) }()
	var err error
	select {
	case <-wait:
	case <-ctx.Done():
		for _, c := range clients {
			c.conn.CloseNow()
		}
		err = ctx.Err()
	}
	s.mu.Lock()
	if s.metricsSrv != nil {
		s.metricsSrv.Close()
	}
	s.mu.Unlock()
	close(s.done)
	return err
}

// flushed reports whether every client has written the log up to target.
func (s *Server) flushed(target uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.clients {
		if c.written.Load() < target && !c.isDone() {
			return false
		}
	}
	if s.local != nil && s.local.f.cursor.Load() < target && !s.local.stopped() {
		return false
	}
	return true
}

// Clients returns the number of connected clients.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}
