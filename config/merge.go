package config

import (
	"strings"
)

// merger deep-merges layers the way ovos-config's merge_dict does (nested
// objects key by key, any other value replaces) and remembers which layers
// set each path.
type merger struct {
	data map[string]any
	// origins lists, for each internal path, the layers that set it or
	// something below it since it was last replaced as a whole.
	origins map[string][]*layer
	// logLevelPath is the path log_level was read from, for errors.
	logLevelPath string
}

func newMerger() *merger {
	return &merger{data: map[string]any{}, origins: map[string][]*layer{}}
}

func (m *merger) merge(base, delta map[string]any, l *layer, prefix string) {
	for k, dv := range delta {
		p := join(prefix, k)
		if dm, ok := dv.(map[string]any); ok {
			if bm, ok := base[k].(map[string]any); ok {
				if o := m.origins[p]; len(o) == 0 || o[len(o)-1] != l {
					m.origins[p] = append(o, l)
				}
				m.merge(bm, dm, l, p)
				continue
			}
		}
		base[k] = deepCopy(dv)
		for q := range m.origins {
			if strings.HasPrefix(q, p+sep) {
				delete(m.origins, q)
			}
		}
		m.setOrigins(p, dv, l)
	}
}

// setOrigins records l as the only origin of p and everything below it.
func (m *merger) setOrigins(p string, v any, l *layer) {
	m.origins[p] = []*layer{l}
	if vm, ok := v.(map[string]any); ok {
		for k, e := range vm {
			m.setOrigins(join(p, k), e, l)
		}
	}
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		n := make(map[string]any, len(x))
		for k, e := range x {
			n[k] = deepCopy(e)
		}
		return n
	case []any:
		n := make([]any, len(x))
		for i, e := range x {
			n[i] = deepCopy(e)
		}
		return n
	}
	return v
}

// origin returns the layer that last set path or, failing that, the nearest
// ancestor of path; nil when no layer did.
func (m *merger) origin(path string) *layer {
	for {
		if o := m.origins[path]; len(o) > 0 {
			return o[len(o)-1]
		}
		i := strings.LastIndex(path, sep)
		if i < 0 {
			return nil
		}
		path = path[:i]
	}
}

// label says which layers set path: "system /etc/mycroft/mycroft.conf", or
// several joined by " + " for an object that more than one layer added to.
func (m *merger) label(path string) string {
	o := m.origins[path]
	if len(o) == 0 {
		return builtIn
	}
	labels := make([]string, 0, len(o))
	for _, l := range o {
		labels = append(labels, l.label)
	}
	return strings.Join(labels, " + ")
}

// errorPath builds the error for a bad value at path, naming the layer that
// set it and, for a file, the line and column of the key.
func (m *merger) errorPath(path, msg string) *Error {
	return m.errorPathKey(path, dotted(path), msg)
}

// errorPathKey is errorPath with the key shown as displayKey (to keep auth
// tokens out of messages).
func (m *merger) errorPathKey(path, displayKey, msg string) *Error {
	e := &Error{Key: displayKey, Msg: msg}
	l := m.origin(path)
	if l == nil {
		return e
	}
	if l.file == "" {
		e.Source = l.label
		return e
	}
	e.File = l.file
	for q := path; ; {
		if p, ok := l.tree.pos[q]; ok {
			e.Line, e.Col = p.line, p.col
			break
		}
		i := strings.LastIndex(q, sep)
		if i < 0 {
			break
		}
		q = q[:i]
	}
	return e
}

// errorAt is errorPath for a key named by a validation failure.
func (m *merger) errorAt(k *key, with []string, msg string) *Error {
	if k.kind == kindLevel && m.logLevelPath != "" {
		return m.errorPath(m.logLevelPath, msg)
	}
	path := keyPath(k.name)
	if !m.unset(path) {
		return m.errorPath(path, msg)
	}
	// k holds its built-in value: the fault is in the value of another key
	// of the rule that a layer set, or else in the built-in values.
	for _, name := range with {
		if p := keyPath(name); !m.unset(p) {
			e := m.errorPath(p, msg)
			e.Key = dotted(path)
			return e
		}
	}
	return &Error{Source: builtIn, Key: dotted(path), Msg: msg}
}

// keyPath is the internal path of the key named name ("cluster.order").
func keyPath(name string) string { return join("websocket", strings.ReplaceAll(name, ".", sep)) }

// unset reports whether no layer set path, a key of an object: then it
// holds its built-in value. A path below a value that is not an object (an
// element of a list) is not unset: its value's layer is at fault.
func (m *merger) unset(path string) bool {
	var v any = m.data
	for _, seg := range strings.Split(path, sep) {
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = obj[seg]; !ok {
			return true
		}
	}
	return false
}
