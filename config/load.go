package config

import (
	_ "embed"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

//go:embed defaults.conf
var bundledDefaults []byte

// LoadOptions are the inputs of Load besides the files themselves.
type LoadOptions struct {
	// LookupEnv reads the environment; nil means os.LookupEnv. Every path
	// Load reads comes from it (HOME, XDG_*, OVOS_*, MYCROFT_*), so tests
	// point it at temporary directories.
	LookupEnv func(key string) (string, bool)
	// Flags are the command-line overrides from RegisterFlags; nil for none.
	Flags *FlagOverrides
	// Strict makes a file of the stack that cannot be read or parsed an
	// error, as OVOS_BUS_STRICT_CONFIG=true and --strict-config do. Without
	// it such a file is skipped, as ovos-config does, and listed by
	// Provenance.Broken (see broken.go).
	Strict bool
	// Previous is the provenance of the configuration in force, for a
	// reload: a file that can no longer be read or parsed keeps the version
	// read then. nil at start.
	Previous *Provenance
}

// layer is one source of settings, lowest priority first in the stack.
type layer struct {
	name  string // default, remote, distribution, system, user, xdg, bus-file, env, flag
	label string // what Provenance shows: "system /etc/mycroft/mycroft.conf"
	file  string // the file, if the layer is one
	tree  *tree
}

// locations are the files of the ovos-config stack.
type locations struct {
	base, file   string // OVOS_CONFIG_BASE_FOLDER, OVOS_CONFIG_FILENAME
	defaultFile  string // "" for the bundled defaults
	remote       string
	distribution string
	system       string
	user         string
	xdgDirs      []string // files in merge order: lowest priority first
	stateHome    string
}

// env wraps the lookup function; empty values count as unset for paths.
type env func(string) (string, bool)

func (e env) get(key string) string {
	v, _ := e(key)
	return v
}

func (e env) or(key, def string) string {
	if v := e.get(key); v != "" {
		return v
	}
	return def
}

func (e env) home() (string, error) {
	if h := e.get("HOME"); h != "" {
		return h, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", &Error{Msg: "cannot find the home directory: set HOME or the XDG_* variables", Err: err}
	}
	return h, nil
}

// xdgHome returns $key, else $HOME/rel.
func (e env) xdgHome(key, rel string) (string, error) {
	if v := e.get(key); v != "" {
		return v, nil
	}
	h, err := e.home()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, rel), nil
}

func findLocations(e env) (*locations, error) {
	l := &locations{
		base: e.or("OVOS_CONFIG_BASE_FOLDER", "mycroft"),
		file: e.or("OVOS_CONFIG_FILENAME", "mycroft.conf"),
	}
	configHome, err := e.xdgHome("XDG_CONFIG_HOME", ".config")
	if err != nil {
		return nil, err
	}
	l.stateHome, err = e.xdgHome("XDG_STATE_HOME", filepath.Join(".local", "state"))
	if err != nil {
		return nil, err
	}
	l.defaultFile = e.get("OVOS_DEFAULT_CONFIG")
	l.remote = e.or("MYCROFT_WEB_CACHE", filepath.Join(configHome, l.base, "web_cache.json"))
	l.distribution = e.or("OVOS_DISTRIBUTION_CONFIG", filepath.Join("/usr/share", l.base, l.file))
	l.system = e.or("MYCROFT_SYSTEM_CONFIG", filepath.Join("/etc", l.base, l.file))
	l.user = filepath.Join(configHome, l.base, l.file)
	var dirs []string
	for d := range strings.SplitSeq(e.or("XDG_CONFIG_DIRS", "/etc/xdg"), ":") {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	// XDG_CONFIG_DIRS lists the most important directory first; merge it
	// last so that it wins.
	for _, d := range slices.Backward(dirs) {
		l.xdgDirs = append(l.xdgDirs, filepath.Join(d, l.base, l.file))
	}
	return l, nil
}

func byName(path string, _ []byte) format { return formatFor(path) }

// Load reads the configuration the way ovos-config does, then applies the
// Rust bus's OVOS_BUS_CONFIG_FILE and OVOS_BUS_* variables, then flags, and
// validates the result. See the package documentation for the layers.
//
// It returns the merged configuration and where each key came from. A file
// that is missing is skipped. One that cannot be read or parsed is skipped
// too, and listed by Provenance.Broken with its *Error, unless strict mode is
// on: then it is the error (broken.go says why). A value of the wrong type or
// out of range is an *Error naming the file, line and key, or the variable
// or flag. Load is safe for concurrent use.
func Load(opts LoadOptions) (*Config, *Provenance, error) {
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	e := env(lookup)
	loc, err := findLocations(e)
	if err != nil {
		return nil, nil, err
	}
	strict, err := strictMode(e, opts)
	if err != nil {
		return nil, nil, err
	}
	prov := &Provenance{sources: map[string]string{}, good: map[string][]byte{}}
	r := &stackReader{strict: strict, prev: opts.Previous, prov: prov}
	read := func(name, path string) (*layer, error) { return r.read(name, path, byName, false) }

	// 1. default
	var def *layer
	if loc.defaultFile != "" {
		if def, err = read("default", loc.defaultFile); err != nil {
			return nil, prov, err
		}
		if def == nil && prov.Layers[len(prov.Layers)-1].Status == statusNotFound {
			prov.Warnings = append(prov.Warnings, fmt.Sprintf(
				"OVOS_DEFAULT_CONFIG names %s, which does not exist: no default layer, built-in values apply", loc.defaultFile))
		}
	} else {
		t, err := parse("(bundled defaults)", bundledDefaults, formatJSON)
		if err != nil {
			panic("config: bundled defaults: " + err.Error())
		}
		def = &layer{name: "default", label: "default (bundled)", tree: t}
		r.note("default", "", "loaded (bundled)", nil)
	}
	// 3. distribution and 4. system: read before the remote cache because
	// they, with the default layer, decide whether it is read at all.
	dist, err := read("distribution", loc.distribution)
	if err != nil {
		return nil, prov, err
	}
	sys, err := read("system", loc.system)
	if err != nil {
		return nil, prov, err
	}
	cons, err := systemConstraints(def, dist, sys)
	if err != nil {
		return nil, prov, err
	}

	// 2. remote cache, its websocket section protected
	var remote *layer
	if cons.disableRemote {
		r.note("remote", loc.remote, "skipped: system.disable_remote_config", nil)
	} else if remote, err = read("remote", loc.remote); err != nil {
		return nil, prov, err
	}
	if remote != nil {
		protect(remote.tree.data, append([]string{"system", "websocket"}, cons.protectedRemote...))
	}

	// 5. XDG: the user's file, then $XDG_CONFIG_DIRS in reverse order.
	var xdg []*layer
	xdgFiles := append([]string{loc.user}, loc.xdgDirs...)
	for i, path := range xdgFiles {
		name := "xdg"
		if i == 0 {
			name = "user"
		}
		if cons.disableUser {
			r.note(name, path, "skipped: system.disable_user_config", nil)
			continue
		}
		l, err := read(name, path)
		if err != nil {
			return nil, prov, err
		}
		if l != nil {
			protect(l.tree.data, append([]string{"system"}, cons.protectedUser...))
			xdg = append(xdg, l)
		}
	}

	stack := []*layer{def, remote, dist, sys}
	stack = append(stack, xdg...)

	// OVOS_BUS_CONFIG_FILE: only its websocket and logging sections.
	if path := e.get("OVOS_BUS_CONFIG_FILE"); path != "" {
		l, err := r.read("bus-file", path, sniffFormat, true)
		if err != nil {
			return nil, prov, err
		}
		if l != nil {
			if err := keepBusSections(l); err != nil {
				return nil, prov, err
			}
			stack = append(stack, l)
		}
	}

	stack = append(stack, envLayers(e)...)
	if opts.Flags != nil {
		stack = append(stack, opts.Flags.layers()...)
	}

	// Layers were noted in reading order; show them in merge order.
	rank := map[string]int{"default": 0, "remote": 1, "distribution": 2, "system": 3, "user": 4, "xdg": 5, "bus-file": 6}
	slices.SortStableFunc(prov.Layers, func(a, b Layer) int { return rank[a.Name] - rank[b.Name] })

	m := newMerger()
	for _, l := range stack {
		if l != nil {
			normalizeAliases(l, &prov.Warnings)
			m.merge(m.data, l.tree.data, l, "")
		}
	}
	cfg, err := decode(m, loc, prov)
	if err != nil {
		return nil, prov, err
	}
	if k, below, with, msg := cfg.check(); k != nil {
		if below == nil {
			return nil, prov, m.errorAt(k, with, msg)
		}
		path, shown := cfg.belowKey(k, below)
		return nil, prov, m.errorPathKey(path, shown, msg)
	}
	return cfg, prov, nil
}

// constraints is the merged `system` section.
type constraints struct {
	disableUser, disableRemote     bool
	protectedRemote, protectedUser []string
}

// systemConstraints merges the `system` sections of the default,
// distribution and system layers, the only ones it is read from.
func systemConstraints(layers ...*layer) (constraints, error) {
	var c constraints
	m := newMerger()
	for _, l := range layers {
		if l == nil {
			continue
		}
		if s, ok := l.tree.data["system"]; ok {
			m.merge(m.data, map[string]any{"system": s}, l, "")
		}
	}
	s, ok := m.data["system"]
	if !ok || s == nil {
		return c, nil
	}
	sm, ok := s.(map[string]any)
	if !ok {
		return c, m.errorPath("system", "expected an object, got "+describe(s))
	}
	var err error
	get := func(key string, conv func(any) error) {
		if v, ok := sm[key]; ok && v != nil && err == nil {
			if cerr := conv(v); cerr != nil {
				err = m.errorPath(join("system", key), cerr.Error())
			}
		}
	}
	get("disable_user_config", func(v any) (e error) { c.disableUser, e = asBool(v); return })
	get("disable_remote_config", func(v any) (e error) { c.disableRemote, e = asBool(v); return })
	get("protected_keys", func(v any) error {
		pk, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("expected an object with \"remote\" and \"user\" lists, got %s", describe(v))
		}
		for key, dst := range map[string]*[]string{"remote": &c.protectedRemote, "user": &c.protectedUser} {
			if lv, ok := pk[key]; ok && lv != nil {
				list, lerr := asStringList(lv)
				if lerr != nil {
					return fmt.Errorf("%s: %w", key, lerr)
				}
				*dst = list
			}
		}
		return nil
	})
	return c, err
}

// protect deletes protected keys ("a:b" for b inside a) from a layer.
func protect(data map[string]any, keys []string) {
	for _, k := range keys {
		parts := strings.Split(k, ":")
		m := data
		for i, p := range parts {
			if i == len(parts)-1 {
				delete(m, p)
				break
			}
			next, ok := m[p].(map[string]any)
			if !ok {
				break
			}
			m = next
		}
	}
}

// clientKeys are websocket keys meant for clients that the bus ignores.
var clientKeys = []string{"secret_key", "allow_unencrypted"}

// aliases maps other buses' names of a key to ovbus's.
var aliases = map[string]string{
	"message_buffer_capacity": "max_queue_messages", // the Rust bus
	"filter_ogs":              "filter_logs",        // a Tornado release's typo
}

// normalizeAliases renames alias keys in a layer's websocket section; when a
// layer sets both names, the canonical one wins.
func normalizeAliases(l *layer, warnings *[]string) {
	ws, ok := l.tree.data["websocket"].(map[string]any)
	if !ok {
		return
	}
	for _, alias := range slices.Sorted(maps.Keys(aliases)) {
		v, ok := ws[alias]
		if !ok {
			continue
		}
		canon := aliases[alias]
		delete(ws, alias)
		if _, both := ws[canon]; both {
			*warnings = append(*warnings, fmt.Sprintf("%s: websocket.%s ignored: websocket.%s is set too", l.label, alias, canon))
			continue
		}
		ws[canon] = v
		from, to := join("websocket", alias), join("websocket", canon)
		if p, ok := l.tree.pos[from]; ok {
			l.tree.pos[to] = p
		}
	}
}

// keepBusSections reduces the OVOS_BUS_CONFIG_FILE layer to its websocket
// and logging sections, as the Rust bus reads only the websocket section.
func keepBusSections(l *layer) error {
	d := l.tree.data
	_, hasWS := d["websocket"]
	_, hasLog := d["logging"]
	if !hasWS && !hasLog {
		var names []string
		for _, k := range websocketKeys() {
			names = append(names, k.name)
		}
		for _, k := range slices.Concat(names, slices.Sorted(maps.Keys(aliases))) {
			if _, ok := d[k]; ok {
				p := l.tree.pos[k]
				return &Error{File: l.file, Line: p.line, Col: p.col, Key: k,
					Msg: "OVOS_BUS_CONFIG_FILE is read for its \"websocket\" section: put this key under \"websocket\""}
			}
		}
	}
	for k := range d {
		if k != "websocket" && k != "logging" {
			delete(d, k)
		}
	}
	return nil
}
