// Package workers runs the tasks a server starts per event, not per
// connection, on goroutines it keeps for the next task: the bus's poller
// starting a reader and its own next loop (bus/internal/netpoll), the hub's
// waker when a publish finds sleepers, a session's writer when the log has
// frames for it.
//
// Started with a go statement, each such goroutine would begin on a fresh
// stack and grow it again, several times, to the depth of a read, a relay
// or a write (runtime.morestack). A task given to Start runs instead on a
// goroutine that finished an earlier task and waits, parked, with the
// stack it grew; only when none waits is one started. An idle server still
// runs no goroutine per connection: at most MaxIdle wait, and a task that
// blocks (a writer on a slow client) holds only its own goroutine. The
// garbage collector shrinks a parked worker's stack like any other's.
package workers

import (
	"sync"
	"sync/atomic"
)

// Task is a unit of work for Start: Run is called once, on a worker
// goroutine. A task that is a pointer (a structure under another name, such
// as type readTask session) goes into the interface without allocating, so
// giving one to Start allocates nothing.
type Task interface{ Run() }

// MaxIdle bounds how many workers wait for a task: enough for the tasks of
// a burst that overlap (a poller loop, a reader, a waker and writers handed
// on), few enough that their stacks are a small fixed cost.
const MaxIdle = 8

// pool is a set of workers waiting for a task: each waits on its own
// channel, and the one that waited last is handed the next task (its stack
// and what it touched are the likeliest still in the cache).
type pool struct {
	mu   sync.Mutex
	idle []chan Task
	// live counts the pool's goroutines, waiting or running a task (for
	// the tests: one add when a goroutine starts or ends, none per task).
	live atomic.Int32
}

// thePool is the process's: the poller it serves is the process's too.
var thePool pool

// Start runs t on a waiting worker, or on a new goroutine when none waits.
// Like a go statement it returns at once, and t runs when the scheduler
// gets to it.
func Start(t Task) { thePool.start(t) }

func (p *pool) start(t Task) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		ch := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		ch <- t // buffered: never waits
		return
	}
	p.mu.Unlock()
	p.live.Add(1)
	go p.work(t)
}

// work runs t, then waits for the next task while fewer than MaxIdle wait;
// otherwise it ends.
func (p *pool) work(t Task) {
	ch := make(chan Task, 1)
	for {
		t.Run()
		t = nil // let the task's structures go while this waits
		p.mu.Lock()
		if len(p.idle) >= MaxIdle {
			p.mu.Unlock()
			p.live.Add(-1)
			return
		}
		p.idle = append(p.idle, ch)
		p.mu.Unlock()
		t = <-ch
	}
}
