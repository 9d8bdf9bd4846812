package config

import (
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MiB is one mebibyte, the unit of max_msg_size.
const MiB = 1024 * 1024

// Config is the merged `websocket` section plus the bus's log level: every
// setting ovbus serve uses. Load fills it; Default returns the built-in
// values. The zero Config is not valid.
//
// A Config is a plain value: copy it with Clone before changing a shared one.
type Config struct {
	// Host is the address to bind (websocket.host).
	Host string
	// Port is the TCP port (websocket.port); 0 lets the system pick one.
	Port int
	// Route is the exact URL path served as a WebSocket (websocket.route).
	Route string
	// SSL serves wss:// on the same host, port and route (websocket.ssl).
	SSL bool
	// SSLCert and SSLKey are PEM files; unless both are set a self-signed
	// pair is generated or reused (see EnsureCertificate).
	SSLCert, SSLKey string
	// MaxMsgSizeMiB is the largest frame a client may send, in MiB
	// (websocket.max_msg_size); see MaxMsgSize for bytes.
	MaxMsgSizeMiB float64
	// Filter logs one DEBUG line per message (websocket.filter).
	Filter bool
	// FilterLogs lists message types left out of that line.
	FilterLogs []string
	// SharedConnection is read by clients only; the bus ignores it.
	SharedConnection bool

	// MaxQueueBytes bounds the bytes queued for one client.
	MaxQueueBytes int64
	// MaxQueueMessages bounds the messages queued for one client.
	MaxQueueMessages int
	// WriteTimeout bounds one write to a client.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds the HTTP upgrade of a new connection.
	HandshakeTimeout time.Duration
	// ShutdownTimeout bounds the flush of queued messages on SIGINT/SIGTERM.
	ShutdownTimeout time.Duration
	// CloseFramesOnShutdown sends 1001 close frames on shutdown instead of
	// dropping the connections (which makes OVOS clients reconnect).
	CloseFramesOnShutdown bool
	// Compression enables permessage-deflate for clients that offer it.
	Compression bool
	// MetricsAddress is where /metrics is served; "" turns it off.
	MetricsAddress string
	// AllowedOrigins lists the accepted Origin headers; empty accepts all.
	AllowedOrigins []string
	// Auth holds tokens and per-type permissions.
	Auth Auth
	// LogFile is the rotating log file; "" disables it.
	LogFile string
	// LogLevel is DEBUG, INFO, WARNING, ERROR or CRITICAL.
	LogLevel string
}

// Auth is the websocket.auth section. With Required false and no tokens
// (the default) every client may connect and do everything, as on the
// Tornado bus.
type Auth struct {
	// Required rejects clients that present no token.
	Required bool
	// Tokens maps a secret token to what its holder may do. A client that
	// presents a token not in this map is rejected, Required or not.
	Tokens map[string]Permissions
}

// Enabled reports whether any client can be restricted.
func (a Auth) Enabled() bool { return a.Required || len(a.Tokens) > 0 }

// Permissions says which message types a token holder may send and receive.
// A nil list (key absent) allows every type; an empty list allows none.
// Patterns are matched by MatchType.
type Permissions struct {
	// Name labels the token in logs and metrics instead of the secret.
	Name string
	// Emit lists the types the client may send; other frames are dropped.
	Emit []string
	// Receive lists the types delivered to the client.
	Receive []string
}

// CanEmit reports whether msgType may be sent under p.
func (p Permissions) CanEmit(msgType string) bool { return matchAny(p.Emit, msgType) }

// CanReceive reports whether msgType may be delivered under p.
func (p Permissions) CanReceive(msgType string) bool { return matchAny(p.Receive, msgType) }

func matchAny(patterns []string, msgType string) bool {
	if patterns == nil {
		return true
	}
	for _, pat := range patterns {
		if MatchType(pat, msgType) {
			return true
		}
	}
	return false
}

// MatchType reports whether a message type matches a permission pattern,
// in which '*' stands for any run of characters (':' and '.' included) and
// every other character stands for itself: "speak", "recognizer_loop:*",
// "*.response", "*". A frame without a type is matched as "", which only
// patterns made of '*' match.
func MatchType(pattern, msgType string) bool {
	// Greedy wildcard matching with one backtrack point: linear in practice.
	p, s := 0, 0
	star, mark := -1, 0
	for s < len(msgType) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, s
			p++
		case p < len(pattern) && pattern[p] == msgType[s]:
			p++
			s++
		case star >= 0:
			p = star + 1
			mark++
			s = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Built-in values: what a key is when no layer sets it.
const (
	DefaultHost                  = "127.0.0.1"
	DefaultPort                  = 8181
	DefaultRoute                 = "/core"
	DefaultMaxMsgSizeMiB         = 25
	DefaultMaxQueueBytes         = 64 * MiB
	DefaultMaxQueueMessages      = 100000
	DefaultWriteTimeout          = 10 * time.Second
	DefaultHandshakeTimeout      = 10 * time.Second
	DefaultShutdownTimeout       = 5 * time.Second
	DefaultLogLevel              = "INFO"
	DefaultSharedConnection      = true
	DefaultCompression           = true
	DefaultCloseFramesOnShutdown = false
)

// fallbackMaxMsgSizeMiB is what the Tornado handler uses when the merged
// configuration has no max_msg_size at all (a custom OVOS_DEFAULT_CONFIG
// without the key); the bundled defaults say 25.
const fallbackMaxMsgSizeMiB = 10

// DefaultFilterLogs returns the default websocket.filter_logs.
func DefaultFilterLogs() []string { return []string{"gui.status.request", "gui.page.upload"} }

// Default returns the configuration with every key at its built-in value and
// no log file. Tests and embedders start from it.
func Default() *Config {
	return &Config{
		Host:                  DefaultHost,
		Port:                  DefaultPort,
		Route:                 DefaultRoute,
		MaxMsgSizeMiB:         DefaultMaxMsgSizeMiB,
		FilterLogs:            DefaultFilterLogs(),
		SharedConnection:      DefaultSharedConnection,
		MaxQueueBytes:         DefaultMaxQueueBytes,
		MaxQueueMessages:      DefaultMaxQueueMessages,
		WriteTimeout:          DefaultWriteTimeout,
		HandshakeTimeout:      DefaultHandshakeTimeout,
		ShutdownTimeout:       DefaultShutdownTimeout,
		CloseFramesOnShutdown: DefaultCloseFramesOnShutdown,
		Compression:           DefaultCompression,
		AllowedOrigins:        []string{},
		LogLevel:              DefaultLogLevel,
	}
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	n := *c
	n.FilterLogs = slices.Clone(c.FilterLogs)
	n.AllowedOrigins = slices.Clone(c.AllowedOrigins)
	if c.Auth.Tokens != nil {
		n.Auth.Tokens = make(map[string]Permissions, len(c.Auth.Tokens))
		for k, p := range c.Auth.Tokens {
			n.Auth.Tokens[k] = Permissions{Name: p.Name, Emit: slices.Clone(p.Emit), Receive: slices.Clone(p.Receive)}
		}
	}
	return &n
}

// MaxMsgSize returns max_msg_size in bytes (MiB × 1024 × 1024).
func (c *Config) MaxMsgSize() int64 { return int64(c.MaxMsgSizeMiB * MiB) }

// Address returns host:port for net.Listen.
func (c *Config) Address() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// URL returns the bus URL clients dial: ws://127.0.0.1:8181/core, or wss://
// with SSL. A wildcard host is shown as 127.0.0.1.
func (c *Config) URL() string {
	scheme, host := "ws", c.Host
	if c.SSL {
		scheme = "wss"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(c.Port)) + c.Route
}

// FilterLogged reports whether the filter DEBUG line is written for msgType.
func (c *Config) FilterLogged(msgType string) bool {
	return c.Filter && !slices.Contains(c.FilterLogs, msgType)
}

// OriginAllowed reports whether a WebSocket upgrade carrying this Origin
// header is accepted: always when AllowedOrigins is empty or the header is
// absent (non-browser clients send none); otherwise when an entry matches it,
// compared without regard to case, '*' standing for any run of characters
// ("http://localhost:*").
func (c *Config) OriginAllowed(origin string) bool { return OriginAllowed(c.AllowedOrigins, origin) }

// OriginAllowed reports whether origin matches one of the allowed-origin
// patterns (case-insensitive, '*' as in MatchType). No patterns, or a request
// without an Origin header (a non-browser client), is always allowed.
func OriginAllowed(patterns []string, origin string) bool {
	if len(patterns) == 0 || origin == "" {
		return true
	}
	o := strings.ToLower(origin)
	for _, pat := range patterns {
		if MatchType(strings.ToLower(pat), o) {
			return true
		}
	}
	return false
}

// SlogLevel returns LogLevel as a log/slog level: CRITICAL is Error+4.
func (c *Config) SlogLevel() slog.Level {
	switch c.LogLevel {
	case "DEBUG":
		return slog.LevelDebug
	case "WARNING":
		return slog.LevelWarn
	case "ERROR":
		return slog.LevelError
	case "CRITICAL":
		return slog.LevelError + 4
	}
	return slog.LevelInfo
}

// logLevels maps accepted spellings to the canonical level names (Python's).
var logLevels = map[string]string{
	"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARNING", "WARN": "WARNING",
	"ERROR": "ERROR", "CRITICAL": "CRITICAL", "FATAL": "CRITICAL",
	"10": "DEBUG", "20": "INFO", "30": "WARNING", "40": "ERROR", "50": "CRITICAL",
}

// fieldErr is a validation failure of one key.
type fieldErr struct {
	key string // websocket key or "log_level"
	msg string
}

// Validate checks every field and each field against the others. Load calls
// it; call it after building or changing a Config by hand. The error is an
// *Error naming the key.
func (c *Config) Validate() error {
	if errs := c.check(); len(errs) > 0 {
		return &Error{Key: qualified(errs[0].key), Msg: errs[0].msg}
	}
	return nil
}

// qualified returns the dotted config path of a key named in a fieldErr.
func qualified(key string) string {
	if key == "log_level" {
		return "logging.log_level"
	}
	return "websocket." + key
}

func (c *Config) check() []fieldErr {
	var errs []fieldErr
	bad := func(key, format string, args ...any) {
		errs = append(errs, fieldErr{key, fmt.Sprintf(format, args...)})
	}
	if c.Host == "" {
		bad("host", "must not be empty (use 0.0.0.0 for every interface)")
	} else if strings.ContainsAny(c.Host, " /") {
		bad("host", "expected a host name or IP address, got %q", c.Host)
	}
	if c.Port < 0 || c.Port > 65535 {
		bad("port", "expected an integer 0-65535, got %d", c.Port)
	}
	if !strings.HasPrefix(c.Route, "/") {
		bad("route", "must start with \"/\", got %q", c.Route)
	} else if strings.ContainsAny(c.Route, "?# ") {
		bad("route", "must be a plain URL path, got %q", c.Route)
	}
	if !(c.MaxMsgSizeMiB > 0) || math.IsInf(c.MaxMsgSizeMiB, 0) || c.MaxMsgSizeMiB > 4096 {
		bad("max_msg_size", "expected a size in MiB greater than 0 and at most 4096, got %v", c.MaxMsgSizeMiB)
	}
	for i, t := range c.FilterLogs {
		if t == "" {
			bad("filter_logs", "entry %d is empty", i)
		}
	}
	if c.MaxQueueBytes <= 0 {
		bad("max_queue_bytes", "expected a number of bytes greater than 0, got %d", c.MaxQueueBytes)
	} else if c.MaxMsgSizeMiB > 0 && c.MaxQueueBytes < c.MaxMsgSize() {
		bad("max_queue_bytes", "%d is smaller than max_msg_size (%v MiB = %d bytes): a client could never be sent a full-size message",
			c.MaxQueueBytes, c.MaxMsgSizeMiB, c.MaxMsgSize())
	}
	if c.MaxQueueMessages <= 0 {
		bad("max_queue_messages", "expected an integer greater than 0, got %d", c.MaxQueueMessages)
	}
	if c.WriteTimeout <= 0 {
		bad("write_timeout", "expected seconds greater than 0, got %v", c.WriteTimeout.Seconds())
	}
	if c.HandshakeTimeout <= 0 {
		bad("handshake_timeout", "expected seconds greater than 0, got %v", c.HandshakeTimeout.Seconds())
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown_timeout", "expected seconds, 0 or more, got %v", c.ShutdownTimeout.Seconds())
	}
	if c.MetricsAddress != "" {
		h, p, err := net.SplitHostPort(c.MetricsAddress)
		n, perr := strconv.Atoi(p)
		switch {
		case err != nil:
			bad("metrics_address", "expected host:port such as \"127.0.0.1:9181\", got %q", c.MetricsAddress)
		case perr != nil || n < 0 || n > 65535:
			bad("metrics_address", "expected a port 0-65535 in %q", c.MetricsAddress)
		case n != 0 && n == c.Port && (h == c.Host || h == "" || c.Host == "0.0.0.0" || h == "0.0.0.0"):
			bad("metrics_address", "%q is the bus's own address", c.MetricsAddress)
		}
	}
	for i, o := range c.AllowedOrigins {
		if strings.TrimSpace(o) == "" {
			bad("allowed_origins", "entry %d is empty", i)
		}
	}
	if c.Auth.Required && len(c.Auth.Tokens) == 0 {
		bad("auth", "required is true but no tokens are configured: no client could connect")
	}
	for _, tok := range slices.Sorted(maps.Keys(c.Auth.Tokens)) {
		p := c.Auth.Tokens[tok]
		label := tokenLabel(tok, p)
		if strings.TrimSpace(tok) == "" {
			bad("auth", "tokens: a token must not be empty")
		}
		for _, pat := range slices.Concat(p.Emit, p.Receive) {
			if pat == "" {
				bad("auth", "tokens: %s: a permission pattern must not be empty", label)
			}
		}
	}
	if _, ok := logLevels[c.LogLevel]; !ok || c.LogLevel != logLevels[c.LogLevel] {
		bad("log_level", "expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got %q", c.LogLevel)
	}
	return errs
}

// tokenLabel names a token without revealing it.
func tokenLabel(tok string, p Permissions) string {
	if p.Name != "" {
		return strconv.Quote(p.Name)
	}
	return redact(tok)
}

// redact shows at most the first 4 characters of a secret.
func redact(secret string) string {
	if len(secret) >= 12 {
		return strconv.Quote(secret[:4] + "…")
	}
	return `"…"`
}
