package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The hub's own tests, run under -race: the log and its followers without
// sockets. An entry's origin names its publisher and born its number there.

func testEntry(publisher, k int) *entry {
	return &entry{size: 10, origin: fmt.Sprint(publisher), born: int64(k)}
}

// readAll follows f until it has n entries or fails, checking that the
// sequence numbers are contiguous and each publisher's entries in order.
func readAll(f *follower, n int, done <-chan struct{}) error {
	last := map[string]int64{}
	var batch []*entry
	seen := 0
	want := f.cursor.Load()
	for seen < n {
		var err error
		batch, err = f.next(context.Background(), done, nil, batch[:0], 7, 1<<20)
		if err != nil {
			return fmt.Errorf("after %d entries: %w", seen, err)
		}
		for _, e := range batch {
			if e.seq != want {
				return fmt.Errorf("entry %d has seq %d, want %d", seen, e.seq, want)
			}
			want++
			if k, ok := last[e.origin]; ok && e.born != k+1 {
				return fmt.Errorf("publisher %s: entry %d after %d", e.origin, e.born, k)
			}
			last[e.origin] = e.born
			seen++
		}
	}
	return nil
}

// minCursor returns the smallest cursor of fs.
func minCursor(fs []*follower) uint64 {
	m := ^uint64(0)
	for _, f := range fs {
		m = min(m, f.cursor.Load())
	}
	return m
}

// followN joins n followers to h, each reading total entries with readAll
// on a goroutine of its own and reporting on errs.
func followN(h *hub, n, total int) (fs []*follower, errs chan error) {
	fs = make([]*follower, n)
	errs = make(chan error, n)
	for i := range fs {
		fs[i] = newFollower(h)
		h.join(fs[i])
	}
	for _, f := range fs {
		go func() { errs <- readAll(f, total, nil) }()
	}
	return fs, errs
}

func TestHubConcurrentPublishAndFollow(t *testing.T) {
	const publishers, perPublisher, followers = 4, 2000, 6
	h := newHub(publishers*perPublisher, 1<<30) // bounds that never cut
	_, errs := followN(h, followers, publishers*perPublisher)
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perPublisher {
				h.publish(testEntry(p, k))
			}
		}()
	}
	wg.Wait()
	for range followers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := h.head.Load(); got != publishers*perPublisher {
		t.Fatalf("head %d", got)
	}
}

// TestHubRingGrowsWhileFollowed raises the message bound, as a reload does,
// while followers read: the ring is replaced by larger copies and nobody
// misses or repeats an entry.
func TestHubRingGrowsWhileFollowed(t *testing.T) {
	const total, followers, window = 6000, 4, 40
	h := newHub(50, 1<<30) // a 64-slot ring to begin with
	fs, errs := followN(h, followers, total)
	rings := map[*ring]bool{h.ring.Load(): true}
	for k := range total {
		// Keep within the smallest bound of the run: the followers must
		// never be cut, however the scheduler runs them.
		for h.head.Load()-minCursor(fs) >= window {
			time.Sleep(10 * time.Microsecond)
		}
		h.publish(testEntry(0, k))
		switch k {
		case 1000, 2500, 4000: // 128, 1024 and 8192 slots
			h.setLimits(map[int]int{1000: 100, 2500: 1000, 4000: 5000}[k], 1<<30)
			rings[h.ring.Load()] = true
		case 3000:
			h.setLimits(60, 1<<30) // smaller: the ring stays, the log is trimmed
			rings[h.ring.Load()] = true
			if n, _ := h.retained(); n > 60 {
				t.Fatalf("the log keeps %d entries over the new bound of 60", n)
			}
		}
	}
	for range followers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(rings) != 4 {
		t.Fatalf("%d rings, want the first and three larger ones", len(rings))
	}
}

// TestHubCutsALaggingFollower: a follower that does not read is cut once
// it is further behind than the bounds; the others get everything and the
// log never holds more than the bounds.
func TestHubCutsALaggingFollower(t *testing.T) {
	const bound, total = 100, 1000
	h := newHub(bound, 1<<30)
	stuck, reader := newFollower(h), newFollower(h)
	h.join(stuck)
	h.join(reader)
	errs := make(chan error, 1)
	go func() { errs <- readAll(reader, total, nil) }()
	for k := range total {
		for h.head.Load()-reader.cursor.Load() >= bound/2 {
			time.Sleep(10 * time.Microsecond)
		}
		h.publish(testEntry(0, k))
		if n, _ := h.retained(); n > bound {
			t.Fatalf("the log keeps %d entries over the bound of %d", n, bound)
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if _, err := stuck.next(context.Background(), nil, nil, nil, 10, 1<<20); !errors.Is(err, ErrLagged) {
		t.Fatalf("the stuck follower: %v, want ErrLagged", err)
	}
	if missed := stuck.skip(); missed != total-bound {
		t.Fatalf("skip: missed %d, want %d", missed, total-bound)
	}
	if err := readAll(stuck, bound, nil); err != nil {
		t.Fatalf("after skip: %v", err)
	}

	// The byte bound cuts the same way.
	hb := newHub(1000, 95) // ten 10-byte entries do not fit
	f := newFollower(hb)
	hb.join(f)
	for k := range 10 {
		hb.publish(testEntry(0, k))
	}
	if _, err := f.next(context.Background(), nil, nil, nil, 10, 1<<20); !errors.Is(err, ErrLagged) {
		t.Fatalf("95-byte bound, 100 bytes behind: %v", err)
	}
}

// TestHubChurn: followers join, read a while and leave while others publish
// and follow; each sees a contiguous run from its join, and once everyone
// has left the log releases what it held.
func TestHubChurn(t *testing.T) {
	const publishers, perPublisher = 2, 3000
	h := newHub(1<<14, 1<<30)
	var published atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !published.Load() {
				f := newFollower(h)
				h.join(f)
				done := make(chan struct{})
				stop := time.AfterFunc(20*time.Millisecond, func() { close(done) })
				if err := readAll(f, 50, done); err != nil && !errors.Is(err, errStopped) {
					errs <- err
				}
				stop.Stop()
				h.leave(f)
				h.leave(f) // twice is harmless
			}
		}()
	}
	var pw sync.WaitGroup
	for p := range publishers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for k := range perPublisher {
				h.publish(testEntry(p, k))
				if k%64 == 0 {
					time.Sleep(50 * time.Microsecond) // let the followers keep up
				}
			}
		}()
	}
	pw.Wait()
	published.Store(true)
	// Wake followers still waiting for their 50th entry.
	for k := 0; k < 200; k++ {
		h.publish(testEntry(publishers, k))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	h.mu.Lock()
	n := len(h.followers)
	h.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d followers left", n)
	}
	// With no follower left, the next scan releases what the log held: it
	// keeps only what came after that scan.
	for k := range scanEveryMessages {
		h.publish(testEntry(publishers+1, k))
	}
	if n, _ := h.retained(); n >= scanEveryMessages {
		t.Fatalf("the log keeps %d entries with no follower", n)
	}
}

// sleepers returns how many followers wait for the next publish.
func (h *hub) sleeperCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sleepers)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHubIdleChurnLeavesNoSleepers: on a quiet log, followers that go to
// sleep and then leave are taken out of the sleepers at once (issue 10
// item 1: they stayed there until the next publish), and a follower that
// sleeps again and again is registered once.
func TestHubIdleChurnLeavesNoSleepers(t *testing.T) {
	h := newHub(1024, 1<<20)
	var keep []*follower
	for i := range 2000 {
		f := newFollower(h)
		h.join(f)
		done := make(chan struct{})
		ret := make(chan error, 1)
		go func() {
			_, err := f.next(context.Background(), done, nil, nil, 1, 1<<20)
			ret <- err
		}()
		waitFor(t, "the follower to sleep", 5*time.Second, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return f.sleepIdx >= 0
		})
		close(done)
		if err := <-ret; err != errStopped {
			t.Fatalf("next: %v", err)
		}
		if i%100 == 0 {
			keep = append(keep, f) // some stay, so removal is not only of the last
			continue
		}
		h.leave(f)
	}
	if n := h.sleeperCount(); n != len(keep) {
		t.Fatalf("%d sleepers after churn, want the %d that stayed", n, len(keep))
	}
	// A follower whose context ends keeps one place however often it sleeps.
	f := newFollower(h)
	h.join(f)
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		f.next(ctx, nil, nil, nil, 1, 1<<20)
	}
	if n := h.sleeperCount(); n != len(keep)+1 {
		t.Fatalf("%d sleepers, want %d", n, len(keep)+1)
	}
	for _, f := range append(keep, f) {
		h.leave(f)
	}
	if n := h.sleeperCount(); n != 0 {
		t.Fatalf("%d sleepers after every follower left", n)
	}
	h.publish(testEntry(0, 0)) // wakes nobody, and does not trip on a stale entry
}

// TestHubSleepAfterLeave: a follower whose reader sleeps after leave (it
// checked its done channel just before the leaver closed it and left) is
// not registered again: it stayed in the sleepers, with its session, until
// the next publish (a stale sleeper per such race on a quiet bus).
func TestHubSleepAfterLeave(t *testing.T) {
	h := newHub(1024, 1<<20)
	f := newFollower(h)
	h.join(f)
	h.leave(f)
	if !h.sleep(f, h.head.Load()) {
		t.Fatal("sleep after leave: the follower must wait for its done channel")
	}
	if n := h.sleeperCount(); n != 0 {
		t.Fatalf("%d sleepers after a sleep that followed leave", n)
	}
	// Its reader, in next, then returns as soon as done is closed.
	done := make(chan struct{})
	close(done)
	if _, err := f.next(context.Background(), done, nil, nil, 1, 1<<20); err != errStopped {
		t.Fatalf("next after leave: %v", err)
	}
	if n := h.sleeperCount(); n != 0 {
		t.Fatalf("%d sleepers", n)
	}
}

// TestHubShrinksAfterPeak: once the followers fall to a quarter of a
// capacity of shrinkMin or more, the followers and sleepers are
// reallocated to their size (a slice keeps its capacity otherwise), and
// the followers left are intact: in place and woken by the next publish.
func TestHubShrinksAfterPeak(t *testing.T) {
	h := newHub(1024, 1<<20)
	fs := make([]*follower, 4*shrinkMin)
	for i := range fs {
		fs[i] = newFollower(h)
		h.join(fs[i])
		if !h.sleep(fs[i], h.head.Load()) {
			t.Fatal("sleep on a quiet log")
		}
	}
	const stay = 10
	for _, f := range fs[stay:] {
		h.leave(f)
	}
	h.mu.Lock()
	cf, cs, nf, ns := cap(h.followers), cap(h.sleepers), len(h.followers), len(h.sleepers)
	for i, f := range h.followers {
		if f.idx != i {
			t.Errorf("follower at %d has idx %d", i, f.idx)
		}
	}
	for i, f := range h.sleepers {
		if f.sleepIdx != i {
			t.Errorf("sleeper at %d has sleepIdx %d", i, f.sleepIdx)
		}
	}
	h.mu.Unlock()
	if nf != stay || ns != stay {
		t.Fatalf("%d followers, %d sleepers, want %d", nf, ns, stay)
	}
	if cf >= shrinkMin || cs >= shrinkMin {
		t.Fatalf("capacity %d followers, %d sleepers after %d of %d left: not shrunk", cf, cs, len(fs)-stay, len(fs))
	}
	h.publish(&entry{size: 1})
	for _, f := range fs[:stay] {
		select {
		case <-f.wake:
		default:
			t.Fatal("a follower that stayed was not woken")
		}
	}
}
