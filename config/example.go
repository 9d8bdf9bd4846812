package config

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteExample writes a commented mycroft.conf that sets every key ovbus reads to its built-in
// value, each with its meaning, its variable and flag, and whether a SIGHUP applies a change
// (live) or it needs a restart. It is driven by the key table, so it lists every key there is;
// deploy/mycroft.conf is its output, and a test keeps the two equal.
func WriteExample(w io.Writer) error {
	def := Default()
	var b strings.Builder
	b.WriteString(`// An example mycroft.conf with every key ovbus reads, each set to its built-in
// value: copy the keys you change into /etc/mycroft/mycroft.conf (system) or
// ~/.config/mycroft/mycroft.conf (user). Lines whose first characters are //
// are comments, as in every OVOS config file; the rest is JSON. A key set to
// null takes its built-in value. The whole OVOS stack, the OVOS_BUS_*
// variables and the flags: ovbus serve --help, and config/doc.go. What a
// running bus uses and where each value came from: ovbus serve --print-config.
//
// Made from config's key table by
//   go test ./config -run TestExampleConf -update
// a test fails when this file and the table disagree.
{
  "websocket": {
`)
	var ws []*key
	var level *key
	for i := range keys {
		if keys[i].kind == kindLevel {
			level = &keys[i]
			continue
		}
		ws = append(ws, &keys[i])
	}
	// A dotted key ("cluster.name") is written inside its section's object;
	// the keys of one section stand together in the table.
	type item struct {
		section string
		keys    []*key
	}
	var items []item
	for _, k := range ws {
		section, _, nested := strings.Cut(k.name, ".")
		if !nested {
			section = ""
		}
		if n := len(items); section != "" && n > 0 && items[n-1].section == section {
			items[n-1].keys = append(items[n-1].keys, k)
			continue
		}
		items = append(items, item{section, []*key{k}})
	}
	writeKeys := func(indent string, ks []*key, last bool) error {
		for i, k := range ks {
			v, err := exampleValue(def, k)
			if err != nil {
				return err
			}
			writeKeyComment(&b, indent, k)
			comma := ","
			if last && i == len(ks)-1 {
				comma = ""
			}
			name := k.name
			if _, sub, ok := strings.Cut(k.name, "."); ok {
				name = sub
			}
			fmt.Fprintf(&b, "%s%q: %s%s\n", indent, name, v, comma)
			if i < len(ks)-1 {
				b.WriteString("\n")
			}
		}
		return nil
	}
	for i, it := range items {
		last := i == len(items)-1
		if it.section == "" {
			if err := writeKeys("    ", it.keys, last); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(&b, "    %q: {\n", it.section)
			if err := writeKeys("      ", it.keys, true); err != nil {
				return err
			}
			comma := ","
			if last {
				comma = ""
			}
			fmt.Fprintf(&b, "    }%s\n", comma)
		}
		if !last {
			b.WriteString("\n")
		}
	}
	b.WriteString("  },\n\n  \"logging\": {\n    \"bus\": {\n")
	if level != nil {
		v, err := exampleValue(def, level)
		if err != nil {
			return err
		}
		writeKeyComment(&b, "      ", level)
		b.WriteString("      // (logging.log_level, for every OVOS service, applies when this is not set)\n")
		fmt.Fprintf(&b, "      %q: %s\n", level.name, v)
	}
	b.WriteString("    }\n  }\n}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeKeyComment writes the comment lines above a key: its meaning, then its variable, flag and
// reload.
func writeKeyComment(b *strings.Builder, indent string, k *key) {
	fmt.Fprintf(b, "%s// %s", indent, k.doc)
	switch k.name {
	case "max_msg_size":
		b.WriteString(" (× 1024 × 1024 bytes; fractions allowed)")
	case "log_file":
		b.WriteString(`; null: $XDG_STATE_HOME/<base>/bus.log (rotated, 50 MB × 3)`)
	case "ssl_cert", "ssl_key":
		b.WriteString("; null: unless both are set, ssl uses a self-signed pair made on first start")
	case "auth":
		b.WriteString(`: a client without a token gets the permission set of where it connects from:`)
		for _, line := range []string{
			`loopback (127.0.0.0/8, ::1) "all" by default, a network of "networks" its set, anyone else "refuse" by default.`,
			`A client showing a token gets the token's: ws://HOST:PORT/core/TOKEN (the route, "/", the token: what a stock`,
			`OVOS client sends from its mycroft.conf), ?token=TOKEN or Authorization: Bearer TOKEN. For example`,
			`  "permissions": {"satellite": {"emit": ["recognizer_loop:*", "ovos.session.sync"], "rate": 20, "reply_routing": true}},`,
			`  "networks": {"192.168.1.0/24": "satellite"},`,
			`  "tokens": {"<a long random secret>": {"name": "kitchen", "permissions": "satellite"}}`,
			`(emit/receive: message types, absent: all, empty: none; rate: messages per second; README "Securing the bus").`,
		} {
			fmt.Fprintf(b, "\n%s// %s", indent, line)
		}
	}
	b.WriteString("\n")
	var how []string
	if len(k.env) > 0 {
		how = append(how, "variable "+strings.Join(k.env, ", "))
	}
	if k.flag != "" {
		how = append(how, "flag --"+k.flag)
	}
	how = append(how, "reload: "+k.when().String())
	fmt.Fprintf(b, "%s// %s\n", indent, strings.Join(how, "; "))
}

// exampleValue is the key's built-in value as JSON; null for a value made at run time.
func exampleValue(def *Config, k *key) (string, error) {
	if k.kind == kindFile || k.name == "log_file" {
		return "null", nil
	}
	v, err := json.Marshal(k.value(def))
	if err != nil {
		return "", fmt.Errorf("config: example value of %s: %w", k.name, err)
	}
	// One line, spaced as people write it: {"required": false, "tokens": {}}.
	return strings.NewReplacer(`","`, `", "`, `":`, `": `, `,"`, `, "`).Replace(string(v)), nil
}
