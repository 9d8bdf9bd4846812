package workers

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/internal/testwait"
)

// waiting reports how many workers wait for a task.
func (p *pool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// testPool returns a pool of the test's own whose waiting workers end with
// the test (the process's pool keeps its own).
func testPool(t *testing.T) *pool {
	p := new(pool)
	t.Cleanup(func() {
		p.mu.Lock()
		idle := p.idle
		p.idle = nil
		p.mu.Unlock()
		for _, ch := range idle {
			ch <- funcTask(runtime.Goexit)
		}
	})
	return p
}

// funcTask is a task that calls a function.
type funcTask func()

func (f funcTask) Run() { f() }

// TestRunEveryTask: tasks given at once all run, each once, also when more
// are given than workers wait; afterwards MaxIdle wait, and the other
// goroutines have ended.
func TestRunEveryTask(t *testing.T) {
	p := testPool(t)
	const n = 100
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	counts := make([]int, n)
	for i := range n {
		p.start(funcTask(func() {
			counts[i]++
			started.Done()
			<-release // all n run at once: n goroutines
			done.Done()
		}))
	}
	started.Wait()
	if got, live := p.waiting(), p.live.Load(); got != 0 || live != n {
		t.Fatalf("%d workers wait and %d goroutines live while all %d tasks run", got, live, n)
	}
	close(release)
	done.Wait()
	testwait.Until(t, "the workers beyond the bound to end", 10*time.Second, func() bool {
		return p.waiting() == MaxIdle && p.live.Load() == MaxIdle
	})
	for i, c := range counts {
		if c != 1 {
			t.Fatalf("task %d ran %d times", i, c)
		}
	}
}

// TestReuse: a task given while a worker waits runs on that worker (no new
// goroutine), and the worker waits again afterwards.
func TestReuse(t *testing.T) {
	p := testPool(t)
	ran := make(chan struct{})
	p.start(funcTask(func() { ran <- struct{}{} }))
	<-ran
	testwait.Until(t, "the worker to wait", 10*time.Second, func() bool { return p.waiting() == 1 })
	for range 1000 {
		p.start(funcTask(func() { ran <- struct{}{} }))
		<-ran
		testwait.Until(t, "the worker to wait", 10*time.Second, func() bool { return p.waiting() == 1 })
	}
	if live := p.live.Load(); live != 1 {
		t.Fatalf("%d goroutines after 1000 tasks run one at a time, want the one worker", live)
	}
}

// TestLastWaiterFirst: of several waiting workers, the one that began to
// wait last takes the next task (its stack is the likeliest in the cache).
func TestLastWaiterFirst(t *testing.T) {
	p := testPool(t)
	const n = 3
	release := make(chan struct{})
	ran := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		p.start(funcTask(func() { wg.Done(); <-release }))
	}
	wg.Wait() // n workers, each running a task
	for i := range n {
		release <- struct{}{}
		testwait.Until(t, "the worker to wait", 10*time.Second, func() bool { return p.waiting() == i+1 })
	}
	p.mu.Lock()
	last := p.idle[n-1]
	p.mu.Unlock()
	p.start(funcTask(func() { ran <- struct{}{} }))
	<-ran
	testwait.Until(t, "the worker to wait again", 10*time.Second, func() bool { return p.waiting() == n })
	p.mu.Lock()
	again := p.idle[n-1]
	p.mu.Unlock()
	if again != last {
		t.Fatal("the task went to another worker than the one that waited last")
	}
}

// ptrTask is a task that is a pointer, as the bus's are.
type ptrTask struct{ n int }

func (t *ptrTask) Run() { t.n++ }

// TestStartAllocatesNothing: giving a waiting worker a task that is a
// pointer allocates nothing.
func TestStartAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p := testPool(t)
	var task ptrTask
	p.start(&task)
	testwait.Until(t, "the worker to wait", 10*time.Second, func() bool { return p.waiting() == 1 })
	allocs := testing.AllocsPerRun(100, func() {
		for p.waiting() == 0 {
			runtime.Gosched() // the last task still ends
		}
		p.start(&task)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per start", allocs)
	}
}
