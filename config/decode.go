package config

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// builtIn is the provenance of a key no layer set.
const builtIn = "built-in"

// decoder turns the merged tree into a Config, recording provenance and
// stopping at the first bad value.
type decoder struct {
	m    *merger
	ws   map[string]any
	prov *Provenance
	err  error
}

// field converts websocket.<key> with conv when some layer set it to a
// value other than null.
func (d *decoder) field(key string, conv func(any) error) {
	path := join("websocket", key)
	v, ok := d.ws[key]
	if !ok {
		d.prov.sources[key] = builtIn
		return
	}
	d.prov.sources[key] = d.m.label(path)
	if v == nil {
		d.prov.sources[key] += " (null: built-in value)"
		return
	}
	if d.err != nil {
		return
	}
	if err := conv(v); err != nil {
		d.err = d.m.errorPath(path, err.Error())
	}
}

func decode(m *merger, loc *locations, prov *Provenance) (*Config, error) {
	c := Default()
	c.MaxMsgSizeMiB = fallbackMaxMsgSizeMiB
	c.LogFile = filepath.Join(loc.stateHome, loc.base, "bus.log")

	ws := map[string]any{}
	switch v := m.data["websocket"].(type) {
	case nil:
	case map[string]any:
		ws = v
	default:
		return nil, m.errorPath("websocket", "expected an object, got "+describe(v))
	}
	d := &decoder{m: m, ws: ws, prov: prov}
	const portWant = "an integer 0-65535"

	d.field("host", func(v any) (err error) { c.Host, err = asString(v); return })
	d.field("port", func(v any) error {
		n, err := asInt(v, 0, 65535, portWant)
		c.Port = int(n)
		return err
	})
	d.field("route", func(v any) (err error) { c.Route, err = asString(v); return })
	d.field("ssl", func(v any) (err error) { c.SSL, err = asBool(v); return })
	d.field("ssl_cert", func(v any) (err error) { c.SSLCert, err = asString(v); return })
	d.field("ssl_key", func(v any) (err error) { c.SSLKey, err = asString(v); return })
	d.field("max_msg_size", func(v any) (err error) {
		c.MaxMsgSizeMiB, err = asFloat(v, "a size in MiB (a number greater than 0)")
		return
	})
	if _, ok := ws["max_msg_size"]; !ok {
		prov.sources["max_msg_size"] = builtIn + " (the handler's fallback when the key is missing)"
	}
	d.field("filter", func(v any) (err error) { c.Filter, err = asBool(v); return })
	d.field("filter_logs", func(v any) (err error) { c.FilterLogs, err = asStringList(v); return })
	d.field("shared_connection", func(v any) (err error) { c.SharedConnection, err = asBool(v); return })
	d.field("max_queue_bytes", func(v any) (err error) {
		c.MaxQueueBytes, err = asInt(v, 1, math.MaxInt64, "a number of bytes greater than 0")
		return
	})
	d.field("max_queue_messages", func(v any) error {
		n, err := asInt(v, 1, math.MaxInt32, "an integer greater than 0")
		c.MaxQueueMessages = int(n)
		return err
	})
	d.field("write_timeout", func(v any) (err error) { c.WriteTimeout, err = asSeconds(v); return })
	d.field("handshake_timeout", func(v any) (err error) { c.HandshakeTimeout, err = asSeconds(v); return })
	d.field("shutdown_timeout", func(v any) (err error) { c.ShutdownTimeout, err = asSeconds(v); return })
	d.field("close_frames_on_shutdown", func(v any) (err error) { c.CloseFramesOnShutdown, err = asBool(v); return })
	d.field("compression", func(v any) (err error) { c.Compression, err = asBool(v); return })
	d.field("metrics_address", func(v any) (err error) { c.MetricsAddress, err = asString(v); return })
	d.field("allowed_origins", func(v any) (err error) { c.AllowedOrigins, err = asStringList(v); return })
	d.field("log_file", func(v any) (err error) { c.LogFile, err = asString(v); return })
	if v, ok := ws["auth"]; ok && v != nil && d.err == nil {
		c.Auth, d.err = decodeAuth(m, v)
	}
	d.field("auth", func(any) error { return nil }) // provenance only
	if d.err != nil {
		return nil, d.err
	}
	if err := decodeLogLevel(m, c, prov); err != nil {
		return nil, err
	}

	// A larger max_msg_size than the default queue holds raises the queue
	// bound unless someone set it: a config Tornado accepts must start.
	if prov.sources["max_queue_bytes"] == builtIn && c.MaxMsgSizeMiB > 0 && c.MaxQueueBytes < c.MaxMsgSize() {
		c.MaxQueueBytes = 2 * c.MaxMsgSize()
		prov.sources["max_queue_bytes"] = builtIn + " (raised to 2 × max_msg_size)"
	}
	if c.SSL && (c.SSLCert == "") != (c.SSLKey == "") {
		set, unset := "ssl_cert", "ssl_key"
		if c.SSLCert == "" {
			set, unset = unset, set
		}
		prov.Warnings = append(prov.Warnings, fmt.Sprintf(
			"websocket.%s is set but websocket.%s is not: a self-signed pair is generated or reused instead", set, unset))
	}
	for _, k := range slices.Sorted(maps.Keys(ws)) {
		if slices.Contains(knownKeys, k) || slices.Contains(clientKeys, k) {
			continue
		}
		hint := "unknown key, ignored"
		if k == "log_level" {
			hint = "ignored: the bus's level is logging.bus.log_level or logging.log_level"
		}
		prov.Warnings = append(prov.Warnings, fmt.Sprintf("websocket.%s: %s (set by %s)", k, hint, m.label(join("websocket", k))))
	}
	return c, nil
}

// decodeLogLevel reads logging.bus.log_level, else logging.log_level.
func decodeLogLevel(m *merger, c *Config, prov *Provenance) error {
	prov.sources["log_level"] = builtIn
	var logging map[string]any
	switch v := m.data["logging"].(type) {
	case nil:
		return nil
	case map[string]any:
		logging = v
	default:
		return m.errorPath("logging", "expected an object, got "+describe(v))
	}
	var level any
	var path string
	switch b := logging["bus"].(type) {
	case nil:
	case map[string]any:
		if v, ok := b["log_level"]; ok && v != nil {
			level, path = v, join(join("logging", "bus"), "log_level")
		}
	default:
		return m.errorPath(join("logging", "bus"), "expected an object, got "+describe(b))
	}
	if level == nil {
		if v, ok := logging["log_level"]; ok && v != nil {
			level, path = v, join("logging", "log_level")
		}
	}
	if level == nil {
		return nil
	}
	m.logLevelPath = path
	var s string
	switch x := level.(type) {
	case string:
		s = strings.ToUpper(strings.TrimSpace(x))
	case int64:
		s = strconv.FormatInt(x, 10)
	}
	canon, ok := logLevels[s]
	if !ok {
		return m.errorPath(path, "expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got "+describe(level))
	}
	c.LogLevel = canon
	src := m.label(path)
	if l := m.origin(path); l != nil && l.name != "env" && l.name != "flag" {
		src += " (" + dotted(path) + ")"
	}
	prov.sources["log_level"] = src
	return nil
}

// decodeAuth reads websocket.auth:
//
//	{"required": false, "tokens": {"<token>": {"name": "...", "emit": [...], "receive": [...]}}}
//
// Unknown keys are errors here: a misspelt permission must not grant more.
func decodeAuth(m *merger, v any) (Auth, error) {
	var a Auth
	base := join("websocket", "auth")
	am, ok := v.(map[string]any)
	if !ok {
		return a, m.errorPath(base, expected(`an object {"required": ..., "tokens": {...}}`, v).Error())
	}
	for _, k := range slices.Sorted(maps.Keys(am)) {
		val, path := am[k], join(base, k)
		switch k {
		case "required":
			if val == nil {
				continue
			}
			b, err := asBool(val)
			if err != nil {
				return a, m.errorPath(path, err.Error())
			}
			a.Required = b
		case "tokens":
			if val == nil {
				continue
			}
			tm, ok := val.(map[string]any)
			if !ok {
				return a, m.errorPath(path, expected("an object mapping each token to its permissions", val).Error())
			}
			a.Tokens = make(map[string]Permissions, len(tm))
			for _, tok := range slices.Sorted(maps.Keys(tm)) {
				p, err := decodePermissions(m, join(path, tok), tok, tm[tok])
				if err != nil {
					return a, err
				}
				a.Tokens[tok] = p
			}
		default:
			return a, m.errorPath(path, `unknown key: expected "required" or "tokens"`)
		}
	}
	return a, nil
}

func decodePermissions(m *merger, path, tok string, v any) (Permissions, error) {
	var p Permissions
	if v == nil {
		return p, nil
	}
	pm, ok := v.(map[string]any)
	if name, _ := pm["name"].(string); name != "" {
		p.Name = name
	}
	shown := "websocket.auth.tokens[" + tokenLabel(tok, p) + "]"
	if !ok {
		return p, m.errorPathKey(path, shown, expected(`an object {"name": ..., "emit": [...], "receive": [...]}`, v).Error())
	}
	for _, k := range slices.Sorted(maps.Keys(pm)) {
		val := pm[k]
		key, sub := shown+"."+k, join(path, k)
		switch k {
		case "name":
			if _, ok := val.(string); !ok && val != nil {
				return p, m.errorPathKey(sub, key, expected("a string", val).Error())
			}
		case "emit", "receive":
			if val == nil {
				continue
			}
			list, err := asStringList(val)
			if err != nil {
				return p, m.errorPathKey(sub, key, err.Error())
			}
			if k == "emit" {
				p.Emit = list
			} else {
				p.Receive = list
			}
		default:
			return p, m.errorPathKey(sub, key, `unknown key: expected "name", "emit" or "receive"`)
		}
	}
	return p, nil
}
