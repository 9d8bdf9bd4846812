package monitor

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ovbus/ovbus/bus"
)

// Defaults of Options.
const (
	DefaultRowsPerSecond = 500
	DefaultInterval      = 200 * time.Millisecond
	DefaultMaxPayload    = 64 << 10
	// DefaultMaxPages bounds the pages open at once.
	DefaultMaxPages = 16
	// DefaultBytesPerSecond bounds the payload bytes a page gets per second
	// (beyond it, rows carry the first 512 bytes of their message).
	DefaultBytesPerSecond = 2 << 20
)

//go:embed assets/index.html assets/style.css assets/app.js assets/lib.js assets/chart.js
var assets embed.FS

// Options configures a Monitor. The zero value serves the page through
// ServeHTTP only, with the defaults.
type Options struct {
	// Addr is the address Start listens on (monitor_address), e.g.
	// "127.0.0.1:9182". It must be a loopback address unless AllowRemote.
	Addr string
	// AllowRemote serves other machines: Addr may be any address and
	// requests may name any Host (monitor_allow_remote). Without auth on the
	// bus, whoever reaches the page sees and sends everything.
	AllowRemote bool
	// RowsPerSecond caps the messages sent to one page per second; 0 means
	// DefaultRowsPerSecond.
	RowsPerSecond int
	// Interval is how often a page gets a batch; 0 means DefaultInterval.
	Interval time.Duration
	// MaxPayload is how much of one message a page gets; 0 means
	// DefaultMaxPayload.
	MaxPayload int
	// BytesPerSecond bounds the payload bytes a page gets per second; 0
	// means DefaultBytesPerSecond.
	BytesPerSecond int
	// MaxPages bounds the pages open at once (each is a follower of the
	// log); more are refused with 503. 0 means DefaultMaxPages.
	MaxPages int
	// Logger receives the monitor's log lines; nil discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.RowsPerSecond <= 0 {
		o.RowsPerSecond = DefaultRowsPerSecond
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.BytesPerSecond <= 0 {
		o.BytesPerSecond = DefaultBytesPerSecond
	}
	if o.MaxPages <= 0 {
		o.MaxPages = DefaultMaxPages
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Monitor serves the page for one bus. Its methods are safe for concurrent
// use.
type Monitor struct {
	bus    *bus.Server
	opts   Options
	log    *slog.Logger
	static http.Handler

	ctx    context.Context // cancelled by Shutdown: every page ends
	cancel context.CancelFunc
	pages  sync.WaitGroup // the open pages
	open   int            // how many, under mu

	mu sync.Mutex
	hs *http.Server
	ln net.Listener

	beforeNext func() // tests: runs before each read of the log
}

// New returns a monitor of s. It refuses an Addr that is not a loopback
// address unless o.AllowRemote.
func New(s *bus.Server, o Options) (*Monitor, error) {
	if s == nil {
		return nil, errors.New("monitor: no bus")
	}
	o = o.withDefaults()
	if o.Addr != "" && !o.AllowRemote {
		host, _, err := net.SplitHostPort(o.Addr)
		if err != nil {
			return nil, fmt.Errorf("monitor: address %q: %w", o.Addr, err)
		}
		if !loopbackHost(host) {
			return nil, fmt.Errorf("monitor: address %q is not a loopback address; set monitor_allow_remote to serve the monitor to other machines", o.Addr)
		}
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Monitor{
		bus:    s,
		opts:   o,
		log:    o.Logger.With("component", "monitor"),
		static: http.FileServerFS(sub),
		ctx:    ctx,
		cancel: cancel,
	}, nil
}

// loopbackHost reports whether host (no port) is "localhost", a name under
// .localhost, or a loopback IP.
func loopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Start listens on Options.Addr and serves in the background.
func (m *Monitor) Start() error {
	if m.opts.Addr == "" {
		return errors.New("monitor: no address to listen on")
	}
	ln, err := net.Listen("tcp", m.opts.Addr)
	if err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		ln.Close()
		return bus.ErrServerClosed
	}
	m.ln = ln
	m.hs = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelDebug)}
	go m.hs.Serve(ln)
	return nil
}

// Addr is the address Start listens on, nil before.
func (m *Monitor) Addr() net.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ln == nil {
		return nil
	}
	return m.ln.Addr()
}

// Shutdown closes the listener, ends every page (each is told why) and
// waits for them until ctx is done.
func (m *Monitor) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.cancel()
	hs := m.hs
	m.mu.Unlock()
	var err error
	if hs != nil {
		err = hs.Shutdown(ctx)
	}
	done := make(chan struct{})
	go func() {
		m.pages.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	return err
}

// ServeHTTP serves the page (GET /, its assets) and its WebSocket (/ws).
func (m *Monitor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.opts.AllowRemote && !m.localRequest(r) {
		http.Error(w, "the monitor answers loopback requests only (monitor_allow_remote)", http.StatusForbidden)
		return
	}
	if r.URL.Path == "/ws" {
		m.serveWS(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'")
	m.static.ServeHTTP(w, r)
}

// localRequest reports whether r comes from a loopback address and names a
// loopback Host: a page on another site that resolves its own name to
// 127.0.0.1 (DNS rebinding) still sends its own name as Host.
func (m *Monitor) localRequest(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if !loopbackHost(host) {
		return false
	}
	ra, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ra = r.RemoteAddr
	}
	ip := net.ParseIP(ra)
	return ip != nil && ip.IsLoopback()
}
