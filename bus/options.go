package bus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// Built-in values used for zero Options fields. They are the OVOS defaults
// (docs/protocol.md §4) plus ovbus's own limits. Package config reads them
// from here: they have no other copy.
const (
	DefaultHost             = "127.0.0.1"
	DefaultPort             = 8181
	DefaultRoute            = "/core"
	DefaultMaxMsgSize       = 25 << 20 // websocket.max_msg_size: 25 MiB
	DefaultMaxQueueMessages = 100000
	DefaultMaxQueueBytes    = 64 << 20
	DefaultMaxInflightBytes = 80 << 20 // see DefaultInflightBytes
	DefaultWriteTimeout     = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultShutdownTimeout  = 5 * time.Second
	DefaultSendBuffer       = 256 << 10
	// DefaultCompressionContext is 4 KiB: a few OVOS messages, most of
	// the gain of the full 32 KiB window at a fraction of its cost.
	DefaultCompressionContext = 4 << 10
	// DefaultMaxConnections is the ceiling of clients when the open-file
	// limit is not known; otherwise it is that limit minus
	// ConnectionReserve.
	DefaultMaxConnections = 10000
	// ConnectionReserve is how many file descriptors the default
	// max_connections leaves for everything else: the listeners, /health
	// and /metrics requests, the log files, the TLS files, the cluster.
	ConnectionReserve = 64
)

// DefaultMaxConnectionsFor returns the max_connections used when it is
// zero, for an open-file limit (0: unknown).
func DefaultMaxConnectionsFor(fileLimit uint64) int {
	if fileLimit == 0 {
		return DefaultMaxConnections
	}
	if fileLimit <= 2*ConnectionReserve {
		return int(max(fileLimit/2, 1))
	}
	return int(min(fileLimit-ConnectionReserve, 1<<30))
}

// Limits of the options, checked by Validate.
const (
	MaxMsgSizeLimit       = 4096 << 20 // the largest MaxMsgSize: 4 GiB
	MaxQueueMessagesLimit = 1 << 26    // the largest MaxQueueMessages
)

// DefaultFilterLogs returns the message types left out of the filter DEBUG
// line when Options.FilterLogs is nil (websocket.filter_logs).
func DefaultFilterLogs() []string { return []string{"gui.status.request", "gui.page.upload"} }

// DefaultQueueBytes returns the MaxQueueBytes used when it is zero:
// DefaultMaxQueueBytes, or twice maxMsgSize when that does not fit in it,
// so that a client can always be sent a full-size message.
func DefaultQueueBytes(maxMsgSize int64) int64 {
	if maxMsgSize > DefaultMaxQueueBytes {
		return 2 * maxMsgSize
	}
	return DefaultMaxQueueBytes
}

// DefaultInflightBytes returns the MaxInflightBytes used when it is zero:
// DefaultMaxInflightBytes, or three times maxMsgSize when that is larger.
// A compressed message of the limit holds up to twice its size while it is
// read (its compressed bytes and the inflated message), so one such
// message always passes with room for everyone else's, and clients sending
// deflate bombs together hold at most this much, not the limit each.
func DefaultInflightBytes(maxMsgSize int64) int64 {
	return max(DefaultMaxInflightBytes, 3*maxMsgSize)
}

// Options configures a Server. The zero value is a drop-in ovos-messagebus:
// ws://127.0.0.1:8181/core, every origin, every client on loopback trusted
// with everything (and any other refused: see Auth). The serve
// command fills it from the merged OVOS configuration (package config);
// embedders fill what they need. New clones it, so the caller may reuse it.
//
// Each field's tag `ovbus:"name,reload"` gives its name in the configuration
// (docs/protocol.md §4), which Diff, Apply and Validate use, and says whether
// Apply changes it on a running server ("live") or keeps it until a restart
// ("restart"). A field without a tag is restart under its Go name; "-" is
// not an option (Apply always keeps it). Adding a field here and a row to
// package config's key table is all a new configuration key takes.
type Options struct {
	// Addr is the listen address ("host:port"). When empty it is Host:Port.
	Addr string `ovbus:"address,restart"`
	// Host and Port are websocket.host and websocket.port.
	Host string `ovbus:"host,restart"`
	Port int    `ovbus:"port,restart"`
	// Route is the exact URL path upgraded to a WebSocket (websocket.route).
	Route string `ovbus:"route,restart"`
	// TLSConfig, when set, serves wss:// on the same address (websocket.ssl).
	TLSConfig *tls.Config `ovbus:"ssl,restart"`

	// MaxMsgSize is the largest message a client may send, in bytes
	// (websocket.max_msg_size × 1 MiB). A larger one closes the sender with
	// 1009 and is not relayed. Lowered by Apply, it applies to connected
	// clients too.
	MaxMsgSize int64 `ovbus:"max_msg_size,live"`
	// MaxInflightBytes bounds what all clients together may hold of the
	// messages being read from them (a ws.Budget shared by every
	// connection): a message over 64 KiB (ws.BudgetFree) that would take the total past it
	// closes its sender with 1013 "try again later" and is counted in
	// ovbus_inflight_refused_total. Zero is DefaultInflightBytes(MaxMsgSize).
	MaxInflightBytes int64 `ovbus:"max_inflight_bytes,restart"`

	// Filter writes one DEBUG line per relayed message (websocket.filter).
	Filter bool `ovbus:"filter,live"`
	// FilterLogs are the message types left out of that line; nil means
	// DefaultFilterLogs.
	FilterLogs []string `ovbus:"filter_logs,live"`

	// MaxQueueMessages and MaxQueueBytes bound how far one client may fall
	// behind the bus, and so what the fan-out log holds. A client further
	// behind is closed as a slow consumer (docs/protocol.md §3); nobody else
	// loses a message. The bytes are what the log really holds, compressed
	// copies for deflate clients included, so with deflate clients connected
	// a client may fall less far behind (down to about half). A client that
	// drains but lags by more than half a bound slows the socket senders (by
	// at most 2 ms per message, or the message's size at 16 MiB/s) until it
	// catches up; one that lags that far and takes nothing for a tenth of
	// WriteTimeout is cut (hub.pace). A zero MaxQueueBytes is
	// DefaultQueueBytes(MaxMsgSize).
	MaxQueueMessages int   `ovbus:"max_queue_messages,live"`
	MaxQueueBytes    int64 `ovbus:"max_queue_bytes,live"`
	// WriteTimeout bounds one batched write to a client; a client that does
	// not take its data within it is closed as a slow consumer. (A batch
	// may get up to 50 ms or a sixteenth of it less: the deadline is not
	// moved for every batch of a burst.)
	WriteTimeout time.Duration `ovbus:"write_timeout,live"`

	// MaxConnections is the most clients connected at once; one more gets
	// HTTP 503 (with Retry-After) before the upgrade, counted in
	// ovbus_rejected_total{reason="max_connections"}. Zero is the
	// process's open-file limit (raised to its hard limit at New) minus
	// ConnectionReserve, so that /health, /metrics and the bus's own files
	// still get a descriptor when the bus is full. Apply changes it for new
	// connections.
	MaxConnections int `ovbus:"max_connections,live"`

	// SendBuffer is the kernel send buffer of each client's socket
	// (SO_SNDBUF), in bytes. Linux's autotuning grows it up to 4 MiB, which
	// a client that reads nothing keeps pinned, outside the queue bounds,
	// until it is cut; a fixed 256 KiB (Linux books twice that) still
	// covers a gigabit link with 2 ms of round trip, far more than loopback
	// or a LAN needs. The kernel caps it at net.core.wmem_max (208 KiB on
	// a stock kernel). Apply changes it for new connections.
	SendBuffer int64 `ovbus:"send_buffer,live"`

	// HandshakeTimeout bounds the HTTP upgrade of a new connection: reading
	// the request's headers (net/http's ReadHeaderTimeout, fixed when the
	// server is made, hence restart) and writing the 101 response.
	HandshakeTimeout time.Duration `ovbus:"handshake_timeout,restart"`
	// ShutdownTimeout bounds Shutdown: the flush of queued messages, then
	// the close frames (the flush stops up to a second before, a quarter
	// of it at most); a negative value drops the connections at once.
	ShutdownTimeout time.Duration `ovbus:"shutdown_timeout,live"`
	// CloseFramesOnShutdown sends a 1001 close frame to every client on
	// shutdown. By default the connections are dropped without one, as the
	// Tornado bus does, because OVOS's Python client reconnects only after a
	// dropped connection (docs/protocol.md §8).
	CloseFramesOnShutdown bool `ovbus:"close_frames_on_shutdown,live"`

	// DisableCompression turns permessage-deflate off. When it is on,
	// clients that offer it get every message compressed once for all of
	// them. Both compression fields need a restart: the greeting and every
	// published frame are encoded with the settings New was given, and a
	// connection keeps what it negotiated.
	DisableCompression bool `ovbus:"compression,restart"`
	// Compression sets the deflate level and threshold (zero: ws defaults).
	Compression ws.CompressionOptions `ovbus:"compression,restart"`
	// CompressionContext is how many bytes of what a deflate client was sent
	// its next messages are compressed against, where the client allows it
	// (context takeover, ws.CompressionOptions.Context): small, repetitive
	// OVOS messages shrink to a fraction, for this many bytes kept per such
	// client and one compression per client and message instead of one per
	// message. 0 means DefaultCompressionContext; a negative value compresses
	// each message once for every deflate client, without context. Apply
	// changes it for new connections.
	CompressionContext int `ovbus:"compression_context,live"`

	// MetricsAddress, when set, serves Prometheus metrics at /metrics on a
	// listener of its own.
	MetricsAddress string `ovbus:"metrics_address,restart"`

	// AllowedOrigins lists the accepted Origin headers ('*' matches any run
	// of characters, case is ignored; see OriginAllowed). Empty accepts
	// every origin, as Tornado does. Requests without an Origin header are
	// always accepted. Apply changes it for new connections.
	AllowedOrigins []string `ovbus:"allowed_origins,live"`

	// Auth says who may connect and what they may send and receive (see
	// Auth). The zero value trusts loopback with everything and refuses
	// other addresses. Apply changes it for new connections.
	Auth Auth `ovbus:"auth,live"`

	// Sequencer, when set, orders the frames that passed the rules (see Sequencer); fixed at New.
	Sequencer Sequencer

	// Logger receives the bus's log lines; nil means slog.Default() with the
	// attribute logger=bus. Apply keeps the running one (change the level
	// through its handler).
	Logger *slog.Logger `ovbus:"-"`
}

// Defaults returns the options a zero Options stands for: every field at
// its default, except Addr (Host:Port) and Logger, which New derives.
func Defaults() Options {
	o := Options{}.withDefaults()
	o.Addr, o.Logger = "", nil
	return o
}

// withDefaults returns a copy of o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Port == 0 && o.Addr == "" {
		o.Port = DefaultPort
	}
	if o.Addr == "" {
		o.Addr = net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	}
	if o.Route == "" {
		o.Route = DefaultRoute
	}
	if o.MaxMsgSize == 0 {
		o.MaxMsgSize = DefaultMaxMsgSize
	}
	if o.MaxInflightBytes == 0 {
		o.MaxInflightBytes = DefaultInflightBytes(o.MaxMsgSize)
	}
	if o.FilterLogs == nil {
		o.FilterLogs = DefaultFilterLogs()
	} else {
		o.FilterLogs = slices.Clone(o.FilterLogs)
	}
	if o.MaxQueueMessages == 0 {
		o.MaxQueueMessages = DefaultMaxQueueMessages
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = DefaultQueueBytes(o.MaxMsgSize)
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.CompressionContext == 0 {
		o.CompressionContext = DefaultCompressionContext
	}
	if o.SendBuffer == 0 {
		o.SendBuffer = DefaultSendBuffer
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if len(o.AllowedOrigins) == 0 {
		o.AllowedOrigins = nil // empty and nil both accept every origin
	} else {
		o.AllowedOrigins = slices.Clone(o.AllowedOrigins)
	}
	o.Auth = o.Auth.Clone()
	if o.Auth.Loopback == "" {
		o.Auth.Loopback = DefaultLoopback
	}
	if o.Auth.Anyone == "" {
		o.Auth.Anyone = DefaultAnyone
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("logger", "bus")
	}
	return o
}

// An OptionError is an option New, Apply or Validate cannot use. Option
// names it as the configuration does (docs/protocol.md §4), so that package
// config can point at the file and line that set it.
type OptionError struct {
	Option string // "port", "max_queue_bytes", "auth"
	Msg    string // what is wrong and what was expected
	// Path, when set, leads to the fault below Option, as the
	// configuration's keys: ["networks", "10.0.0.0/8"]. Under "tokens" it
	// holds the token itself: never print it (Msg names the token safely).
	Path []string
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Msg }

// Validate checks o as New would, with zero fields at their defaults: each
// field, then field against field. The error joins one *OptionError per
// fault, in field order (read the first with errors.As).
func (o Options) Validate() error {
	d := o.withDefaults()
	return d.validate()
}

// validate checks the options after withDefaults.
func (o *Options) validate() error {
	var errs []error
	bad := func(option, format string, args ...any) {
		errs = append(errs, &OptionError{Option: option, Msg: fmt.Sprintf(format, args...)})
	}
	if strings.ContainsAny(o.Host, " /") {
		bad("host", "expected a host name or IP address, got %q", o.Host)
	}
	if o.Port < 0 || o.Port > 65535 {
		bad("port", "expected an integer 0-65535, got %d", o.Port)
	}
	if !strings.HasPrefix(o.Route, "/") {
		bad("route", "must start with \"/\", got %q", o.Route)
	} else if strings.ContainsAny(o.Route, "?# ") {
		bad("route", "must be a plain URL path, got %q", o.Route)
	}
	if o.MaxMsgSize < 0 || o.MaxMsgSize > MaxMsgSizeLimit {
		bad("max_msg_size", "expected a number of bytes greater than 0 and at most %d, got %d", int64(MaxMsgSizeLimit), o.MaxMsgSize)
	}
	if o.MaxInflightBytes < o.MaxMsgSize {
		bad("max_inflight_bytes", "%d is smaller than max_msg_size (%d bytes): a full-size message could never be read",
			o.MaxInflightBytes, o.MaxMsgSize)
	}
	for i, t := range o.FilterLogs {
		if t == "" {
			bad("filter_logs", "entry %d is empty", i)
		}
	}
	if o.MaxQueueMessages < 1 || o.MaxQueueMessages > MaxQueueMessagesLimit {
		bad("max_queue_messages", "expected an integer greater than 0 and at most %d, got %d", MaxQueueMessagesLimit, o.MaxQueueMessages)
	}
	if o.MaxQueueBytes < 1 {
		bad("max_queue_bytes", "expected a number of bytes greater than 0, got %d", o.MaxQueueBytes)
	} else if o.MaxQueueBytes < o.MaxMsgSize {
		bad("max_queue_bytes", "%d is smaller than max_msg_size (%d bytes): a client could never be sent a full-size message",
			o.MaxQueueBytes, o.MaxMsgSize)
	}
	if o.WriteTimeout < 0 {
		bad("write_timeout", "expected seconds greater than 0, got %v", o.WriteTimeout.Seconds())
	}
	if o.MaxConnections < 0 {
		bad("max_connections", "expected an integer greater than 0, got %d", o.MaxConnections)
	}
	if o.CompressionContext > 32<<10 {
		bad("compression_context", "expected a number of bytes from 0 (none) to 32768 (the deflate window), got %d", o.CompressionContext)
	}
	if o.SendBuffer < 4096 || o.SendBuffer > 64<<20 {
		bad("send_buffer", "expected a number of bytes from 4096 to %d, got %d", 64<<20, o.SendBuffer)
	}
	if o.HandshakeTimeout < 0 {
		bad("handshake_timeout", "expected seconds greater than 0, got %v", o.HandshakeTimeout.Seconds())
	}
	if o.MetricsAddress != "" {
		h, p, err := net.SplitHostPort(o.MetricsAddress)
		n, perr := strconv.Atoi(p)
		bh, bp, _ := net.SplitHostPort(o.Addr)
		busPort, _ := strconv.Atoi(bp)
		switch {
		case err != nil:
			bad("metrics_address", "expected host:port such as \"127.0.0.1:9181\", got %q", o.MetricsAddress)
		case perr != nil || n < 0 || n > 65535:
			bad("metrics_address", "expected a port 0-65535 in %q", o.MetricsAddress)
		case n != 0 && n == busPort && (h == bh || h == "" || bh == "" || bh == "0.0.0.0" || h == "0.0.0.0"):
			bad("metrics_address", "%q is the bus's own address", o.MetricsAddress)
		}
	}
	for i, origin := range o.AllowedOrigins {
		if strings.TrimSpace(origin) == "" {
			bad("allowed_origins", "entry %d is empty", i)
		}
	}
	o.Auth.validate(func(path []string, format string, args ...any) {
		errs = append(errs, &OptionError{"auth", fmt.Sprintf(format, args...), path})
	})
	if o.Sequencer != nil && o.Auth.RoutesReplies() {
		bad("auth", ReplyRoutingClusterMsg)
	}
	return errors.Join(errs...)
}

// acceptCompression is what a new connection compresses with: the level
// and threshold, and the context kept per client.
func (o *Options) acceptCompression() ws.CompressionOptions {
	co := o.Compression
	co.Context = max(o.CompressionContext, 0) // negative: none
	return co
}

// cutGrace is how long a client that fell behind is given before it is
// cut: a write blocked on it when its queue bound cut it gets this much
// more (session.onCut), and a client half its bound behind that takes
// nothing for this long is cut (hub.pressured). A tenth of WriteTimeout:
// long enough for a reader that is merely slow, short enough that a
// stalled one does not pin its buffers for the whole write timeout.
func (o *Options) cutGrace() time.Duration { return o.WriteTimeout / 10 }

func (o *Options) originAllowed(origin string) bool {
	return OriginAllowed(o.AllowedOrigins, origin)
}
