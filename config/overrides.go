package config

import (
	"flag"
	"fmt"
	"strings"
)

// valueKind says how a variable's or flag's text becomes a value.
type valueKind int

const (
	kindString valueKind = iota // converted like any file value
	kindBool                    // a flag that may stand alone: --ssl
	kindList                    // comma-separated
)

// override is a key that variables and flags can set.
type override struct {
	key   string   // websocket key, or "log_level" (logging.bus.log_level)
	env   []string // variables, lowest priority first
	flag  string   // flag name without dashes
	kind  valueKind
	usage string
}

// overrides lists the OVOS_BUS_* variables and flags, in the order they
// apply and the flags are registered.
var overrides = []override{
	{"host", []string{"OVOS_BUS_HOST"}, "host", kindString, "bind address (websocket.host)"},
	{"port", []string{"OVOS_BUS_PORT"}, "port", kindString, "TCP port, 0 for any free port (websocket.port)"},
	{"route", []string{"OVOS_BUS_ROUTE"}, "route", kindString, "URL path of the bus (websocket.route)"},
	{"ssl", []string{"OVOS_BUS_USE_SSL"}, "ssl", kindBool, "serve wss:// (websocket.ssl)"},
	{"ssl_cert", []string{"OVOS_BUS_SSL_CERT"}, "ssl-cert", kindString, "PEM certificate file (websocket.ssl_cert)"},
	{"ssl_key", []string{"OVOS_BUS_SSL_KEY"}, "ssl-key", kindString, "PEM key file (websocket.ssl_key)"},
	{"max_msg_size", []string{"OVOS_BUS_MAX_MSG_SIZE"}, "max-msg-size", kindString, "largest message in MiB (websocket.max_msg_size)"},
	{"filter", []string{"OVOS_BUS_FILTER"}, "filter", kindBool, "log one DEBUG line per message (websocket.filter)"},
	{"filter_logs", []string{"OVOS_BUS_FILTER_LOGS"}, "filter-logs", kindList, "comma-separated types left out of the filter log (websocket.filter_logs)"},
	{"max_queue_bytes", []string{"OVOS_BUS_MAX_QUEUE_BYTES"}, "max-queue-bytes", kindString, "bytes queued per client before it is dropped (websocket.max_queue_bytes)"},
	{"max_queue_messages", []string{"OVOS_BUS_MSG_BUFFER_CAPACITY", "OVOS_BUS_MAX_QUEUE_MESSAGES"}, "max-queue-messages", kindString, "messages queued per client before it is dropped (websocket.max_queue_messages)"},
	{"write_timeout", []string{"OVOS_BUS_WRITE_TIMEOUT"}, "write-timeout", kindString, "seconds one write to a client may take (websocket.write_timeout)"},
	{"handshake_timeout", []string{"OVOS_BUS_HANDSHAKE_TIMEOUT"}, "handshake-timeout", kindString, "seconds a WebSocket upgrade may take (websocket.handshake_timeout)"},
	{"shutdown_timeout", []string{"OVOS_BUS_SHUTDOWN_TIMEOUT"}, "shutdown-timeout", kindString, "seconds to flush queues on shutdown (websocket.shutdown_timeout)"},
	{"close_frames_on_shutdown", []string{"OVOS_BUS_CLOSE_FRAMES_ON_SHUTDOWN"}, "close-frames-on-shutdown", kindBool, "send 1001 close frames on shutdown (websocket.close_frames_on_shutdown)"},
	{"compression", []string{"OVOS_BUS_COMPRESSION"}, "compression", kindBool, "permessage-deflate for clients that offer it (websocket.compression)"},
	{"metrics_address", []string{"OVOS_BUS_METRICS_ADDRESS"}, "metrics-address", kindString, "host:port for /metrics, empty for none (websocket.metrics_address)"},
	{"allowed_origins", []string{"OVOS_BUS_ALLOWED_ORIGINS"}, "allowed-origins", kindList, "comma-separated accepted Origin headers, empty for all (websocket.allowed_origins)"},
	{"log_file", []string{"OVOS_BUS_LOG_FILE"}, "log-file", kindString, "log file, empty for none (websocket.log_file)"},
	{"log_level", []string{"OVOS_BUS_LOG_LEVEL"}, "log-level", kindString, "DEBUG, INFO, WARNING, ERROR or CRITICAL (logging.bus.log_level)"},
}

// overrideTree builds the one-key tree a variable or flag contributes.
func overrideTree(o override, text string) *tree {
	var v any = text
	if o.kind == kindList {
		list := []any{}
		for part := range strings.SplitSeq(text, ",") {
			if p := strings.TrimSpace(part); p != "" {
				list = append(list, p)
			}
		}
		v = list
	}
	data := map[string]any{"websocket": map[string]any{o.key: v}}
	if o.key == "log_level" {
		data = map[string]any{"logging": map[string]any{"bus": map[string]any{"log_level": v}}}
	}
	return &tree{data: data, pos: map[string]pos{}}
}

// envLayers returns one layer per OVOS_BUS_* variable that is set. An empty
// value is a value ("" host is an error, "" log file turns the file off),
// except OVOS_BUS_USE_SSL, which like on the Rust bus turns SSL on when set
// at all unless it says false.
func envLayers(e env) []*layer {
	var out []*layer
	for _, o := range overrides {
		for _, name := range o.env {
			text, ok := e(name)
			if !ok {
				continue
			}
			if name == "OVOS_BUS_USE_SSL" && strings.TrimSpace(text) == "" {
				text = "true"
			}
			out = append(out, &layer{name: "env", label: "env " + name, tree: overrideTree(o, text)})
		}
	}
	return out
}

// FlagOverrides records the configuration flags given on a command line.
// Make one with RegisterFlags; pass it to Load in LoadOptions.Flags.
type FlagOverrides struct {
	set []flagSetting // in the order given; a repeated flag keeps its last value
}

type flagSetting struct {
	o    override
	text string
}

// flagValue is the flag.Value of one configuration flag.
type flagValue struct {
	f    *FlagOverrides
	o    override
	text string
}

func (v *flagValue) String() string {
	if v == nil {
		return ""
	}
	return v.text
}

func (v *flagValue) Set(s string) error {
	v.text = s
	for i, fs := range v.f.set {
		if fs.o.flag == v.o.flag {
			v.f.set = append(v.f.set[:i], v.f.set[i+1:]...)
			break
		}
	}
	v.f.set = append(v.f.set, flagSetting{v.o, s})
	return nil
}

func (v *flagValue) IsBoolFlag() bool { return v.o.kind == kindBool }

// RegisterFlags registers the configuration flags on fs: --host, --port,
// --route, --ssl, --ssl-cert, --ssl-key, --max-msg-size, --filter,
// --filter-logs, --max-queue-bytes, --max-queue-messages, --write-timeout,
// --handshake-timeout, --shutdown-timeout, --close-frames-on-shutdown,
// --compression, --metrics-address, --allowed-origins, --log-file and
// --log-level. Only flags given on the command line override the
// configuration; their values are checked by Load, so fs.Parse accepts any
// text. Boolean flags may stand alone (--ssl) or take a value
// (--compression=false).
func RegisterFlags(fs *flag.FlagSet) *FlagOverrides {
	f := &FlagOverrides{}
	def := Default()
	for _, o := range overrides {
		fs.Var(&flagValue{f: f, o: o}, o.flag, o.usage+"; "+defaultText(def, o.key)+"; env "+strings.Join(o.env, ", "))
	}
	return f
}

// Names returns the flags that were set, as "--port".
func (f *FlagOverrides) Names() []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, s := range f.set {
		out = append(out, "--"+s.o.flag)
	}
	return out
}

func (f *FlagOverrides) layers() []*layer {
	if f == nil {
		return nil
	}
	var out []*layer
	for _, s := range f.set {
		out = append(out, &layer{name: "flag", label: "flag --" + s.o.flag, tree: overrideTree(s.o, s.text)})
	}
	return out
}

// defaultText describes a key's built-in value for a flag's help text. A
// flag only overrides the configuration, so the built-in value is what
// applies when neither a file, a variable nor the flag sets the key.
func defaultText(def *Config, key string) string {
	if key == "log_file" {
		return "default $XDG_STATE_HOME/<base>/bus.log"
	}
	v := def.value(key)
	switch v := v.(type) {
	case nil:
		return "default unset"
	case string:
		if v == "" {
			return "default empty"
		}
		return "default " + v
	case []string:
		if len(v) == 0 {
			return "default empty"
		}
		return "default " + strings.Join(v, ",")
	}
	return fmt.Sprintf("default %v", v)
}
