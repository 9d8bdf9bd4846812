package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ovbus/ovbus/bus"
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
		if ce, ok := err.(*Error); ok {
			d.err = ce // already placed (auth)
			return
		}
		d.err = d.m.errorPath(path, err.Error())
	}
}

func decode(m *merger, loc *locations, prov *Provenance) (*Config, error) {
	c := Default()
	c.Bus.MaxMsgSize = fallbackMaxMsgSizeMiB * MiB
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
	for _, k := range websocketKeys() {
		if k.kind == kindAuth {
			d.field(k.name, func(v any) (err error) { c.Bus.Auth, err = decodeAuth(m, v); return })
			continue
		}
		d.field(k.name, func(v any) error { return k.kind.decode(v, k.field(c)) })
	}
	if d.err != nil {
		return nil, d.err
	}
	if _, ok := ws["max_msg_size"]; !ok {
		prov.sources["max_msg_size"] = builtIn + " (the handler's fallback when the key is missing)"
	}
	if err := decodeLogLevel(m, c, prov); err != nil {
		return nil, err
	}

	// Unset, max_queue_bytes is the bus's default for this max_msg_size: a
	// config Tornado accepts must start.
	if prov.sources["max_queue_bytes"] == builtIn {
		c.Bus.MaxQueueBytes = bus.DefaultQueueBytes(c.Bus.MaxMsgSize)
		if c.Bus.MaxQueueBytes != bus.DefaultMaxQueueBytes {
			prov.sources["max_queue_bytes"] = builtIn + " (raised to 2 × max_msg_size)"
		}
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
		if lookupKey(k) != nil && k != "log_level" || slices.Contains(clientKeys, k) {
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
func decodeAuth(m *merger, v any) (bus.Auth, error) {
	var a bus.Auth
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
			a.Tokens = make(map[string]bus.Permissions, len(tm))
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

func decodePermissions(m *merger, path, tok string, v any) (bus.Permissions, error) {
	var p bus.Permissions
	if v == nil {
		return p, nil
	}
	pm, ok := v.(map[string]any)
	if name, _ := pm["name"].(string); name != "" {
		p.Name = name
	}
	shown := "websocket.auth.tokens[" + p.Label(tok) + "]"
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
