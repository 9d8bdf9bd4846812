package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/cluster/clusterconf"
)

// key is one row of the key table: a configuration key and everything
// config does with it. Decoding, the OVOS_BUS_* variables, the flags,
// provenance, the known-key check, Print, Diff and the flags' help are all
// driven by keys; no other list of keys exists in this package.
//
// To add a key:
//
//  1. If the bus reads it, add the field to bus.Options with its tag
//     `ovbus:"name,live"` or `ovbus:"name,restart"` (the bus owns its
//     default, its checks and whether it reloads live) and add a row here
//     whose bus returns a pointer to that field.
//  2. If only config or the serve command reads it (like log_file), add the
//     field to Config and a row whose own returns a pointer to it, with its
//     reload.
//
// Pick the kind that converts the key's values (or add one in kinds.go);
// env and flag may be empty. TestKeysReachTheBus checks the rows against
// bus.Options.
type key struct {
	name string   // the websocket key; "log_level" is logging.bus.log_level
	env  []string // its OVOS_BUS_* variables, lowest priority first
	flag string   // its flag, without dashes
	kind *kind
	// bus points at the bus.Options field the key sets; nil for a key of
	// config's own.
	bus func(*bus.Options) any
	// own points at the Config field of a key that is not a bus option.
	own func(*Config) any
	// reload says when a change to a key of config's own takes effect; a
	// bus key's comes from bus.OptionReload.
	reload bus.Reload
	doc    string // the flag's help: what the key means
}

// keys is the key table, in the order Print shows the keys.
var keys = []key{
	{name: "host", env: env1("OVOS_BUS_HOST"), flag: "host", kind: kindHost,
		bus: func(o *bus.Options) any { return &o.Host }, doc: "bind address"},
	{name: "port", env: env1("OVOS_BUS_PORT"), flag: "port", kind: kindPort,
		bus: func(o *bus.Options) any { return &o.Port }, doc: "TCP port, 0 for any free port"},
	{name: "route", env: env1("OVOS_BUS_ROUTE"), flag: "route", kind: kindString,
		bus: func(o *bus.Options) any { return &o.Route }, doc: "URL path of the bus"},
	{name: "ssl", env: env1("OVOS_BUS_USE_SSL"), flag: "ssl", kind: kindBool,
		own: func(c *Config) any { return &c.SSL }, reload: bus.Restart, doc: "serve wss://"},
	{name: "ssl_cert", env: env1("OVOS_BUS_SSL_CERT"), flag: "ssl-cert", kind: kindFile,
		own: func(c *Config) any { return &c.SSLCert }, reload: bus.Restart, doc: "PEM certificate file"},
	{name: "ssl_key", env: env1("OVOS_BUS_SSL_KEY"), flag: "ssl-key", kind: kindFile,
		own: func(c *Config) any { return &c.SSLKey }, reload: bus.Restart, doc: "PEM key file"},
	{name: "max_msg_size", env: env1("OVOS_BUS_MAX_MSG_SIZE"), flag: "max-msg-size", kind: kindMiB,
		bus: func(o *bus.Options) any { return &o.MaxMsgSize }, doc: "largest message in MiB"},
	{name: "max_inflight_bytes", env: env1("OVOS_BUS_MAX_INFLIGHT_BYTES"), flag: "max-inflight-bytes", kind: kindBytes,
		bus: func(o *bus.Options) any { return &o.MaxInflightBytes }, doc: "bytes all clients together may hold of messages being read"},
	{name: "filter", env: env1("OVOS_BUS_FILTER"), flag: "filter", kind: kindBool,
		bus: func(o *bus.Options) any { return &o.Filter }, doc: "log one DEBUG line per message"},
	{name: "filter_logs", env: env1("OVOS_BUS_FILTER_LOGS"), flag: "filter-logs", kind: kindList,
		bus: func(o *bus.Options) any { return &o.FilterLogs }, doc: "comma-separated types left out of the filter log"},
	{name: "shared_connection", kind: kindBool,
		own: func(c *Config) any { return &c.SharedConnection }, reload: bus.Live, doc: "read by clients only"},
	{name: "max_queue_bytes", env: env1("OVOS_BUS_MAX_QUEUE_BYTES"), flag: "max-queue-bytes", kind: kindBytes,
		bus: func(o *bus.Options) any { return &o.MaxQueueBytes }, doc: "bytes queued per client before it is dropped"},
	{name: "max_queue_messages", env: []string{"OVOS_BUS_MSG_BUFFER_CAPACITY", "OVOS_BUS_MAX_QUEUE_MESSAGES"}, flag: "max-queue-messages", kind: kindCount,
		bus: func(o *bus.Options) any { return &o.MaxQueueMessages }, doc: "messages queued per client before it is dropped"},
	{name: "write_timeout", env: env1("OVOS_BUS_WRITE_TIMEOUT"), flag: "write-timeout", kind: kindSeconds,
		bus: func(o *bus.Options) any { return &o.WriteTimeout }, doc: "seconds one write to a client may take"},
	{name: "max_connections", env: env1("OVOS_BUS_MAX_CONNECTIONS"), flag: "max-connections", kind: kindCountOrZero,
		bus: func(o *bus.Options) any { return &o.MaxConnections }, doc: "most clients at once, 0 for the open-file limit minus 64"},
	{name: "send_buffer", env: env1("OVOS_BUS_SEND_BUFFER"), flag: "send-buffer", kind: kindBytes,
		bus: func(o *bus.Options) any { return &o.SendBuffer }, doc: "kernel send buffer per client in bytes (SO_SNDBUF)"},
	{name: "handshake_timeout", env: env1("OVOS_BUS_HANDSHAKE_TIMEOUT"), flag: "handshake-timeout", kind: kindSeconds,
		bus: func(o *bus.Options) any { return &o.HandshakeTimeout }, doc: "seconds a WebSocket upgrade may take"},
	{name: "shutdown_timeout", env: env1("OVOS_BUS_SHUTDOWN_TIMEOUT"), flag: "shutdown-timeout", kind: kindDrain,
		bus: func(o *bus.Options) any { return &o.ShutdownTimeout }, doc: "seconds to flush queues on shutdown"},
	{name: "close_frames_on_shutdown", env: env1("OVOS_BUS_CLOSE_FRAMES_ON_SHUTDOWN"), flag: "close-frames-on-shutdown", kind: kindBool,
		bus: func(o *bus.Options) any { return &o.CloseFramesOnShutdown }, doc: "send 1001 close frames on shutdown"},
	{name: "compression", env: env1("OVOS_BUS_COMPRESSION"), flag: "compression", kind: kindNotBool,
		bus: func(o *bus.Options) any { return &o.DisableCompression }, doc: "permessage-deflate for clients that offer it"},
	{name: "compression_context", env: env1("OVOS_BUS_COMPRESSION_CONTEXT"), flag: "compression-context", kind: kindOffZero,
		bus: func(o *bus.Options) any { return &o.CompressionContext }, doc: "bytes of context kept per deflate client (context takeover), 0 for none"},
	{name: "metrics_address", env: env1("OVOS_BUS_METRICS_ADDRESS"), flag: "metrics-address", kind: kindString,
		bus: func(o *bus.Options) any { return &o.MetricsAddress }, doc: "host:port for /metrics, empty for none"},
	{name: "allowed_origins", env: env1("OVOS_BUS_ALLOWED_ORIGINS"), flag: "allowed-origins", kind: kindList,
		bus: func(o *bus.Options) any { return &o.AllowedOrigins }, doc: "comma-separated accepted Origin headers, empty for all"},
	{name: "auth", kind: kindAuth,
		bus: func(o *bus.Options) any { return &o.Auth }, doc: "who may connect, and what each client may send and receive"},
	{name: "monitor_address", env: env1("OVOS_BUS_MONITOR_ADDRESS"), flag: "monitor-address", kind: kindString,
		own: func(c *Config) any { return &c.MonitorAddress }, reload: bus.Restart, doc: "host:port for the browser monitor, empty for none"},
	{name: "monitor_allow_remote", env: env1("OVOS_BUS_MONITOR_ALLOW_REMOTE"), flag: "monitor-allow-remote", kind: kindBool,
		own: func(c *Config) any { return &c.MonitorAllowRemote }, reload: bus.Restart, doc: "serve the monitor on a non-loopback address"},
	{name: "log_file", env: env1("OVOS_BUS_LOG_FILE"), flag: "log-file", kind: kindString,
		own: func(c *Config) any { return &c.LogFile }, reload: bus.Restart, doc: "log file, empty for none"},

	// websocket.cluster: several nodes as one bus over NATS (package
	// cluster owns the defaults and the checks). Off unless nats_url,
	// listen or routes is set; every key takes a restart.
	clusterKey("name", kindString, func(o *clusterconf.Options) any { return &o.Name }, "nodes with the same name form one bus"),
	clusterKey("node_name", kindString, func(o *clusterconf.Options) any { return &o.NodeName }, "this node's name, unique in the cluster; empty for <hostname>-<port>"),
	clusterKey("order", kindString, func(o *clusterconf.Options) any { return (*string)(&o.Order) }, `"total" (one order for every client) or "sender" (each sender's order, lower latency)`),
	clusterKey("nats_url", kindString, func(o *clusterconf.Options) any { return &o.NATSURL }, "comma-separated URLs of an existing NATS"),
	clusterKey("user", kindString, func(o *clusterconf.Options) any { return &o.User }, "user name for nats_url"),
	clusterKey("password", kindSecret, func(o *clusterconf.Options) any { return &o.Password }, "password for nats_url"),
	clusterKey("token", kindSecret, func(o *clusterconf.Options) any { return &o.Token }, "token for nats_url"),
	clusterKey("creds", kindFile, func(o *clusterconf.Options) any { return &o.CredsFile }, "credentials file (JWT and nkey) for nats_url"),
	clusterKey("tls_ca", kindFile, func(o *clusterconf.Options) any { return &o.TLSCA }, "PEM CA file that verifies nats_url's server"),
	clusterKey("tls_cert", kindFile, func(o *clusterconf.Options) any { return &o.TLSCert }, "PEM client certificate for nats_url"),
	clusterKey("tls_key", kindFile, func(o *clusterconf.Options) any { return &o.TLSKey }, "PEM client key for nats_url"),
	clusterKey("listen", kindString, func(o *clusterconf.Options) any { return &o.Listen }, "host:port the NATS inside ovbus takes routes on"),
	clusterKey("routes", kindList, func(o *clusterconf.Options) any { return &o.Routes }, "comma-separated nats://host:port of the other nodes' listen"),
	clusterKey("advertise", kindString, func(o *clusterconf.Options) any { return &o.Advertise }, "host:port the other nodes reach listen at (NAT, proxy); empty for the address they see"),
	clusterKey("route_token", kindSecret, func(o *clusterconf.Options) any { return &o.RouteToken }, "secret every node's listen requires of the others (the same on every node); empty for none"),
	clusterKey("store_dir", kindString, func(o *clusterconf.Options) any { return &o.StoreDir }, "directory of the embedded JetStream's state; empty for a temporary one"),
	clusterKey("lead", kindBool, func(o *clusterconf.Options) any { return &o.Lead }, "this node asks to lead the stream (order total): set it on the node whose clients send the most"),
	clusterKey("replicas", kindCountOrZero, func(o *clusterconf.Options) any { return &o.Replicas }, "copies of the stream (order total); 0 for the nodes in routes plus this one, at most 3"),
	clusterKey("stream_max_age", kindSeconds, func(o *clusterconf.Options) any { return &o.StreamMaxAge }, "seconds the stream keeps a frame (order total), and each node its own frames for others that missed them"),
	clusterKey("stream_max_bytes", kindBytesOrZero, func(o *clusterconf.Options) any { return &o.StreamMaxBytes }, "bytes the stream keeps (order total), and each node of its own frames; 0 for 64 MiB or 2 × max_msg_size"),
	clusterKey("max_inflight", kindCount, func(o *clusterconf.Options) any { return &o.MaxInflight }, "frames of this node the stream has not confirmed yet, queued, on their way or kept while it does not answer (order total)"),
	{name: "log_level", env: env1("OVOS_BUS_LOG_LEVEL"), flag: "log-level", kind: kindLevel,
		own: func(c *Config) any { return &c.LogLevel }, reload: bus.Live, doc: "DEBUG, INFO, WARNING, ERROR or CRITICAL"},
}

func env1(name string) []string { return []string{name} }

// clusterKey is the row of websocket.cluster.<name>: variable
// OVOS_BUS_CLUSTER_<NAME>, flag --cluster-<name>.
func clusterKey(name string, k *kind, field func(*clusterconf.Options) any, doc string) key {
	return key{name: "cluster." + name, env: env1("OVOS_BUS_CLUSTER_" + strings.ToUpper(name)),
		flag: "cluster-" + strings.ReplaceAll(name, "_", "-"), kind: k,
		own: func(c *Config) any { return field(&c.Cluster) }, reload: bus.Restart, doc: doc}
}

// field returns a pointer to the key's field in c.
func (k *key) field(c *Config) any {
	if k.bus != nil {
		return k.bus(&c.Bus)
	}
	return k.own(c)
}

// value returns the key's value in c as the configuration writes it.
func (k *key) value(c *Config) any { return k.kind.value(k.field(c)) }

// when says when a change to the key takes effect on a running bus.
func (k *key) when() bus.Reload {
	if k.bus != nil {
		r, _ := bus.OptionReload(k.name)
		return r
	}
	return k.reload
}

// segments are the key's nested names below websocket: ["cluster", "name"].
func (k *key) segments() []string { return strings.Split(k.name, ".") }

// path is the key's dotted place in the configuration.
func (k *key) path() string {
	if k.kind == kindLevel {
		return "logging.bus.log_level"
	}
	return "websocket." + k.name
}

// lookupKey returns the row of a key, or nil.
func lookupKey(name string) *key {
	for i := range keys {
		if keys[i].name == name {
			return &keys[i]
		}
	}
	return nil
}

// websocketKeys lists the keys of the websocket section, in table order.
func websocketKeys() []*key {
	var out []*key
	for i := range keys {
		if keys[i].kind != kindLevel {
			out = append(out, &keys[i])
		}
	}
	return out
}

// kind says how a key's values are converted, checked and shown.
type kind struct {
	// decode converts a value of a file, variable or flag (see convert.go)
	// and stores it through p.
	decode func(v any, p any) error
	// check returns what is wrong with a decoded value that the bus would
	// not see (a zero the bus reads as "use the default"), or "". The bus
	// checks the rest (bus.Options.Validate).
	check func(p any) string
	// value returns the value as the configuration writes it.
	value func(p any) any
	// boolFlag: the flag may stand alone (--ssl); list: comma-separated
	// in variables and flags.
	boolFlag, list bool
	// arg names the flag's value in its help (--port N); "" for a boolFlag.
	arg string
}

func noCheck(any) string { return "" }

var (
	kindString = &kind{
		arg:    "TEXT",
		decode: func(v any, p any) (err error) { *p.(*string), err = asString(v); return },
		check:  noCheck,
		value:  func(p any) any { return *p.(*string) },
	}
	// kindHost is a string that must not be empty: the bus reads "" as
	// its default host.
	kindHost = &kind{
		arg:    "HOST",
		decode: kindString.decode,
		check: func(p any) string {
			if *p.(*string) == "" {
				return "must not be empty (use 0.0.0.0 for every interface)"
			}
			return ""
		},
		value: kindString.value,
	}
	// kindFile is a string shown as null when empty.
	kindFile = &kind{
		arg:    "FILE",
		decode: kindString.decode,
		check:  noCheck,
		value: func(p any) any {
			if s := *p.(*string); s != "" {
				return s
			}
			return nil
		},
	}
	kindBool = &kind{
		decode:   func(v any, p any) (err error) { *p.(*bool), err = asBool(v); return },
		check:    noCheck,
		value:    func(p any) any { return *p.(*bool) },
		boolFlag: true,
	}
	// kindNotBool is a boolean key stored negated: compression is
	// bus.Options.DisableCompression.
	kindNotBool = &kind{
		decode: func(v any, p any) error {
			b, err := asBool(v)
			*p.(*bool) = !b
			return err
		},
		check:    noCheck,
		value:    func(p any) any { return !*p.(*bool) },
		boolFlag: true,
	}
	// kindPort is an integer; the bus checks its range.
	kindPort = intKind[int]("an integer 0-65535", false)
	// kindCount is an integer greater than 0 (the bus reads 0 as its
	// default).
	kindCount = intKind[int]("an integer greater than 0", true)
	// kindBytes is a number of bytes greater than 0.
	kindBytes = intKind[int64]("a number of bytes greater than 0", true)
	// kindCountOrZero and kindBytesOrZero take 0 for "derive it" (the bus's
	// or the cluster's own choice, e.g. max_connections); negative is refused.
	kindCountOrZero = intKind[int]("an integer, 0 or more", false)
	kindBytesOrZero = intKind[int64]("a number of bytes, 0 or more", false)
	// kindSecret is a string Print shows only the start of.
	kindSecret = &kind{
		decode: kindString.decode,
		check:  noCheck,
		value: func(p any) any {
			if s := *p.(*string); s != "" {
				return bus.Redact(s)
			}
			return nil
		},
	}
	// kindMiB is a size written in MiB (fractions allowed) and kept in
	// bytes, greater than 0 and at most bus.MaxMsgSizeLimit.
	kindMiB = &kind{
		arg: "MiB",
		decode: func(v any, p any) error {
			f, err := asFloat(v, "a size in MiB (a number greater than 0)")
			if err != nil {
				return err
			}
			if msg := mibRange(f); msg != "" {
				return fmt.Errorf("%s", msg)
			}
			*p.(*int64) = int64(math.Round(f * MiB))
			return nil
		},
		check: func(p any) string { return mibRange(float64(*p.(*int64)) / MiB) },
		value: func(p any) any { return math.Round(float64(*p.(*int64))/MiB*1e6) / 1e6 },
	}
	// kindSeconds is a duration greater than 0 (the bus reads 0 as its
	// default).
	kindSeconds = &kind{
		arg:    "SECONDS",
		decode: func(v any, p any) (err error) { *p.(*time.Duration), err = asSeconds(v); return },
		check: func(p any) string {
			if d := *p.(*time.Duration); d <= 0 {
				return fmt.Sprintf("expected seconds greater than 0, got %v", d.Seconds())
			}
			return ""
		},
		value: func(p any) any { return p.(*time.Duration).Seconds() },
	}
	// kindDrain is a duration of 0 or more, where 0 means "at once": kept
	// as a negative bus.Options.ShutdownTimeout, since the bus reads 0 as
	// its default.
	kindDrain = &kind{
		arg: "SECONDS",
		decode: func(v any, p any) error {
			d, err := asSeconds(v)
			if err != nil {
				return err
			}
			if d < 0 {
				return fmt.Errorf("expected seconds, 0 or more, got %v", d.Seconds())
			}
			if d == 0 {
				d = -1
			}
			*p.(*time.Duration) = d
			return nil
		},
		check: noCheck,
		value: func(p any) any { return max(p.(*time.Duration).Seconds(), 0) },
	}
	// kindOffZero is a number, 0 or more, where 0 means "none": kept as
	// a negative int in bus.Options, since the bus reads 0 as its default
	// (compression_context).
	kindOffZero = &kind{
		arg: "N",
		decode: func(v any, p any) error {
			n, err := asInt(v, 0, math.MaxInt32, "a number, 0 or more")
			if n == 0 {
				n = -1
			}
			*p.(*int) = int(n)
			return err
		},
		check: noCheck,
		value: func(p any) any { return max(*p.(*int), 0) },
	}
	kindList = &kind{
		arg:    "LIST",
		decode: func(v any, p any) (err error) { *p.(*[]string), err = asStringList(v); return },
		check:  noCheck,
		value:  func(p any) any { return nonNil(*p.(*[]string)) },
		list:   true,
	}
	// kindAuth is the websocket.auth object; decodeAuth reads it.
	kindAuth = &kind{
		check: noCheck,
		value: func(p any) any { return redacted(*p.(*bus.Auth)) },
	}
	// kindLevel is the log level; decodeLogLevel reads it from the
	// logging section.
	kindLevel = &kind{
		arg: "LEVEL",
		check: func(p any) string {
			if l := *p.(*string); logLevels[l] != l {
				return fmt.Sprintf("expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got %q", l)
			}
			return ""
		},
		value: kindString.value,
	}
)

// intKind is a kind of integer stored as T; want says what is expected.
// With positive, 0 and less are refused (the bus reads 0 as its default);
// the bus checks the other bounds.
func intKind[T int | int64](want string, positive bool) *kind {
	return &kind{
		arg: "N",
		decode: func(v any, p any) error {
			n, err := asInt(v, math.MinInt32, math.MaxInt32, want)
			if _, wide := p.(*int64); wide {
				n, err = asInt(v, math.MinInt64, math.MaxInt64, want)
			}
			*p.(*T) = T(n)
			return err
		},
		check: func(p any) string {
			if n := *p.(*T); positive && n <= 0 {
				return fmt.Sprintf("expected %s, got %d", want, n)
			}
			return ""
		},
		value: func(p any) any { return *p.(*T) },
	}
}

// mibRange says what is wrong with a max_msg_size of f MiB, or "".
func mibRange(f float64) string {
	const limit = bus.MaxMsgSizeLimit / MiB
	if !(f > 0) || f > limit {
		return fmt.Sprintf("expected a size in MiB greater than 0 and at most %d, got %v", limit, f)
	}
	return ""
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
