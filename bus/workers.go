package bus

import (
	"sync"
	"sync/atomic"

	"github.com/ovbus/ovbus/ws/nonblock"
)

// Kept goroutines for the tasks the bus starts per event, not per
// connection: the poller's next loop when the last one becomes a reader
// (poll_linux.go), the hub's waker when a publish finds sleepers
// (fanout.go), a session's writer when the log has frames for it
// (session.go). Started with a go statement, each such goroutine began on
// a fresh stack and grew it again, several times, to the depth of a read,
// a relay or a write: at 10 subscribers and 20 000 messages that growing
// (runtime.morestack, copystack) was 5.5 % of the server's samples, and
// 0.7 % with the pool (issue 13, bench/results/workers-2026-12-02.md). A task
// given to workers.start runs instead on a goroutine that has finished an
// earlier task and waits, parked, for the next one, with the stack it
// grew; only when none waits is a goroutine started. So an idle bus still
// runs no goroutine per connection: at most maxIdleWorkers wait, whatever
// the number of connections, and a task that blocks (a writer on a slow
// client) holds only its own goroutine, as before.
//
// A parked worker's stack is shrunk by the garbage collector like any
// goroutine's; it grows once more on the next task, not on every one.

// task is a unit of work for workers.start: run is called once, on a
// worker goroutine. The bus's tasks are its structures under another name
// (readTask is a session), so giving one to start allocates nothing.
type task interface{ run() }

// maxIdleWorkers bounds how many workers wait for a task: enough for the
// tasks of a burst that overlap (a poller loop, a reader, a waker and
// writers handed on), few enough that their stacks are a small fixed cost.
const maxIdleWorkers = 8

// workerPool is the set of workers waiting for a task: each waits on its
// own channel, and the one that waited last is handed the next task (its
// stack and what it touched are the likeliest still in the cache).
type workerPool struct {
	mu   sync.Mutex
	idle []chan task
	// live counts the pool's goroutines, waiting or running a task (for
	// the tests: one add when a goroutine starts or ends, none per task).
	live atomic.Int32
}

// workers is the process's pool: the poller it serves is the process's too.
var workers workerPool

// start runs t on a waiting worker, or on a new goroutine when none waits.
// Like a go statement it returns at once, and t runs when the scheduler
// gets to it.
func (p *workerPool) start(t task) {
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

// work runs t, then waits for the next task while fewer than
// maxIdleWorkers wait; otherwise it ends.
func (p *workerPool) work(t task) {
	ch := make(chan task, 1)
	for {
		t.run()
		t = nil // let the task's structures go while this waits
		p.mu.Lock()
		if len(p.idle) >= maxIdleWorkers {
			p.mu.Unlock()
			p.live.Add(-1)
			return
		}
		p.idle = append(p.idle, ch)
		p.mu.Unlock()
		t = <-ch
	}
}

// The bus's tasks. Each is a pointer conversion of the structure it runs
// for, so that start(t) stores a pointer in an interface and allocates
// nothing.
type (
	// wakerTask is the hub's waker (hub.wakeSleepers).
	wakerTask hub
	// writerTask is a session's writer with nothing carried over
	// (session.writeTask(nil, nonblock.Write{})).
	writerTask session
)

func (t *wakerTask) run()  { (*hub)(t).wakeSleepers() }
func (t *writerTask) run() { (*session)(t).writeTask(nil, nonblock.Write{}) }
