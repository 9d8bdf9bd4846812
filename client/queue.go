package client

import (
	"context"
	"sync"
)

// dispatcher runs fn for every item pushed, in push order, on its own goroutine, so that a slow fn
// delays only its own later items. Its backlog is bounded: push waits for room when it is full.
type dispatcher[T any] struct {
	fn  func(T)
	max int

	mu       sync.Mutex
	items    []T
	head     int
	stopped  bool // stop: discard the backlog, run nothing more
	finished bool // finish: run the backlog, accept nothing more
	inFn     bool // fn is running

	wake  chan struct{} // cap 1: items, stop or finish
	space chan struct{} // cap 1: room freed, or stopped
	done  chan struct{} // closed when the goroutine has returned
}

func newDispatcher[T any](fn func(T), max int) *dispatcher[T] {
	d := &dispatcher[T]{
		fn:    fn,
		max:   max,
		wake:  make(chan struct{}, 1),
		space: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	go d.run()
	return d
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (d *dispatcher[T]) run() {
	defer close(d.done)
	var zero T
	for {
		d.mu.Lock()
		for len(d.items) == d.head && !d.stopped && !d.finished {
			d.mu.Unlock()
			<-d.wake
			d.mu.Lock()
		}
		if d.stopped || len(d.items) == d.head {
			d.inFn = false
			d.mu.Unlock()
			return
		}
		v := d.items[d.head]
		d.items[d.head] = zero
		d.head++
		if d.head == len(d.items) {
			d.items, d.head = d.items[:0], 0
		} else if d.head > 64 && d.head > len(d.items)/2 {
			n := copy(d.items, d.items[d.head:])
			clear(d.items[n:])
			d.items, d.head = d.items[:n], 0
		}
		d.inFn = true
		d.mu.Unlock()
		signal(d.space)
		d.fn(v)
		d.mu.Lock()
		d.inFn = false
		d.mu.Unlock()
	}
}

// push queues v. When the backlog is full it waits for room, for ctx or for stop. It reports
// whether v was queued.
func (d *dispatcher[T]) push(ctx context.Context, v T) bool {
	for {
		d.mu.Lock()
		if d.stopped || d.finished {
			d.mu.Unlock()
			return false
		}
		if d.max <= 0 || len(d.items)-d.head < d.max {
			d.items = append(d.items, v)
			d.mu.Unlock()
			signal(d.wake)
			return true
		}
		d.mu.Unlock()
		select {
		case <-d.space:
		case <-ctx.Done():
			return false
		}
	}
}

// stop discards the backlog; the goroutine returns once the running fn (if any) has returned.
// It reports whether fn was running at the time.
func (d *dispatcher[T]) stop() (busy bool) {
	d.mu.Lock()
	d.stopped = true
	clear(d.items)
	d.items, d.head = nil, 0
	busy = d.inFn
	d.mu.Unlock()
	signal(d.wake)
	signal(d.space)
	return busy
}

// finish lets the goroutine run the backlog and return. It reports whether fn was running.
func (d *dispatcher[T]) finish() (busy bool) {
	d.mu.Lock()
	d.finished = true
	busy = d.inFn
	d.mu.Unlock()
	signal(d.wake)
	return busy
}
