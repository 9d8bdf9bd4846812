package config

import (
	"fmt"
	"maps"
	"math"
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
// value other than null. A dotted key ("cluster.name") is a key of a nested
// object.
func (d *decoder) field(key string, conv func(any) error) {
	segs := strings.Split(key, ".")
	path := "websocket"
	obj := d.ws
	for _, s := range segs[:len(segs)-1] {
		path = join(path, s)
		switch o := obj[s].(type) {
		case map[string]any:
			obj = o
		case nil:
			obj = nil
		default:
			if d.err == nil {
				d.err = d.m.errorPath(path, "expected an object, got "+describe(o))
			}
			obj = nil
		}
	}
	path = join(path, segs[len(segs)-1])
	v, ok := obj[segs[len(segs)-1]]
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

// unknownKeys lists the keys of obj (at websocket.<prefix>) that no row of
// the key table names, as dotted keys below websocket; nested objects that
// rows reach into are searched too.
func unknownKeys(obj map[string]any, prefix string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		name := k
		if prefix != "" {
			name = prefix + "." + k
		}
		if lookupKey(name) != nil && name != "log_level" { // log_level is not a websocket key
			continue
		}
		if sub, ok := obj[k].(map[string]any); ok && hasKeysBelow(name) {
			out = append(out, unknownKeys(sub, name)...)
			continue
		}
		out = append(out, name)
	}
	return out
}

// hasKeysBelow reports whether some row is a key nested below name.
func hasKeysBelow(name string) bool {
	for i := range keys {
		if strings.HasPrefix(keys[i].name, name+".") {
			return true
		}
	}
	return false
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
	// Likewise max_inflight_bytes.
	if prov.sources["max_inflight_bytes"] == builtIn {
		c.Bus.MaxInflightBytes = bus.DefaultInflightBytes(c.Bus.MaxMsgSize)
		if c.Bus.MaxInflightBytes != bus.DefaultMaxInflightBytes {
			prov.sources["max_inflight_bytes"] = builtIn + " (raised to 3 × max_msg_size)"
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
	for _, k := range unknownKeys(ws, "") {
		if slices.Contains(clientKeys, k) {
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
//	{"required": false,
//	 "permissions": {"<set>": {"emit": [...], "receive": [...], "rate": N, "burst": N, "reply_routing": false}},
//	 "loopback": "all", "networks": {"<cidr>": "<set>"}, "anyone": "refuse",
//	 "tokens": {"<token>": {"name": "...", "permissions": "<set>"} or {"name": "...", "emit": [...], ...}}}
//
// Unknown keys are errors here: a misspelt permission must not grant more.
// The bus checks the rest (bus.Auth's validate), and config.check places
// its faults.
func decodeAuth(m *merger, v any) (bus.Auth, error) {
	a := bus.Defaults().Auth // the keys left out keep the bus's defaults
	base := join("websocket", "auth")
	am, ok := v.(map[string]any)
	if !ok {
		return a, m.errorPath(base, expected(`an object {"tokens": {...}, "networks": {...}, ...}`, v).Error())
	}
	for _, k := range slices.Sorted(maps.Keys(am)) {
		val, path := am[k], join(base, k)
		if val == nil {
			continue
		}
		var err error
		switch k {
		case "required":
			a.Required, err = asBool(val)
		case "loopback":
			a.Loopback, err = asString(val)
		case "anyone":
			a.Anyone, err = asString(val)
		case "networks":
			a.Networks, err = decodeNetworks(m, path, val)
		case "permissions":
			a.Sets, err = decodePermissionMap(m, path, val, false)
		case "tokens":
			a.Tokens, err = decodePermissionMap(m, path, val, true)
		default:
			err = fmt.Errorf(`unknown key: expected "required", "tokens", "permissions", "loopback", "networks" or "anyone"`)
		}
		if ce, ok := err.(*Error); ok {
			return a, ce
		}
		if err != nil {
			return a, m.errorPath(path, err.Error())
		}
	}
	return a, nil
}

// decodeNetworks reads websocket.auth.networks, an object mapping each
// network to a permission set's name. The bus reads the networks
// (bus.ParseNetwork) and checks them.
func decodeNetworks(m *merger, path string, v any) (map[string]string, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, m.errorPath(path, expected(`an object mapping each network to a permission set, e.g. {"192.168.1.0/24": "satellite"}`, v).Error())
	}
	out := make(map[string]string, len(obj))
	for _, n := range slices.Sorted(maps.Keys(obj)) {
		set, err := asString(obj[n])
		if err != nil {
			return nil, m.errorPath(join(path, n), expected("the name of a permission set", obj[n]).Error())
		}
		out[n] = set
	}
	return out, nil
}

// decodePermissionMap reads websocket.auth.tokens (tokens) or
// websocket.auth.permissions, an object of permissions by token or set
// name.
func decodePermissionMap(m *merger, path string, v any, tokens bool) (map[string]bus.Permissions, error) {
	what := "an object mapping each permission set's name to its permissions"
	if tokens {
		what = "an object mapping each token to its permissions"
	}
	pm, ok := v.(map[string]any)
	if !ok {
		return nil, m.errorPath(path, expected(what, v).Error())
	}
	out := make(map[string]bus.Permissions, len(pm))
	for _, name := range slices.Sorted(maps.Keys(pm)) {
		p, err := decodePermissions(m, join(path, name), name, pm[name], tokens)
		if err != nil {
			return nil, err
		}
		out[name] = p
	}
	return out, nil
}

// permissionKeys are the keys of a permission set; a token has "name" and
// "permissions" (a set's name) too.
var permissionKeys = []string{"emit", "receive", "rate", "burst", "reply_routing"}

// decodePermissions reads the permissions of one token (tok is the token:
// errors show its name or Redact instead) or of one set named tok.
func decodePermissions(m *merger, path, tok string, v any, token bool) (bus.Permissions, error) {
	var p bus.Permissions
	if v == nil {
		return p, nil
	}
	pm, ok := v.(map[string]any)
	if name, _ := pm["name"].(string); name != "" && token {
		p.Name = name
	}
	shown := "websocket.auth.permissions." + tok
	want := `an object {"emit": [...], "receive": [...], "rate": ..., "burst": ..., "reply_routing": ...}`
	allowed := permissionKeys
	if token {
		shown = "websocket.auth.tokens[" + p.Label(tok) + "]"
		want = `an object {"name": ..., "permissions": ...} or {"name": ..., "emit": [...], "receive": [...], ...}`
		allowed = append([]string{"name", "permissions"}, permissionKeys...)
	}
	if !ok {
		return p, m.errorPathKey(path, shown, expected(want, v).Error())
	}
	for _, k := range slices.Sorted(maps.Keys(pm)) {
		val := pm[k]
		key, sub := shown+"."+k, join(path, k)
		if !slices.Contains(allowed, k) {
			return p, m.errorPathKey(sub, key, "unknown key: expected "+quotedList(allowed))
		}
		if val == nil {
			continue
		}
		var err error
		switch k {
		case "name":
			_, err = asString(val)
		case "permissions":
			p.Set, err = asString(val)
		case "emit":
			p.Emit, err = asStringList(val)
		case "receive":
			p.Receive, err = asStringList(val)
		case "rate":
			p.Rate, err = asFloat(val, "messages per second, 0 (no limit) or more")
		case "burst":
			var n int64
			n, err = asInt(val, 0, math.MaxInt32, "a number of messages, 0 or more")
			p.Burst = int(n)
		case "reply_routing":
			p.ReplyRouting, err = asBool(val)
		}
		if err != nil {
			return p, m.errorPathKey(sub, key, err.Error())
		}
	}
	return p, nil
}

// quotedList writes names as `"a", "b" or "c"`.
func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
