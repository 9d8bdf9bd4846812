package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/ovbus/ovbus/ws"
)

// Message is an OVOS bus message (spec §9): a JSON object with a type, data
// and context, serialised compactly in that key order.
type Message struct {
	Type    string
	Data    map[string]any
	Context map[string]any

	// Raw is the frame exactly as relayed, shared by every handler: do not
	// modify it. It is set on delivered messages only.
	Raw []byte
	// Binary reports that the frame was a binary frame.
	Binary bool
}

// MarshalJSON encodes m as ovos-bus-client does: {"type":...,"data":{...},
// "context":{...}}, with {} for nil maps and without HTML escaping.
func (m Message) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteString(`{"type":`)
	if err := enc.Encode(m.Type); err != nil {
		return nil, err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	for _, part := range []struct {
		key string
		val map[string]any
	}{{`,"data":`, m.Data}, {`,"context":`, m.Context}} {
		buf.WriteString(part.key)
		if part.val == nil {
			buf.WriteString("{}")
			continue
		}
		if err := enc.Encode(part.val); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// decodeMessage fills a Message from a relayed frame. Frames that are not a
// JSON object leave Type, Data and Context empty.
func decodeMessage(op ws.Opcode, payload []byte) Message {
	m := Message{Raw: payload, Binary: op == ws.OpBinary}
	var top map[string]json.RawMessage
	if json.Unmarshal(payload, &top) != nil {
		return m
	}
	_ = json.Unmarshal(top["type"], &m.Type)
	_ = json.Unmarshal(top["data"], &m.Data)
	_ = json.Unmarshal(top["context"], &m.Context)
	return m
}

// Handler handles a message delivered in-process. Handlers run one at a
// time, in the bus's order, on the bus's dispatcher goroutine: a handler
// that blocks delays the other handlers (never the socket clients), and one
// that falls further behind than the queue bounds misses messages.
type Handler func(Message)

type handlerRef struct{ h Handler }

// On subscribes h to the messages of type msgType, or to every frame
// (including those that are not JSON) with "*". It follows the bus from
// now on. The returned function unsubscribes h.
func (s *Server) On(msgType string, h Handler) (off func()) {
	d := s.dispatcher()
	ref := &handlerRef{h: h}
	d.mu.Lock()
	next := make(map[string][]*handlerRef, len(*d.handlers.Load())+1)
	for k, v := range *d.handlers.Load() {
		next[k] = v
	}
	next[msgType] = append(append([]*handlerRef(nil), next[msgType]...), ref)
	d.handlers.Store(&next)
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		next := make(map[string][]*handlerRef, len(*d.handlers.Load()))
		for k, v := range *d.handlers.Load() {
			next[k] = v
		}
		var keep []*handlerRef
		for _, r := range next[msgType] {
			if r != ref {
				keep = append(keep, r)
			}
		}
		if len(keep) == 0 {
			delete(next, msgType)
		} else {
			next[msgType] = keep
		}
		d.handlers.Store(&next)
	}
}

// dispatcher returns the in-process follower, starting it on first use.
func (s *Server) dispatcher() *dispatcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.local == nil {
		d := &dispatcher{s: s, f: newFollower(s.hub), done: make(chan struct{}), exited: make(chan struct{})}
		empty := map[string][]*handlerRef{}
		d.handlers.Store(&empty)
		s.hub.join(d.f)
		s.local = d
		go d.run()
	}
	return s.local
}

// dispatcher delivers the log to the in-process handlers: a follower like a
// socket client's writer.
type dispatcher struct {
	s        *Server
	f        *follower
	mu       sync.Mutex // serialises changes of handlers
	handlers atomic.Pointer[map[string][]*handlerRef]
	done     chan struct{}
	exited   chan struct{}
	stopOnce sync.Once
}

func (d *dispatcher) stop() {
	d.stopOnce.Do(func() { close(d.done) })
	d.s.hub.leave(d.f)
	d.s.noteProgress()
}

func (d *dispatcher) stopped() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func (d *dispatcher) run() {
	defer close(d.exited)
	batch := make([]*entry, 0, 64)
	for {
		var err error
		batch, err = d.f.next(context.Background(), d.done, nil, batch[:0], maxBatchFrames, maxBatchBytes)
		if err == ErrLagged {
			missed := d.f.skip()
			d.s.m.inprocDropped.Add(float64(missed))
			d.s.log.Warn("In-process handlers fell behind the queue bounds and missed messages", "missed", missed)
			continue
		}
		if err != nil {
			return
		}
		for _, e := range batch {
			d.deliver(e)
		}
		clear(batch)
		d.s.noteProgress()
	}
}

func (d *dispatcher) deliver(e *entry) {
	hs := *d.handlers.Load()
	if len(hs) == 0 {
		return
	}
	payload := e.pm.Payload()
	t := messageType(payload)
	var typed []*handlerRef
	if t != "*" {
		typed = hs[t]
	}
	all := hs["*"]
	if len(typed) == 0 && len(all) == 0 {
		return
	}
	m := decodeMessage(e.pm.Op(), payload)
	for _, list := range [2][]*handlerRef{typed, all} {
		for _, r := range list {
			d.call(r.h, m)
		}
	}
}

func (d *dispatcher) call(h Handler, m Message) {
	defer func() {
		if r := recover(); r != nil {
			d.s.log.Error("In-process handler panicked", "msg_type", m.Type, "panic", r)
		}
	}()
	h(m)
}
