package bus

import (
	"bytes"
	"encoding/json"
	"math/bits"
)

// This file holds the little JSON the hot path needs. The bus relays bytes
// unchanged and never decodes a whole message unless a rule asks for it: a
// scanner finds one member of an object without allocating, and anything it
// is not sure about goes to encoding/json, which decides.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// scanString returns the index after the string starting at b[i] == '"' and
// whether it holds an escape. ok is false when the string does not end. It
// jumps from quote to quote (bytes.IndexByte): a quote ends the string
// unless an odd run of backslashes precedes it.
func scanString(b []byte, i int) (end int, escaped, ok bool) {
	start := i + 1
	for i = start; ; {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return 0, false, false
		}
		i += q
		k := i
		for k > start && b[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1, bytes.IndexByte(b[start:i], '\\') >= 0, true
		}
		i++
	}
}

// skipValue returns the index after the JSON value starting at b[i]. It is
// lenient about scalars (the caller confirms doubtful verdicts with
// encoding/json) but exact about strings and nesting.
func skipValue(b []byte, i int) (end int, ok bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		end, _, ok = scanString(b, i)
		return end, ok
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				e, _, ok := scanString(b, i)
				if !ok {
					return 0, false
				}
				i = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	// number, true, false, null
	start := i
	for i < len(b) {
		c := b[i]
		if c == ',' || c == '}' || c == ']' || isSpace(c) {
			break
		}
		i++
	}
	return i, i > start
}

// findMember looks for the member name in the object starting at b[i] ==
// '{' and returns the span of its last occurrence's value (the last one wins
// in Python's json and in encoding/json). sure is false when the scanner
// cannot tell: a syntax error or an escaped key.
func findMember(b []byte, i int, name string) (vs, ve int, found, sure bool) {
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return 0, 0, false, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false, false
		}
		ke, esc, ok := scanString(b, i)
		if !ok || esc {
			return 0, 0, false, false
		}
		key := b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false, false
		}
		i = skipSpace(b, i+1)
		e, ok := skipValue(b, i)
		if !ok {
			return 0, 0, false, false
		}
		if string(key) == name {
			vs, ve, found = i, e, true
		}
		i = skipSpace(b, e)
		if i >= len(b) {
			return 0, 0, false, false
		}
		if b[i] == '}' {
			return vs, ve, found, true
		}
		if b[i] != ',' {
			return 0, 0, false, false
		}
		i = skipSpace(b, i+1)
	}
}

var sessionKey = []byte(`"session"`)

// carrierSuspect is the cheap test of the malformed-carrier rule
// (docs/protocol.md §3), run on every frame: false is certain, true must be
// confirmed by checkCarrier. In JSON every key named session is spelled
// "session", or with an escaped ASCII letter (hasEscapedASCII: the frame
// goes to the exact scan, sessionSuspect), and is followed by a colon; so
// when the value after every colon that follows "session" starts as an
// object or null, no context.session can break the rule, wherever it is.
// It looks at the colons only, found 64 bytes at a time with the
// backslashes (marks64: one pass, no call per colon), so it costs little
// more than a pass over the keys.
func carrierSuspect(b []byte) bool {
	escapes := false // a backslash seen, and hasEscapedASCII false
	for pos := 0; pos < len(b); {
		var colons, slashes uint64
		base := pos
		switch {
		case len(b)-pos >= 64:
			colons, slashes = marks64((*[64]byte)(b[pos:]))
			pos += 64
		case len(b) >= 64: // the last 64 bytes, less those already seen
			base = len(b) - 64
			colons, slashes = marks64((*[64]byte)(b[base:]))
			seen := ^uint64(0) << (pos - base)
			colons, slashes, pos = colons&seen, slashes&seen, len(b)
		default:
			var buf [64]byte
			copy(buf[:], b)
			colons, slashes = marks64(&buf)
			pos = len(b)
		}
		if slashes != 0 && !escapes {
			if hasEscapedASCII(b) {
				return sessionSuspect(b)
			}
			escapes = true
		}
		for ; colons != 0; colons &= colons - 1 {
			// Most colons follow a quote after anything but an n: no call.
			i := base + bits.TrailingZeros64(colons)
			if i >= 2 && (b[i-2] == 'n' || b[i-1] != '"') && sessionColon(b, i) {
				return sessionSuspect(b)
			}
		}
	}
	return false
}

// sessionColon reports whether the colon at b[i] follows the key "session"
// and the value after it starts as neither an object nor null.
func sessionColon(b []byte, i int) bool {
	k := i
	for k > 0 && isSpace(b[k-1]) {
		k--
	}
	if k < len(sessionKey) || b[k-2] != 'n' || string(b[k-len(sessionKey):k]) != string(sessionKey) {
		return false // not a key named session
	}
	k = skipSpace(b, i+1)
	return k >= len(b) || b[k] != '{' && !bytes.HasPrefix(b[k:], null)
}

// marks64Generic is marks64 (bit i of colons and backslashes: p[i] is ':'
// and '\\') a byte at a time.
func marks64Generic(p *[64]byte) (colons, backslashes uint64) {
	for i, c := range p {
		switch c {
		case ':':
			colons |= 1 << i
		case '\\':
			backslashes |= 1 << i
		}
	}
	return colons, backslashes
}

var null = []byte("null")

// hasEscapedASCII reports whether b contains \u00XX naming a printable ASCII
// character: the only way to spell the key "session" without the plain bytes.
func hasEscapedASCII(b []byte) bool {
	if bytes.IndexByte(b, '\\') < 0 {
		return false // most frames: one vectorised search
	}
	for {
		i := bytes.Index(b, []byte(`\u00`))
		if i < 0 || i+5 >= len(b) {
			return false
		}
		if c := b[i+4]; c >= '2' && c <= '7' {
			return true
		}
		b = b[i+4:]
	}
}

// sessionSuspect reports whether b may be a JSON object whose
// context.session is present, not null and not an object. false is certain;
// true must be confirmed by checkCarrier.
func sessionSuspect(b []byte) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false // not an object: relayed unchanged
	}
	cs, _, found, sure := findMember(b, i, "context")
	if !sure {
		return true
	}
	if !found || b[cs] != '{' {
		return false
	}
	ss, se, found, sure := findMember(b, cs, "session")
	if !sure {
		return true
	}
	if !found {
		return false
	}
	switch b[ss] {
	case '{':
		return false
	case 'n':
		return string(b[ss:se]) != "null"
	}
	return true
}

// rejection is what checkCarrier found in a malformed carrier.
type rejection struct {
	msgType     json.RawMessage // the frame's type, compact, or nil
	utteranceID json.RawMessage // context.utterance_id when truthy, compact
}

// checkCarrier applies the malformed-session-carrier rule (docs/protocol.md §3) exactly:
// the frame is a JSON object, its context is an object, and context.session
// is present, not null and not an object.
func checkCarrier(b []byte) (rejection, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil || top == nil {
		return rejection{}, false
	}
	var ctx map[string]json.RawMessage
	if json.Unmarshal(top["context"], &ctx) != nil || ctx == nil {
		return rejection{}, false
	}
	sess, ok := ctx["session"]
	if !ok {
		return rejection{}, false
	}
	sess = bytes.TrimSpace(sess)
	if len(sess) == 0 || sess[0] == '{' || string(sess) == "null" {
		return rejection{}, false
	}
	var r rejection
	if t, ok := top["type"]; ok {
		r.msgType = compact(t)
	}
	if u, ok := ctx["utterance_id"]; ok && truthy(u) {
		r.utteranceID = compact(u)
	}
	return r, true
}

func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

// truthy is Python's truth value of a JSON value.
func truthy(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}

// rejectedMessage builds the ovos.session.rejected message (docs/protocol.md §3),
// compact, in the key order type, data, context.
func rejectedMessage(r rejection) []byte {
	b := make([]byte, 0, 128+len(r.msgType)+len(r.utteranceID))
	b = append(b, `{"type":"ovos.session.rejected","data":{"msg_type":`...)
	if r.msgType == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, r.msgType...)
	}
	b = append(b, `,"reason":"malformed_carrier"},"context":{`...)
	if r.utteranceID != nil {
		b = append(b, `"utterance_id":`...)
		b = append(b, r.utteranceID...)
	}
	return append(b, "}}"...)
}

// messageType returns the top-level "type" of a JSON object message, or ""
// when there is none or it is not a string.
func messageType(b []byte) string {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return ""
	}
	vs, ve, found, sure := findMember(b, i, "type")
	if sure {
		if !found || b[vs] != '"' {
			return ""
		}
		if bytes.IndexByte(b[vs:ve], '\\') < 0 {
			return string(b[vs+1 : ve-1])
		}
		var s string
		if json.Unmarshal(b[vs:ve], &s) == nil {
			return s
		}
		return ""
	}
	var m map[string]json.RawMessage
	var s string
	if json.Unmarshal(b, &m) != nil || json.Unmarshal(m["type"], &s) != nil {
		return ""
	}
	return s
}
