package config

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ovbus/ovbus/bus"
)

// Provenance says where the configuration came from: the files considered,
// the layer that set each key, and warnings worth logging.
type Provenance struct {
	// Layers are the files of the stack in merge order, lowest priority
	// first, including those not found or skipped.
	Layers []Layer
	// Warnings are problems that did not stop Load: unknown keys, a lone
	// ssl_cert, a missing OVOS_DEFAULT_CONFIG file. Log them.
	Warnings []string

	sources map[string]string
	// good holds the content of each file of the stack that was read whole,
	// by path: what a reload falls back on (LoadOptions.Previous).
	good map[string][]byte
}

// Layer is one file of the stack and what became of it.
type Layer struct {
	// Name is default, remote, distribution, system, user, xdg or bus-file.
	Name string
	// Path is the file; "" for the bundled defaults.
	Path string
	// Status is "loaded", "loaded (bundled)", "not found", "error",
	// StatusSkipped, StatusKept or "skipped: system.disable_user_config"
	// (or ..._remote_config).
	Status string
	// Err is why the file could not be read or parsed, with StatusSkipped
	// and StatusKept.
	Err *Error
}

// Source returns the layer that set a key: a websocket key ("port") or
// "log_level". Values look like "default (bundled)", "system
// /etc/mycroft/mycroft.conf", "xdg /etc/xdg/mycroft/mycroft.conf", "env
// OVOS_BUS_PORT", "flag --port" or "built-in" when no layer set it; an object
// several layers added to lists them joined by " + ".
func (p *Provenance) Source(key string) string {
	if p == nil {
		return ""
	}
	return p.sources[key]
}

// Keys lists the keys Print shows, in order: the websocket keys, then
// log_level.
func Keys() []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.name
	}
	return out
}

// redacted is Auth as Print shows it: tokens replaced by their names or
// their first characters.
func redacted(a bus.Auth) any {
	type perms struct {
		Name         string  `json:"name,omitempty"`
		Set          string  `json:"permissions,omitempty"`
		Emit         any     `json:"emit,omitempty"` // absent (every type) apart from [] (none)
		Receive      any     `json:"receive,omitempty"`
		Rate         float64 `json:"rate,omitempty"`
		Burst        int     `json:"burst,omitempty"`
		ReplyRouting bool    `json:"reply_routing,omitempty"`
	}
	list := func(l []string) any {
		if l == nil {
			return nil
		}
		return l
	}
	show := func(p bus.Permissions) perms {
		return perms{p.Name, p.Set, list(p.Emit), list(p.Receive), p.Rate, p.Burst, p.ReplyRouting}
	}
	tokens := map[string]perms{}
	for i, tok := range slices.Sorted(maps.Keys(a.Tokens)) {
		p := a.Tokens[tok]
		shown := bus.Redact(tok)
		if _, dup := tokens[shown]; dup || shown == "…" {
			shown = fmt.Sprintf("token %d", i+1)
		}
		tokens[shown] = show(p)
	}
	sets := map[string]perms{}
	for name, p := range a.Sets {
		sets[name] = show(p)
	}
	networks := a.Networks
	if networks == nil {
		networks = map[string]string{}
	}
	return struct {
		Required    bool              `json:"required"`
		Loopback    string            `json:"loopback"`
		Networks    map[string]string `json:"networks"`
		Anyone      string            `json:"anyone"`
		Permissions map[string]perms  `json:"permissions"`
		Tokens      map[string]perms  `json:"tokens"`
	}{a.Required, a.Loopback, networks, a.Anyone, sets, tokens}
}

// Print writes the merged configuration, one key per line with the layer
// that set it, after the list of files considered. It is the output of
// `ovbus serve --print-config`. Tokens are not shown. p may be nil.
func (c *Config) Print(w io.Writer, p *Provenance) error {
	var b strings.Builder
	if p != nil && len(p.Layers) > 0 {
		b.WriteString("# layers, lowest priority first (then OVOS_BUS_* variables, then flags):\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for _, l := range p.Layers {
			path := l.Path
			if path == "" {
				path = "(bundled)"
			}
			fmt.Fprintf(tw, "#   %s\t%s\t%s\n", l.Name, path, l.Status)
		}
		tw.Flush()
		for _, l := range p.Broken() {
			b.WriteString("# error: " + l.Err.Error() + " (" + l.Status + ")\n")
		}
		for _, warn := range p.Warnings {
			b.WriteString("# warning: " + warn + "\n")
		}
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	section := func(name string) { fmt.Fprintf(tw, "%s:\t\t\n", name) }
	section("websocket")
	for _, k := range keys {
		if k.kind == kindLevel {
			section("logging")
		}
		v, err := json.Marshal(k.value(c))
		if err != nil {
			v = []byte(fmt.Sprintf("%v", k.value(c)))
		}
		src := ""
		if p != nil {
			src = "# " + p.Source(k.name)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.name, v, src)
	}
	tw.Flush()
	out := regexp.MustCompile(`(?m)[ \t]+$`).ReplaceAllString(b.String(), "")
	_, err := io.WriteString(w, out)
	return err
}
