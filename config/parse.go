package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// sep joins the parts of an internal key path. A control character rather
// than "." so that map keys holding dots (auth tokens) stay one part.
const sep = "\x1f"

// join returns the internal path of key below prefix.
func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + sep + key
}

// dotted renders an internal path for people: websocket.port.
func dotted(path string) string { return strings.ReplaceAll(path, sep, ".") }

// pos is a 1-based line and column in a file; the zero value means unknown.
type pos struct{ line, col int }

// tree is a parsed configuration document: nested map[string]any and []any
// holding string, bool, int64, float64 or nil, with the position of every
// key that the parser reported.
type tree struct {
	data map[string]any
	pos  map[string]pos // internal path -> where its key is written
}

// format says how a file is parsed.
type format int

const (
	formatJSON format = iota // JSON with whole-line // and # comments
	formatYAML
)

// formatFor picks the format the way ovos-config does: .yml and .yaml are
// YAML, everything else is commented JSON.
func formatFor(path string) format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yml", ".yaml":
		return formatYAML
	}
	return formatJSON
}

// sniffFormat is formatFor for OVOS_BUS_CONFIG_FILE, which the Rust bus
// reads with a YAML parser whatever its name: .json and .conf files and any
// file whose first code character is '{' are commented JSON, the rest YAML.
func sniffFormat(path string, data []byte) format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yml", ".yaml":
		return formatYAML
	case ".json", ".conf":
		return formatJSON
	}
	for _, line := range bytes.Split(stripComments(data), []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if t[0] == '{' {
				return formatJSON
			}
			return formatYAML
		}
	}
	return formatJSON
}

// parse decodes data in format f. Errors are *Error values naming file and,
// when the parser knows it, the line and column.
func parse(file string, data []byte, f format) (*tree, error) {
	if f == formatYAML {
		return parseYAML(file, data)
	}
	return parseJSON(file, data)
}

var utf8BOM = []byte("\xef\xbb\xbf")

// stripComments blanks every line whose first non-blank characters are //
// or #, the comment syntax of mycroft.conf. Blanked bytes become spaces, so
// byte offsets, lines and columns stay those of the original file.
func stripComments(data []byte) []byte {
	out := bytes.Clone(data)
	start := 0
	for start < len(out) {
		end := bytes.IndexByte(out[start:], '\n')
		if end < 0 {
			end = len(out)
		} else {
			end += start
		}
		line := out[start:end]
		t := bytes.TrimLeft(line, " \t\r\f\v")
		if bytes.HasPrefix(t, []byte("//")) || bytes.HasPrefix(t, []byte("#")) {
			for i := range line {
				if line[i] != '\r' {
					line[i] = ' '
				}
			}
		}
		start = end + 1
	}
	return out
}

// lineCol converts a byte offset into a 1-based line and column (in bytes).
func lineCol(data []byte, off int64) pos {
	if off < 0 {
		off = 0
	}
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return pos{line, col}
}

// jsonParser walks a json.Decoder token by token so that it can note where
// each key sits; encoding/json alone reports no positions.
type jsonParser struct {
	file string
	data []byte
	dec  *json.Decoder
	pos  map[string]pos
}

func parseJSON(file string, raw []byte) (*tree, error) {
	data := stripComments(raw)
	if bytes.HasPrefix(data, utf8BOM) {
		copy(data, "   ") // blanked to keep offsets
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// An empty or all-comment file is an empty configuration, as a
		// freshly touched mycroft.conf is in practice.
		return &tree{data: map[string]any{}, pos: map[string]pos{}}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &jsonParser{file: file, data: data, dec: dec, pos: map[string]pos{}}
	start := p.next()
	tok, err := dec.Token()
	if err != nil {
		return nil, yamlHint(p.syntaxErr(err), data)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, yamlHint(&Error{File: file, Line: start.line, Col: start.col,
			Msg: "invalid JSON: the top level must be an object, got " + describeToken(tok)}, data)
	}
	obj, err := p.object("")
	if err != nil {
		return nil, err
	}
	trailing := p.next()
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, p.syntaxErr(err)
		}
		return nil, &Error{File: file, Line: trailing.line, Col: trailing.col,
			Msg: "invalid JSON: unexpected data after the top-level object"}
	}
	return &tree{data: obj, pos: p.pos}, nil
}

// yamlKey matches a line that opens a YAML document or mapping: "---", "key:" or "key: value".
var yamlKey = regexp.MustCompile(`^(---|[A-Za-z_][\w.-]*\s*:(\s|$))`)

// yamlHint adds to the error of a JSON file whose first line of code reads as YAML that YAML is
// read only from .yml and .yaml files, as ovos-config does (data has its comments blanked).
func yamlHint(err error, data []byte) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if yamlKey.Match(t) {
				e.Msg += "; this looks like YAML, which is read only from files named .yml or .yaml: " +
					"rename the file or write it as JSON"
			}
			break
		}
	}
	return err
}

// next returns the position of the next token: the decoder's offset moved
// past blanks and the separators ',' and ':'.
func (p *jsonParser) next() pos {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) {
		switch p.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return lineCol(p.data, off)
}

func (p *jsonParser) syntaxErr(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// From the token API, Offset is that of the offending byte.
		at := lineCol(p.data, se.Offset)
		return &Error{File: p.file, Line: at.line, Col: at.col, Msg: "invalid JSON: " + se.Error()}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		at := lineCol(p.data, int64(len(p.data)))
		return &Error{File: p.file, Line: at.line, Col: at.col, Msg: "invalid JSON: unexpected end of file"}
	}
	return &Error{File: p.file, Msg: "invalid JSON: " + err.Error()}
}

// object reads the members of an object whose '{' was consumed.
func (p *jsonParser) object(path string) (map[string]any, error) {
	out := map[string]any{}
	for p.dec.More() {
		at := p.next()
		tok, err := p.dec.Token()
		if err != nil {
			return nil, p.syntaxErr(err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, &Error{File: p.file, Line: at.line, Col: at.col, Msg: "invalid JSON: expected a string key"}
		}
		child := join(path, key)
		p.pos[child] = at
		v, err := p.value(child)
		if err != nil {
			return nil, err
		}
		out[key] = v // a repeated key keeps its last value, as in Python
	}
	if _, err := p.dec.Token(); err != nil { // the closing '}'
		return nil, p.syntaxErr(err)
	}
	return out, nil
}

func (p *jsonParser) value(path string) (any, error) {
	at := p.next()
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.syntaxErr(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return p.object(path)
		case '[':
			var list []any
			for i := 0; p.dec.More(); i++ {
				v, err := p.value(join(path, strconv.Itoa(i)))
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := p.dec.Token(); err != nil {
				return nil, p.syntaxErr(err)
			}
			if list == nil {
				list = []any{}
			}
			return list, nil
		}
		return nil, &Error{File: p.file, Line: at.line, Col: at.col, Msg: "invalid JSON: unexpected " + t.String()}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		f, err := t.Float64()
		if err != nil || math.IsInf(f, 0) {
			return nil, &Error{File: p.file, Line: at.line, Col: at.col, Msg: "invalid JSON: number out of range: " + t.String()}
		}
		return f, nil
	default: // string, bool, nil
		return t, nil
	}
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return "'" + t.String() + "'"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

// yamlLine matches the line number in go-yaml's syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func parseYAML(file string, data []byte) (*tree, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
		}
		return nil, &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	t := &tree{data: map[string]any{}, pos: map[string]pos{}}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return t, nil // empty document
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return t, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Col: root.Column,
			Msg: "invalid YAML: the top level must be a mapping"}
	}
	y := yamlWalker{file: file, pos: t.pos}
	m, err := y.mapping(root, "", 0)
	if err != nil {
		return nil, err
	}
	t.data = m
	return t, nil
}

type yamlWalker struct {
	file string
	pos  map[string]pos
}

// maxYAMLDepth bounds alias expansion (a "billion laughs" file).
const maxYAMLDepth = 64

func (y *yamlWalker) err(n *yaml.Node, format string, args ...any) error {
	return &Error{File: y.file, Line: n.Line, Col: n.Column, Msg: "invalid YAML: " + fmt.Sprintf(format, args...)}
}

func (y *yamlWalker) mapping(n *yaml.Node, path string, depth int) (map[string]any, error) {
	out := map[string]any{}
	if err := y.mergeInto(out, n, path, depth); err != nil {
		return nil, err
	}
	return out, nil
}

// mergeInto adds the pairs of mapping n to out; "<<" merge keys add the
// pairs of the referenced mappings without overriding explicit keys.
func (y *yamlWalker) mergeInto(out map[string]any, n *yaml.Node, path string, depth int) error {
	if depth > maxYAMLDepth {
		return y.err(n, "nested too deeply")
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return y.err(k, "mapping keys must be scalars")
		}
		child := join(path, k.Value)
		y.pos[child] = pos{k.Line, k.Column}
		val, err := y.value(v, child, depth+1)
		if err != nil {
			return err
		}
		out[k.Value] = val
	}
	for _, m := range merges {
		src := []*yaml.Node{m}
		if m.Kind == yaml.AliasNode {
			src[0] = m.Alias
		}
		if src[0].Kind == yaml.SequenceNode {
			src = src[0].Content
		}
		for _, s := range src {
			if s.Kind == yaml.AliasNode {
				s = s.Alias
			}
			if s == nil || s.Kind != yaml.MappingNode {
				return y.err(m, "a << merge key needs a mapping")
			}
			extra := map[string]any{}
			if err := y.mergeInto(extra, s, path, depth+1); err != nil {
				return err
			}
			for k, v := range extra {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
	}
	return nil
}

func (y *yamlWalker) value(n *yaml.Node, path string, depth int) (any, error) {
	if depth > maxYAMLDepth {
		return nil, y.err(n, "nested too deeply")
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, y.err(n, "unknown alias")
		}
		return y.value(n.Alias, path, depth+1)
	case yaml.MappingNode:
		return y.mapping(n, path, depth)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			v, err := y.value(c, join(path, strconv.Itoa(i)), depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, y.err(n, "%v", err)
		}
		switch x := v.(type) {
		case int:
			return int64(x), nil
		case int64, float64, string, bool, nil:
			return x, nil
		case uint64:
			if x > math.MaxInt64 {
				return float64(x), nil
			}
			return int64(x), nil
		default:
			// timestamps, binary: keep the text as written
			return n.Value, nil
		}
	}
	return nil, y.err(n, "unsupported node")
}
