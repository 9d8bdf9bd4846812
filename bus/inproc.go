package bus

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// In-process handlers. They run one at a time, in the bus's order, on the
// bus's dispatcher goroutine, which follows the log like a session's writer:
// a handler that blocks delays the other handlers (never the socket
// clients), and handlers that fall further behind than the queue bounds
// miss messages (counted in ovbus_inprocess_dropped_total). A handler that
// panics is logged and keeps receiving.

// handlerRef is one registered handler: of messages (m) or of frames (f).
type handlerRef struct {
	m func(message.Message)
	f func(Frame)
}

// handlerSet is what the dispatcher calls; it is replaced, never changed.
type handlerSet struct {
	byType map[string][]*handlerRef // "*": every OVOS message
	frames []*handlerRef
}

// On calls h for every OVOS message of type msgType ("*": every message)
// relayed from now on, sockets' and Emit's alike. Frames that are not OVOS
// messages (docs/protocol.md §9) reach only OnFrame handlers. off
// unregisters h.
func (s *Server) On(msgType string, h func(message.Message)) (off func()) {
	ref := &handlerRef{m: h}
	return s.dispatcher().change(func(hs *handlerSet) {
		hs.byType[msgType] = append(slices.Clip(hs.byType[msgType]), ref)
	}, func(hs *handlerSet) {
		keep := slices.DeleteFunc(slices.Clone(hs.byType[msgType]), func(r *handlerRef) bool { return r == ref })
		if len(keep) == 0 {
			delete(hs.byType, msgType)
		} else {
			hs.byType[msgType] = keep
		}
	})
}

// OnFrame calls h for every frame relayed from now on, OVOS message or not
// (text that is not JSON, binary frames, encrypted messages). off
// unregisters h.
func (s *Server) OnFrame(h func(Frame)) (off func()) {
	ref := &handlerRef{f: h}
	return s.dispatcher().change(func(hs *handlerSet) {
		hs.frames = append(slices.Clip(hs.frames), ref)
	}, func(hs *handlerSet) {
		hs.frames = slices.DeleteFunc(slices.Clone(hs.frames), func(r *handlerRef) bool { return r == ref })
	})
}

// change applies add to a copy of the handler set and returns the function
// that applies remove (once).
func (d *dispatcher) change(add, remove func(*handlerSet)) (off func()) {
	apply := func(fn func(*handlerSet)) {
		d.mu.Lock()
		defer d.mu.Unlock()
		old := d.handlers.Load()
		next := &handlerSet{byType: maps.Clone(old.byType), frames: old.frames}
		fn(next)
		d.handlers.Store(next)
	}
	apply(add)
	return sync.OnceFunc(func() { apply(remove) })
}

// dispatcher returns the in-process follower, starting it on first use.
func (s *Server) dispatcher() *dispatcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.local == nil {
		d := &dispatcher{s: s, f: newFollower(s.hub), done: make(chan struct{}), exited: make(chan struct{})}
		d.handlers.Store(&handlerSet{byType: map[string][]*handlerRef{}})
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
	handlers atomic.Pointer[handlerSet]
	done     chan struct{}
	exited   chan struct{}
	stopOnce sync.Once
}

func (d *dispatcher) stop() {
	d.stopOnce.Do(func() { close(d.done) })
	d.s.hub.leave(d.f)
	d.s.noteProgress()
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
	if e.to != 0 {
		return // a notice for one client
	}
	hs := d.handlers.Load()
	if len(hs.frames) > 0 {
		f := d.s.frame(e)
		for _, r := range hs.frames {
			d.call(f.Type(), func() { r.f(f) })
		}
	}
	if len(hs.byType) == 0 || e.msg.Op() != ws.OpText {
		return
	}
	payload := e.msg.Payload()
	t := messageType(payload)
	typed, all := hs.byType[t], hs.byType["*"]
	if t == "*" {
		typed = nil
	}
	if len(typed) == 0 && len(all) == 0 {
		return
	}
	m, err := message.Parse(payload)
	if err != nil {
		return // not an OVOS message: OnFrame handlers only
	}
	for _, list := range [2][]*handlerRef{typed, all} {
		for _, r := range list {
			d.call(m.Type, func() { r.m(m) })
		}
	}
}

// call runs one handler call, logging a panic.
func (d *dispatcher) call(msgType string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			d.s.log.Error("In-process handler panicked", "msg_type", msgType, "panic", r)
		}
	}()
	fn()
}
