package config

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// overrideTree builds the one-key tree a variable or flag contributes.
func overrideTree(k *key, text string) *tree {
	var v any = text
	if k.kind.list {
		list := []any{}
		for part := range strings.SplitSeq(text, ",") {
			if p := strings.TrimSpace(part); p != "" {
				list = append(list, p)
			}
		}
		v = list
	}
	segs := k.segments()
	for i := len(segs) - 1; i > 0; i-- {
		v = map[string]any{segs[i]: v}
	}
	data := map[string]any{"websocket": map[string]any{segs[0]: v}}
	if k.kind == kindLevel {
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
	for i := range keys {
		k := &keys[i]
		for _, name := range k.env {
			text, ok := e(name)
			if !ok {
				continue
			}
			if name == "OVOS_BUS_USE_SSL" && strings.TrimSpace(text) == "" {
				text = "true"
			}
			out = append(out, &layer{name: "env", label: "env " + name, tree: overrideTree(k, text)})
		}
	}
	return out
}

// FlagOverrides records the configuration flags given on a command line.
// Make one with RegisterFlags; pass it to Load in LoadOptions.Flags.
type FlagOverrides struct {
	set    []flagSetting // in the order given; a repeated flag keeps its last value
	strict strictFlag    // --strict-config
}

// strictFlag is --strict-config: strict mode when given, whatever
// OVOS_BUS_STRICT_CONFIG says (see broken.go).
type strictFlag struct{ set, on bool }

func (s *strictFlag) String() string {
	if s == nil || !s.set {
		return "" // the help names the default, as for the other flags
	}
	return strconv.FormatBool(s.on)
}

func (s *strictFlag) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	s.set, s.on = true, on
	return nil
}

func (s *strictFlag) IsBoolFlag() bool { return true }

type flagSetting struct {
	k    *key
	text string
}

// flagValue is the flag.Value of one configuration flag.
type flagValue struct {
	f    *FlagOverrides
	k    *key
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
		if fs.k == v.k {
			v.f.set = append(v.f.set[:i], v.f.set[i+1:]...)
			break
		}
	}
	v.f.set = append(v.f.set, flagSetting{v.k, s})
	return nil
}

func (v *flagValue) IsBoolFlag() bool { return v.k.kind.boolFlag }

// ArgName names the flag's value in the help (--port N).
func (v *flagValue) ArgName() string { return v.k.kind.arg }

// RegisterFlags registers the configuration flags on fs, one per key of
// the key table that has one (--host, --port, ..., --log-level; see the
// package documentation), and --strict-config. Only flags given on the command line override the
// configuration; their values are checked by Load, so fs.Parse accepts any
// text. Boolean flags may stand alone (--ssl) or take a value
// (--compression=false).
func RegisterFlags(fs *flag.FlagSet) *FlagOverrides {
	f := &FlagOverrides{}
	def := Default()
	for i := range keys {
		k := &keys[i]
		if k.flag == "" {
			continue
		}
		usage := k.doc + " (" + k.path() + "); " + defaultText(def, k) + "; env " + strings.Join(k.env, ", ")
		fs.Var(&flagValue{f: f, k: k}, k.flag, usage)
	}
	fs.Var(&f.strict, "strict-config", "stop on a configuration file that cannot be read or parsed, instead of skipping it "+
		"as ovos-config does; default false; env "+StrictEnv)
	return f
}

// Names returns the flags that were set, as "--port".
func (f *FlagOverrides) Names() []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, s := range f.set {
		out = append(out, "--"+s.k.flag)
	}
	return out
}

func (f *FlagOverrides) layers() []*layer {
	if f == nil {
		return nil
	}
	var out []*layer
	for _, s := range f.set {
		out = append(out, &layer{name: "flag", label: "flag --" + s.k.flag, tree: overrideTree(s.k, s.text)})
	}
	return out
}

// defaultText describes a key's built-in value for a flag's help text. A
// flag only overrides the configuration, so the built-in value is what
// applies when neither a file, a variable nor the flag sets the key.
func defaultText(def *Config, k *key) string {
	if k.name == "log_file" {
		return "default $XDG_STATE_HOME/<base>/bus.log"
	}
	v := k.value(def)
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
