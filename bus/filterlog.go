package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// filterLine builds the websocket.filter DEBUG line of the Tornado bus
// (docs/protocol.md §4): `<type> source: <source> destination: <destination>` then, on
// the next line, `SESSION: <session>`, values printed as Python prints them.
// It returns false for frames the Tornado bus does not log (not a JSON
// object with a string type).
func filterLine(b []byte) (msgType, line string, ok bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil || top == nil {
		return "", "", false
	}
	if json.Unmarshal(top["type"], &msgType) != nil {
		return "", "", false
	}
	var ctx map[string]json.RawMessage
	_ = json.Unmarshal(top["context"], &ctx)
	var sb strings.Builder
	sb.WriteString(msgType)
	sb.WriteString(" source: ")
	writeStr(&sb, ctx["source"], "[]")
	sb.WriteString(" destination: ")
	writeStr(&sb, ctx["destination"], "[]")
	sb.WriteString("\nSESSION: ")
	writeStr(&sb, ctx["session"], "None")
	return msgType, sb.String(), true
}

// writeStr writes what Python's str() prints for a JSON value: a string as
// it is, anything else as its repr; def when the value is absent.
func writeStr(sb *strings.Builder, raw json.RawMessage, def string) {
	if raw == nil {
		sb.WriteString(def)
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		sb.WriteString(s)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := writeRepr(dec, sb); err != nil {
		sb.Write(raw)
	}
}

// writeRepr writes Python's repr of the next JSON value of dec, keeping the
// order of object members as Python's dict does.
func writeRepr(dec *json.Decoder, sb *strings.Builder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		open, close := byte('['), byte(']')
		if v == '{' {
			open, close = '{', '}'
		}
		sb.WriteByte(open)
		for first := true; dec.More(); first = false {
			if !first {
				sb.WriteString(", ")
			}
			if open == '{' {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				ks, _ := k.(string)
				sb.WriteString(pyQuote(ks))
				sb.WriteString(": ")
			}
			if err := writeRepr(dec, sb); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		sb.WriteByte(close)
	case string:
		sb.WriteString(pyQuote(v))
	case json.Number:
		sb.WriteString(v.String())
	case bool:
		if v {
			sb.WriteString("True")
		} else {
			sb.WriteString("False")
		}
	case nil:
		sb.WriteString("None")
	default:
		fmt.Fprint(sb, v)
	}
	return nil
}

// pyQuote is Python's repr of a str.
func pyQuote(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var sb strings.Builder
	sb.Grow(len(s) + 2)
	sb.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(q):
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&sb, `\x%02x`, r)
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte(q)
	return sb.String()
}
