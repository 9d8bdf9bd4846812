package config

import (
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/cluster/clusterconf"
)

// MiB is one mebibyte, the unit of max_msg_size.
const MiB = 1024 * 1024

// Config is the merged `websocket` section plus the bus's log level: every
// setting ovbus serve uses. Load fills it; Default returns the built-in
// values. The zero Config is not valid.
//
// A Config is a plain value: copy it with Clone before changing a shared one.
type Config struct {
	// Bus holds every key that is an option of the bus, in the bus's units
	// (bytes, durations; compression as DisableCompression; a
	// shutdown_timeout of 0 as a negative ShutdownTimeout). Its Addr,
	// TLSConfig and Logger are left empty: Options derives Addr, the serve
	// command sets the others.
	Bus bus.Options
	// SSL serves wss:// on the same host, port and route (websocket.ssl).
	SSL bool
	// SSLCert and SSLKey are PEM files; unless both are set a self-signed
	// pair is generated or reused (see EnsureCertificate).
	SSLCert, SSLKey string
	// SharedConnection is read by clients only; the bus ignores it.
	SharedConnection bool
	// LogFile is the rotating log file; "" disables it.
	LogFile string
	// LogLevel is DEBUG, INFO, WARNING, ERROR or CRITICAL.
	LogLevel string
	// MonitorAddress is where the browser monitor is served (package
	// monitor); "" turns it off.
	MonitorAddress string
	// MonitorAllowRemote lets MonitorAddress be a non-loopback address.
	MonitorAllowRemote bool
	// Cluster is websocket.cluster: several nodes as one bus (off unless
	// Cluster.Enabled). Use ClusterOptions for the node's options.
	Cluster clusterconf.Options
}

// Built-in values of the keys that are not bus options; those of the bus's
// keys are bus.Default* (see bus.Defaults).
const (
	DefaultLogLevel         = "INFO"
	DefaultSharedConnection = true
)

// fallbackMaxMsgSizeMiB is what the Tornado handler uses when the merged
// configuration has no max_msg_size at all (a custom OVOS_DEFAULT_CONFIG
// without the key); the bundled defaults say 25.
const fallbackMaxMsgSizeMiB = 10

// Default returns the configuration with every key at its built-in value and
// no log file. Tests and embedders start from it.
func Default() *Config {
	return &Config{
		Bus:              bus.Defaults(),
		SharedConnection: DefaultSharedConnection,
		LogLevel:         DefaultLogLevel,
		Cluster:          clusterconf.Defaults(),
	}
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	n := *c
	n.Bus.FilterLogs = slices.Clone(c.Bus.FilterLogs)
	n.Bus.AllowedOrigins = slices.Clone(c.Bus.AllowedOrigins)
	n.Bus.Auth = c.Bus.Auth.Clone()
	n.Cluster.Routes = slices.Clone(c.Cluster.Routes)
	return &n
}

// ClusterOptions returns the cluster node's options: Cluster with the bus's
// frame size, port and queue bounds. The serve command adds the logger.
func (c *Config) ClusterOptions() clusterconf.Options {
	o := c.Cluster
	o.Routes = slices.Clone(o.Routes)
	o.MaxMsgSize = c.Bus.MaxMsgSize
	o.DefaultPort = c.Bus.Port
	o.MaxPendingMessages = c.Bus.MaxQueueMessages
	o.MaxPendingBytes = c.Bus.MaxQueueBytes
	return o
}

// Options returns the bus's options: Bus with Addr set to Address. The
// serve command adds the TLS configuration and the logger.
func (c *Config) Options() bus.Options {
	o := c.Bus
	o.Addr = c.Address()
	return o
}

// Address returns host:port for net.Listen.
func (c *Config) Address() string { return net.JoinHostPort(c.Bus.Host, strconv.Itoa(c.Bus.Port)) }

// URL returns the bus URL clients dial: ws://127.0.0.1:8181/core, or wss://
// with SSL. A wildcard host is shown as 127.0.0.1.
func (c *Config) URL() string {
	scheme, host := "ws", c.Bus.Host
	if c.SSL {
		scheme = "wss"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(c.Bus.Port)) + c.Bus.Route
}

// FilterLogged reports whether the filter DEBUG line is written for msgType.
func (c *Config) FilterLogged(msgType string) bool {
	return c.Bus.Filter && !slices.Contains(c.Bus.FilterLogs, msgType)
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

// Validate checks every key and each key against the others. Load calls
// it; call it after building or changing a Config by hand. The error is an
// *Error naming the key.
func (c *Config) Validate() error {
	if k, below, _, msg := c.check(); k != nil {
		_, shown := c.belowKey(k, below)
		return &Error{Key: shown, Msg: msg}
	}
	return nil
}

// check returns the first key at fault, the keys below it that lead to
// the fault (bus.OptionError.Path: a token among them), the other keys of
// a fault between keys (with, their names), and what is wrong: the kinds'
// checks, then the bus's own (bus.Options.Validate), then the cluster's.
func (c *Config) check() (k *key, below, with []string, msg string) {
	for i := range keys {
		if msg := keys[i].kind.check(keys[i].field(c)); msg != "" {
			return &keys[i], nil, nil, msg
		}
	}
	var oe *bus.OptionError
	if err := c.Options().Validate(); errors.As(err, &oe) {
		if k := lookupKey(oe.Option); k != nil {
			return k, oe.Path, nil, oe.Msg
		}
		return &key{name: oe.Option, kind: kindString}, oe.Path, nil, oe.Msg
	}
	if o := c.ClusterOptions(); o.Enabled() && c.Bus.Auth.RoutesReplies() {
		return lookupKey("auth"), nil, nil, bus.ReplyRoutingClusterMsg
	}
	if o := c.ClusterOptions(); o.Enabled() {
		var ke *clusterconf.KeyError
		if err := o.Validate(); errors.As(err, &ke) {
			k := lookupKey(ke.Keys[0])
			if k == nil {
				k = &key{name: ke.Keys[0], kind: kindString}
			}
			msg := ke.Msg
			if len(ke.Keys) > 1 {
				others := make([]string, 0, len(ke.Keys)-1)
				for _, name := range ke.Keys[1:] {
					others = append(others, "websocket."+name)
				}
				msg += " (keys " + k.path() + ", " + strings.Join(others, ", ") + ")"
			}
			return k, nil, ke.Keys[1:], msg
		}
	}
	return nil, nil, nil, ""
}

// belowKey is the internal path and the shown name of the key below k that
// below leads to: websocket.auth.networks.10.0.0.0/8, or for a token
// websocket.auth.tokens["name"] (its name or Redact, never the token).
func (c *Config) belowKey(k *key, below []string) (path, shown string) {
	path, shown = join("websocket", k.name), k.path()
	for i, seg := range below {
		path = join(path, seg)
		if i == 1 && below[0] == "tokens" {
			shown += "[" + c.Bus.Auth.Tokens[seg].Label(seg) + "]"
			continue
		}
		shown += "." + seg
	}
	return path, shown
}
