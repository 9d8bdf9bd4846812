package bus

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// waiting reports how many workers wait for a task.
func (p *workerPool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// testPool returns a pool of the test's own whose waiting workers end with
// the test (the process's pool keeps its own, workers.go).
func testPool(t *testing.T) *workerPool {
	p := new(workerPool)
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

// funcTask is a task that calls a function (for tests; the bus's tasks are
// its structures, workers.go).
type funcTask func()

func (f funcTask) run() { f() }

// TestWorkersRunEveryTask: tasks given at once all run, each once, also
// when more are given than workers wait; afterwards maxIdleWorkers wait,
// and the other goroutines have ended.
func TestWorkersRunEveryTask(t *testing.T) {
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
	waitFor(t, "the workers beyond the bound to end", 10*time.Second, func() bool {
		return p.waiting() == maxIdleWorkers && p.live.Load() == maxIdleWorkers
	})
	for i, c := range counts {
		if c != 1 {
			t.Fatalf("task %d ran %d times", i, c)
		}
	}
}

// TestWorkersReuse: a task given while a worker waits runs on that worker
// (no new goroutine), and the worker waits again afterwards.
func TestWorkersReuse(t *testing.T) {
	p := testPool(t)
	ran := make(chan struct{})
	p.start(funcTask(func() { ran <- struct{}{} }))
	<-ran
	waitFor(t, "the worker to wait", 10*time.Second, func() bool { return p.waiting() == 1 })
	for range 1000 {
		p.start(funcTask(func() { ran <- struct{}{} }))
		<-ran
		waitFor(t, "the worker to wait", 10*time.Second, func() bool { return p.waiting() == 1 })
	}
	if live := p.live.Load(); live != 1 {
		t.Fatalf("%d goroutines after 1000 tasks run one at a time, want the one worker", live)
	}
}

// TestWorkersStartAllocatesNothing: giving a worker one of the bus's tasks
// allocates nothing once a worker waits (the tasks are pointer
// conversions, workers.go).
func TestWorkersStartAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p := testPool(t)
	var h hub // wakeSleepers on an empty hub returns at once
	p.start((*wakerTask)(&h))
	waitFor(t, "the worker to wait", 10*time.Second, func() bool { return p.waiting() == 1 })
	allocs := testing.AllocsPerRun(100, func() {
		for p.waiting() == 0 {
			runtime.Gosched() // the last task still ends
		}
		p.start((*wakerTask)(&h))
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per start", allocs)
	}
}
