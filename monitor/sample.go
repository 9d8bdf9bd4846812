package monitor

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// row is one message as the page shows it (the "row" of doc.go).
type row struct {
	Seq         uint64 `json:"seq"`
	Time        int64  `json:"time"` // unix ms
	Type        string `json:"type"`
	Size        int    `json:"size"`
	Kind        string `json:"kind"` // json, text or binary
	Origin      string `json:"origin,omitempty"`
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
	Session     string `json:"session,omitempty"`
	Payload     string `json:"payload,omitempty"`
	Preview     string `json:"preview,omitempty"`
	Truncated   bool   `json:"truncated,omitempty"`
}

// binaryPreview is how many bytes of a binary frame a page sees, in hex.
const binaryPreview = 256

// maxContextScan is the largest message whose context is decoded for the
// source, destination and session columns.
const maxContextScan = 1 << 20

// newRow describes f, whose type is typ, keeping at most maxPayload bytes of
// its payload.
func newRow(f bus.Frame, typ string, maxPayload int) row {
	r := row{Seq: f.Seq, Time: f.Time.UnixMilli(), Type: typ, Size: len(f.Payload), Origin: f.Origin}
	if f.Op == ws.OpBinary {
		r.Kind = "binary"
		p := f.Payload
		if len(p) > binaryPreview {
			p, r.Truncated = p[:binaryPreview], true
		}
		r.Preview = hexPreview(p)
		return r
	}
	r.Kind = "text"
	if len(f.Payload) <= maxContextScan {
		var m map[string]json.RawMessage
		if dec := json.NewDecoder(bytes.NewReader(f.Payload)); dec.Decode(&m) == nil && !dec.More() && m != nil {
			r.Kind = "json"
			var ctx map[string]json.RawMessage
			json.Unmarshal(m["context"], &ctx) // not an object: no columns
			r.Source = contextText(ctx["source"])
			r.Destination = contextText(ctx["destination"])
			var sess map[string]json.RawMessage
			json.Unmarshal(ctx["session"], &sess)
			r.Session = contextText(sess["session_id"])
		}
	} else if typ != "" {
		r.Kind = "json"
	}
	p := f.Payload
	if len(p) > maxPayload {
		p, r.Truncated = p[:maxPayload], true
		for len(p) > 0 { // do not cut a character in two
			if c, n := utf8.DecodeLastRune(p); c != utf8.RuneError || n > 1 {
				break
			}
			p = p[:len(p)-1]
		}
	}
	r.Payload = string(p)
	return r
}

// contextText renders a context value for a column: a string as it is, a
// list of strings joined by ", ", anything else as compact JSON, null or
// absent as "".
func contextText(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(v, &list) == nil {
		return strings.Join(list, ", ")
	}
	var b bytes.Buffer
	if json.Compact(&b, v) == nil {
		return b.String()
	}
	return string(v)
}

// hexPreview renders b as space-separated hex bytes, 16 to a line.
func hexPreview(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			if i%16 == 0 {
				sb.WriteByte('\n')
			} else {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(hex.EncodeToString([]byte{c}))
	}
	return sb.String()
}

// shortPayload is how much of a message a row carries once its batch has
// used its byte budget.
const shortPayload = 512

// sampler collects, for one page, what arrived since the last batch: every
// message the page's token may receive is counted, and at most budget of
// them (no type more than perType) are kept as rows; once the rows hold
// byteBudget bytes of payload, later rows carry only shortPayload bytes.
// add runs on the follower's goroutine and only counts and copies; take
// runs on the writer.
type sampler struct {
	perm       *bus.Permissions // nil: everything
	budget     int
	perType    int
	maxPayload int
	byteBudget int
	bytes      int // payload bytes in the rows of this batch

	mu       sync.Mutex
	b        batch
	perTypeN map[string]int
}

// batch is the "batch" message of doc.go.
type batch struct {
	T       string         `json:"t"`
	Rows    []row          `json:"rows"`
	Counts  map[string]int `json:"counts"`
	Total   int            `json:"total"`
	Skipped int            `json:"skipped"`
}

func newSampler(perm *bus.Permissions, budget, maxPayload, byteBudget int) *sampler {
	s := &sampler{perm: perm, budget: max(budget, 1), perType: max(budget/4, 1), maxPayload: maxPayload, byteBudget: byteBudget}
	s.reset()
	return s
}

func (s *sampler) reset() {
	s.b = batch{T: "batch", Rows: make([]row, 0, min(s.budget, 64)), Counts: make(map[string]int)}
	s.perTypeN = make(map[string]int)
	s.bytes = 0
}

// add counts frames and keeps the rows the budget allows.
func (s *sampler) add(frames []bus.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range frames {
		typ := f.Type()
		if s.perm != nil && !s.perm.CanReceive(typ) {
			continue
		}
		s.b.Counts[typ]++
		s.b.Total++
		if len(s.b.Rows) >= s.budget || s.perTypeN[typ] >= s.perType {
			s.b.Skipped++
			continue
		}
		s.perTypeN[typ]++
		limit := s.maxPayload
		if s.bytes >= s.byteBudget {
			limit = min(limit, shortPayload)
		}
		r := newRow(f, typ, limit)
		s.bytes += len(r.Payload) + len(r.Preview)
		s.b.Rows = append(s.b.Rows, r)
	}
}

// take returns what arrived since the last take, ok false when nothing did.
func (s *sampler) take() (b batch, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Total == 0 {
		return batch{}, false
	}
	b = s.b
	s.reset()
	return b, true
}
