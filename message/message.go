// Package message is the OVOS bus message (docs/protocol.md §9), shared by
// package bus and package client: a JSON object {"type", "data", "context"},
// written compactly in that key order, parsed tolerantly, with Reply,
// Forward and Response as ovos-bus-client's Message has them. It depends on
// the standard library only.
package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Message is an OVOS bus message: a JSON object {"type": ..., "data": {...}, "context": {...}}
// (docs/protocol.md §9).
//
// Data and Context hold what encoding/json decodes into an any: numbers are float64, objects are
// map[string]any, arrays are []any. A Message delivered to handlers is shared by every handler
// that receives it: treat it as read-only (use Reply, Forward or Clone to derive a new one).
type Message struct {
	Type    string
	Data    map[string]any
	Context map[string]any
}

// New returns a Message of type typ with the given data and no context.
func New(typ string, data map[string]any) Message {
	return Message{Type: typ, Data: data}
}

// MarshalJSON encodes m compactly with the keys in the order type, data, context, as the Python
// client does; a nil Data or Context is written as {}. HTML characters (<, >, &) are not escaped
// (json.Marshal escapes them in what MarshalJSON returns; Emit and String do not).
func (m Message) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(64)
	buf.WriteString(`{"type":`)
	if err := writeJSON(&buf, m.Type); err != nil {
		return nil, err
	}
	buf.WriteString(`,"data":`)
	if err := writeObject(&buf, m.Data); err != nil {
		return nil, fmt.Errorf("message: %q: data: %w", m.Type, err)
	}
	buf.WriteString(`,"context":`)
	if err := writeObject(&buf, m.Context); err != nil {
		return nil, fmt.Errorf("message: %q: context: %w", m.Type, err)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func writeObject(buf *bytes.Buffer, v map[string]any) error {
	if len(v) == 0 {
		buf.WriteString("{}")
		return nil
	}
	return writeJSON(buf, v)
}

func writeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
	return nil
}

// UnmarshalJSON decodes an OVOS message with the same rules as Parse.
func (m *Message) UnmarshalJSON(b []byte) error {
	msg, err := Parse(b)
	if err != nil {
		return err
	}
	*m = msg
	return nil
}

// String returns the message's JSON encoding (or a description of the encoding error).
func (m Message) String() string {
	b, err := m.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("<message %q: %v>", m.Type, err)
	}
	return string(b)
}

// Clone returns a deep copy of m.
func (m Message) Clone() Message {
	return Message{Type: m.Type, Data: deepCopyMap(m.Data), Context: deepCopyMap(m.Context)}
}

// Forward returns a message of type typ carrying data and a copy of m's context, unchanged: the
// message continues to the same destination. (Python: Message.forward.)
func (m Message) Forward(typ string, data map[string]any) Message {
	return Message{Type: typ, Data: data, Context: deepCopyMap(m.Context)}
}

// Reply returns a message of type typ carrying data and a copy of m's context in which "source" and
// "destination" are swapped (when both are present). As in the Python client, a "destination" key in
// data first replaces the context's destination. (Python: Message.reply.)
func (m Message) Reply(typ string, data map[string]any) Message {
	ctx := deepCopyMap(m.Context)
	if d, ok := data["destination"]; ok {
		if ctx == nil {
			ctx = map[string]any{}
		}
		ctx["destination"] = d
	}
	src, okS := ctx["source"]
	dst, okD := ctx["destination"]
	if okS && okD {
		ctx["source"], ctx["destination"] = dst, src
	}
	return Message{Type: typ, Data: data, Context: ctx}
}

// Response returns Reply(m.Type+".response", data): the reply that WaitForResponse expects by
// default. (Python: Message.response.)
func (m Message) Response(data map[string]any) Message {
	return m.Reply(m.Type+".response", data)
}

// SessionID returns context.session.session_id, or "" when there is none.
func (m Message) SessionID() string {
	s, _ := m.Context["session"].(map[string]any)
	id, _ := s["session_id"].(string)
	return id
}

func deepCopyMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = deepCopy(v)
	}
	return out
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return deepCopyMap(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}

// Errors reported for frames that are not OVOS messages. Every error Parse returns wraps
// ErrNotMessage and exactly one of the others; test with errors.Is.
var (
	ErrNotMessage = errors.New("not an OVOS message")
	ErrNotJSON    = errors.New("frame is not JSON")
	ErrNotObject  = errors.New("frame is not a JSON object")
	ErrNoType     = errors.New(`frame has no string "type"`)
	ErrBadField   = errors.New(`"data" or "context" is not an object`)
	// ErrEncrypted marks an encrypted message {"ciphertext","tag","nonce"} (websocket.secret_key):
	// a legitimate frame that cannot be read without the key; the bus relays it untouched.
	ErrEncrypted = errors.New("frame is an encrypted message")
	// ErrBinary marks a binary frame: OVOS messages are text frames.
	ErrBinary = errors.New("binary frame")
)

func notMessage(kind error, detail string) error {
	if detail == "" {
		return fmt.Errorf("message: %w: %w", ErrNotMessage, kind)
	}
	return fmt.Errorf("message: %w: %w: %s", ErrNotMessage, kind, detail)
}

// Parse decodes one frame into a Message. It is tolerant: a missing or null "data" or "context"
// becomes nil, unknown top-level keys are ignored. Frames that are not OVOS messages return an error
// wrapping ErrNotMessage and one of ErrNotJSON, ErrNotObject, ErrNoType, ErrBadField, ErrEncrypted.
func Parse(b []byte) (Message, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		if !json.Valid(b) {
			return Message{}, notMessage(ErrNotJSON, excerpt(b))
		}
		return Message{}, notMessage(ErrNotObject, excerpt(b))
	}
	if raw == nil { // the JSON literal null
		return Message{}, notMessage(ErrNotObject, "null")
	}
	t, ok := raw["type"]
	if !ok {
		if _, c := raw["ciphertext"]; c {
			if _, n := raw["nonce"]; n {
				return Message{}, notMessage(ErrEncrypted, "")
			}
		}
		return Message{}, notMessage(ErrNoType, excerpt(b))
	}
	var m Message
	if string(t) == "null" {
		return Message{}, notMessage(ErrNoType, "type is null")
	}
	if err := json.Unmarshal(t, &m.Type); err != nil {
		return Message{}, notMessage(ErrNoType, "type is "+excerpt(t))
	}
	if d, ok := raw["data"]; ok {
		if err := json.Unmarshal(d, &m.Data); err != nil {
			return Message{}, notMessage(ErrBadField, "data is "+excerpt(d))
		}
	}
	if c, ok := raw["context"]; ok {
		if err := json.Unmarshal(c, &m.Context); err != nil {
			return Message{}, notMessage(ErrBadField, "context is "+excerpt(c))
		}
	}
	return m, nil
}

// excerpt quotes at most 64 bytes of b for an error message.
func excerpt(b []byte) string {
	const n = 64
	s := string(b)
	if len(s) > n {
		s = s[:n] + "..."
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return fmt.Sprintf("%q", s)
}

// ParseFrame is Parse for a WebSocket data frame: a binary frame is not an OVOS message
// (ErrBinary), a text frame is parsed.
func ParseFrame(binary bool, b []byte) (Message, error) {
	if binary {
		return Message{}, notMessage(ErrBinary, "")
	}
	return Parse(b)
}
