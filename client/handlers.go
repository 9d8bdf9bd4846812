package client

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ovbus/ovbus/message"
)

// What the client does with what it receives: handlers by message type
// (On, Once, OnFrame), called in order by one dispatcher, and the waits
// for one message (WaitFor, WaitForResponse).

// Frame is one frame received from the bus.
type Frame struct {
	Binary   bool
	Data     []byte    // the payload as received; shared, do not modify
	Received time.Time // when it was read
	// Message is the decoded message when Err is nil.
	Message message.Message
	// Err says why the frame is not an OVOS message (it wraps message.ErrNotMessage), or is nil.
	Err error
}

type handler struct {
	pattern string // message type, "*", or "" for a frame handler
	once    bool
	d       *dispatcher[Frame]
}

type waiter struct {
	typ string
	ch  chan message.Message // cap 1
}

func (c *Client) dispatch(f Frame) {
	c.hmu.Lock()
	targets := c.targets[:0]
	keep := c.handlers[:0]
	for _, h := range c.handlers {
		match := h.pattern == "" || (f.Err == nil && (h.pattern == "*" || h.pattern == f.Message.Type))
		if match {
			targets = append(targets, h)
		}
		if !match || !h.once {
			keep = append(keep, h)
		}
	}
	clear(c.handlers[len(keep):])
	c.handlers = keep
	if f.Err == nil && len(c.waiters) > 0 {
		rest := c.waiters[:0]
		for _, w := range c.waiters {
			if w.typ == "*" || w.typ == f.Message.Type {
				w.ch <- f.Message // cap 1, and a waiter is removed after its first message
				continue
			}
			rest = append(rest, w)
		}
		clear(c.waiters[len(rest):])
		c.waiters = rest
	}
	c.targets = targets
	c.hmu.Unlock()

	for i, h := range targets {
		h.d.push(c.ctx, f)
		if h.once {
			h.d.finish()
		}
		targets[i] = nil
	}
}

// add registers fn for pattern and returns the function that removes it.
func (c *Client) add(pattern string, once bool, fn func(Frame)) (off func()) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.hclosed {
		return func() {}
	}
	h := &handler{pattern: pattern, once: once}
	h.d = newDispatcher(func(f Frame) { callHandler(pattern, fn, f) }, c.opts.HandlerBacklog)
	c.handlers = append(c.handlers, h)
	return sync.OnceFunc(func() { c.remove(h) })
}

// callHandler runs one handler call; a panic is logged and the handler keeps receiving.
func callHandler(pattern string, fn func(Frame), f Frame) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("client: handler panicked", "pattern", pattern, "msg_type", f.Message.Type, "panic", r)
		}
	}()
	fn(f)
}

// On calls h for every message of type typ ("*": every message), in the order received, on a
// goroutine of its own; a panic in h is logged (slog.Default) and h keeps receiving. Frames that
// are not OVOS messages reach only OnFrame handlers. off unregisters h: messages queued for it
// and not yet started are discarded, a call already running finishes.
func (c *Client) On(typ string, h func(message.Message)) (off func()) {
	return c.add(typ, false, func(f Frame) { h(f.Message) })
}

// Once is On for the first matching message only.
func (c *Client) Once(typ string, h func(message.Message)) (off func()) {
	return c.add(typ, true, func(f Frame) { h(f.Message) })
}

// OnFrame calls h for every frame received, OVOS message or not (Frame.Err says which): text that
// is not JSON, JSON that is not a message, encrypted messages, binary frames.
func (c *Client) OnFrame(h func(Frame)) (off func()) {
	return c.add("", false, h)
}

func (c *Client) remove(h *handler) {
	c.hmu.Lock()
	i := slices.Index(c.handlers, h)
	if i >= 0 {
		c.handlers = slices.Delete(c.handlers, i, i+1)
	}
	c.hmu.Unlock()
	if i >= 0 {
		h.d.stop()
	}
}

func timeoutCtx(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

func (c *Client) addWaiter(typ string) (*waiter, error) {
	w := &waiter{typ: typ, ch: make(chan message.Message, 1)}
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.hclosed {
		return nil, ErrClosed
	}
	c.waiters = append(c.waiters, w)
	return w, nil
}

func (c *Client) removeWaiter(w *waiter) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	for i, x := range c.waiters {
		if x == w {
			c.waiters = slices.Delete(c.waiters, i, i+1)
			return
		}
	}
}

func (c *Client) wait(ctx context.Context, w *waiter, timeout time.Duration) (message.Message, error) {
	tctx, cancel := timeoutCtx(ctx, timeout)
	defer cancel()
	select {
	case m := <-w.ch:
		return m, nil
	case <-c.done:
		return message.Message{}, ErrClosed
	case <-c.ctx.Done():
		return message.Message{}, ErrClosed
	case <-tctx.Done():
		select {
		case m := <-w.ch: // arrived at the last moment
			return m, nil
		default:
		}
		if ctx.Err() != nil {
			return message.Message{}, ctx.Err()
		}
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		return message.Message{}, fmt.Errorf("%w after %v waiting for %q", ErrTimeout, timeout, w.typ)
	}
}

// WaitFor returns the next message of type typ ("*": any message) received after the call. It
// gives up after timeout (0: DefaultTimeout, 3 s; negative: no limit) with an error wrapping
// ErrTimeout, or when ctx ends with ctx.Err().
func (c *Client) WaitFor(ctx context.Context, typ string, timeout time.Duration) (message.Message, error) {
	w, err := c.addWaiter(typ)
	if err != nil {
		return message.Message{}, err
	}
	defer c.removeWaiter(w)
	return c.wait(ctx, w, timeout)
}

// WaitForResponse emits m and returns the first message of type replyType received after that
// (default m.Type+".response"), like the Python client's wait_for_response, which matches on the
// type only. timeout is as in WaitFor.
func (c *Client) WaitForResponse(ctx context.Context, m message.Message, replyType string, timeout time.Duration) (message.Message, error) {
	if replyType == "" {
		replyType = m.Type + ".response"
	}
	w, err := c.addWaiter(replyType)
	if err != nil {
		return message.Message{}, err
	}
	defer c.removeWaiter(w)
	if err := c.Emit(ctx, m); err != nil {
		return message.Message{}, err
	}
	return c.wait(ctx, w, timeout)
}
