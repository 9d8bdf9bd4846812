package bus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/ovbus/ovbus/config"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// Built-in values used for zero Options fields. They are the OVOS defaults
// (spec §4) plus ovbus's own limits.
const (
	DefaultHost             = "127.0.0.1"
	DefaultPort             = 8181
	DefaultRoute            = "/core"
	DefaultMaxMsgSize       = 25 << 20 // websocket.max_msg_size: 25 MiB
	DefaultMaxQueueMessages = 100000
	DefaultMaxQueueBytes    = 64 << 20
	DefaultWriteTimeout     = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultShutdownTimeout  = 5 * time.Second
)

// DefaultFilterLogs returns the message types left out of the filter DEBUG
// line when Options.FilterLogs is nil (websocket.filter_logs).
func DefaultFilterLogs() []string { return []string{"gui.status.request", "gui.page.upload"} }

// Options configures a Server. The zero value is a drop-in ovos-messagebus:
// ws://127.0.0.1:8181/core, every origin, no authentication. The serve
// command fills it from the merged OVOS configuration; embedders fill what
// they need. New clones it, so the caller may reuse it.
type Options struct {
	// Addr is the listen address ("host:port"). When empty it is Host:Port.
	Addr string
	// Host and Port are websocket.host and websocket.port.
	Host string
	Port int
	// Route is the exact URL path upgraded to a WebSocket (websocket.route).
	Route string
	// TLSConfig, when set, serves wss:// on the same address (websocket.ssl).
	TLSConfig *tls.Config

	// MaxMsgSize is the largest message a client may send, in bytes
	// (websocket.max_msg_size × 1 MiB). A larger one closes the sender with
	// 1009 and is not relayed.
	MaxMsgSize int64

	// Filter writes one DEBUG line per relayed message (websocket.filter).
	Filter bool
	// FilterLogs are the message types left out of that line; nil means
	// DefaultFilterLogs.
	FilterLogs []string

	// MaxQueueMessages and MaxQueueBytes bound how far one client may fall
	// behind the bus. A client further behind is closed with 1008 "slow
	// consumer"; nobody else is slowed.
	MaxQueueMessages int
	MaxQueueBytes    int64
	// WriteTimeout bounds one batched write to a client; a client that does
	// not take its data within it is closed as a slow consumer. (A batch
	// may get up to 50 ms or a sixteenth of it less: the deadline is not
	// moved for every batch of a burst.)
	WriteTimeout time.Duration

	// HandshakeTimeout bounds the HTTP upgrade of a new connection.
	HandshakeTimeout time.Duration
	// ShutdownTimeout bounds the flush of queued messages in Shutdown; a
	// negative value drops the connections at once.
	ShutdownTimeout time.Duration
	// CloseFramesOnShutdown sends a 1001 close frame to every client on
	// shutdown. By default the connections are dropped without one, as the
	// Tornado bus does, because OVOS's Python client reconnects only after a
	// dropped connection (spec §8).
	CloseFramesOnShutdown bool

	// DisableCompression turns permessage-deflate off. When it is on,
	// clients that offer it get every message compressed once for all of them.
	DisableCompression bool
	// Compression sets the deflate level and threshold (zero: ws defaults).
	Compression ws.CompressionOptions

	// MetricsAddress, when set, serves Prometheus metrics at /metrics on a
	// listener of its own.
	MetricsAddress string

	// AllowedOrigins lists the accepted Origin headers ('*' matches any run
	// of characters, case is ignored). Empty accepts every origin, as
	// Tornado does. Requests without an Origin header are always accepted.
	AllowedOrigins []string

	// Auth restricts who may connect and what they may send and receive.
	// The zero value allows everything.
	Auth Auth

	// Sequencer, when set, orders the frames that passed the rules (see Sequencer); fixed at New.
	Sequencer Sequencer

	// Logger receives the bus's log lines; nil means slog.Default() with the
	// attribute logger=bus.
	Logger *slog.Logger
}

// Auth is the optional access control of the bus.
type Auth struct {
	// Required rejects clients that present no token.
	Required bool
	// Tokens maps a secret token (sent as ?token=... or Authorization:
	// Bearer ...) to what its holder may do. An unknown token is rejected.
	Tokens map[string]Permissions
}

// Enabled reports whether any client can be restricted.
func (a Auth) Enabled() bool { return a.Required || len(a.Tokens) > 0 }

// Permissions says which message types a client may send and receive: the
// config package's type, with its pattern rules (a nil list allows every
// type, an empty one none, '*' stands for any run of characters, a frame
// without a type is matched as "").
type Permissions = config.Permissions

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
	if o.FilterLogs == nil {
		o.FilterLogs = DefaultFilterLogs()
	} else {
		o.FilterLogs = slices.Clone(o.FilterLogs)
	}
	if o.MaxQueueMessages == 0 {
		o.MaxQueueMessages = DefaultMaxQueueMessages
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	o.AllowedOrigins = slices.Clone(o.AllowedOrigins)
	if o.Auth.Tokens != nil {
		toks := make(map[string]Permissions, len(o.Auth.Tokens))
		for k, p := range o.Auth.Tokens {
			toks[k] = Permissions{Name: p.Name, Emit: slices.Clone(p.Emit), Receive: slices.Clone(p.Receive)}
		}
		o.Auth.Tokens = toks
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("logger", "bus")
	}
	return o
}

// validate checks the options after withDefaults, field against field.
func (o *Options) validate() error {
	var errs []error
	if !strings.HasPrefix(o.Route, "/") {
		errs = append(errs, fmt.Errorf("route %q must start with /", o.Route))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is not in 0..65535", o.Port))
	}
	if o.MaxMsgSize < 0 {
		errs = append(errs, fmt.Errorf("max message size %d is negative", o.MaxMsgSize))
	}
	if o.MaxQueueMessages < 1 {
		errs = append(errs, fmt.Errorf("max queue messages %d must be at least 1", o.MaxQueueMessages))
	}
	if o.MaxQueueMessages > 1<<26 {
		errs = append(errs, fmt.Errorf("max queue messages %d is over %d", o.MaxQueueMessages, 1<<26))
	}
	if o.MaxQueueBytes < 1 {
		errs = append(errs, fmt.Errorf("max queue bytes %d must be positive", o.MaxQueueBytes))
	}
	if o.WriteTimeout < 0 || o.HandshakeTimeout < 0 {
		errs = append(errs, errors.New("write and handshake timeouts must not be negative"))
	}
	for tok := range o.Auth.Tokens {
		if tok == "" {
			errs = append(errs, errors.New("auth: empty token"))
		}
	}
	return errors.Join(errs...)
}

// originAllowed reports whether an upgrade with this Origin is accepted.
func (o *Options) originAllowed(origin string) bool {
	return config.OriginAllowed(o.AllowedOrigins, origin)
}
