package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/internal/testwait"
	"github.com/ovbus/ovbus/ws"
)

// The hub's own tests, run under -race: the log and its followers without
// sockets. An entry's origin names its publisher and born its number there.

func testEntry(publisher, k int) *entry {
	return &entry{size: 10, frameMeta: frameMeta{origin: fmt.Sprint(publisher), born: int64(k)}}
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

// TestHubRingGrowsWhileFollowed: while one follower holds the whole log
// (it reads nothing), the ring is replaced by larger copies as the log
// grows, and the followers that read miss or repeat no entry; a reload
// leaves the ring alone (a lower bound trims the log).
func TestHubRingGrowsWhileFollowed(t *testing.T) {
	const total, followers = 6000, 4
	h := newHub(total, 1<<30) // a ring of initialRing slots to begin with
	hold := newFollower(h)
	h.join(hold)
	_, errs := followN(h, followers, total)
	rings := map[*ring]bool{h.ring.Load(): true}
	for k := range total {
		h.publish(testEntry(0, k))
		rings[h.ring.Load()] = true
		if k == total/2 {
			h.setLimits(total+1, 1<<30)
			rings[h.ring.Load()] = true
		}
	}
	for range followers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(rings) != 4 || len(h.ring.Load().slots) != 8*initialRing {
		t.Fatalf("%d rings, the last of %d slots; want the first and three larger ones, up to %d", len(rings), len(h.ring.Load().slots), 8*initialRing)
	}
	// A lower bound trims the log at once; the ring stays.
	h.setLimits(60, 1<<30)
	if n, _ := h.retained(); n > 60 || len(h.ring.Load().slots) != 8*initialRing {
		t.Fatalf("the log keeps %d entries over the new bound of 60, or the ring changed", n)
	}
	// Once the holder has read everything, the log is released.
	hold.cursor.Store(h.head.Load())
	for k := range scanEveryMessages {
		h.publish(testEntry(1, k))
	}
	if n, _ := h.retained(); n >= scanEveryMessages+1 {
		t.Fatalf("the log keeps %d entries once everybody read them", n)
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
	testwait.Until(t, what, d, cond)
}

// TestHubIdleChurnLeavesNoSleepers: on a quiet log, followers that go to
// sleep and then leave are taken out of the sleepers at once (not at the
// next publish), and a follower that
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

// parseFrames splits b, unmasked server frames of data messages back to
// back, into their payloads.
func parseFrames(b []byte) ([]string, error) {
	var out []string
	for len(b) > 0 {
		if len(b) < 2 {
			return out, fmt.Errorf("a truncated header")
		}
		n, h := int(b[1]&0x7f), 2
		switch n {
		case 126:
			n, h = int(b[2])<<8|int(b[3]), 4
		case 127:
			n, h = 0, 10
			for _, c := range b[2:10] {
				n = n<<8 | int(c)
			}
		}
		if len(b) < h+n {
			return out, fmt.Errorf("a truncated frame")
		}
		out = append(out, string(b[h:h+n]))
		b = b[h+n:]
	}
	return out, nil
}

// readRuns follows f with runs until it has n frames, checking that every
// run is the frames of consecutive entries back to back, that notices come
// entry by entry, and returns the payloads in order.
func readRuns(f *follower, n int) ([]string, error) {
	var got []string
	var b batch
	runs := 0
	for len(got) < n {
		cursor := f.cursor.Load()
		if err := f.nextBatch(context.Background(), nil, nil, &b, true, 7, 1<<20); err != nil {
			return got, fmt.Errorf("after %d frames: %w", len(got), err)
		}
		if b.rn.n > 0 {
			if b.rn.first.seq != cursor || f.cursor.Load() != cursor+b.rn.n {
				return got, fmt.Errorf("a run of %d from %d, cursor %d → %d", b.rn.n, b.rn.first.seq, cursor, f.cursor.Load())
			}
			ps, err := parseFrames(b.rn.frames)
			if err != nil || uint64(len(ps)) != b.rn.n {
				return got, fmt.Errorf("a run of %d frames holds %d (%v)", b.rn.n, len(ps), err)
			}
			got = append(got, ps...)
			runs++
			b.rn = run{}
			continue
		}
		for _, e := range b.entries {
			got = append(got, string(e.msg.Payload()))
		}
		clear(b.entries)
		b.entries = b.entries[:0]
	}
	if runs == 0 {
		return got, fmt.Errorf("no run at all")
	}
	return got, nil
}

// checkHeld recomputes from the entries the bytes the log holds and compares
// them with what the hub counts: the frames of their own, whole shared
// segments, the compressed copies.
func checkHeld(t *testing.T, h *hub) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.ring.Load()
	want := h.extra.Load()
	arenas := map[*arena]bool{}
	for s := h.tail.Load(); s < h.head.Load(); s++ {
		e := r.slots[s&r.mask].Load()
		if e.seg != nil && e.seg.shared {
			if a := e.seg.arena; !arenas[a] {
				if cap(e.seg.buf) > a.size {
					t.Fatalf("a segment of %d bytes in an allocation of %d", cap(e.seg.buf), a.size)
				}
				want += int64(a.size)
				arenas[a] = true
			}
		} else {
			want += e.size
		}
	}
	if h.seg != nil && !arenas[h.seg.arena] {
		want += int64(h.seg.arena.size) // frames go into it next
	}
	if got := h.held(h.bytes.Load()); got != want {
		t.Fatalf("the hub counts %d bytes held, the entries hold %d", got, want)
	}
}

// TestHubRuns: small frames go into shared segments and followers that take
// runs get them as one slice per segment, large frames and notices among
// them included, in the log's order, as followers that read entry by entry
// do; what the log holds is counted in whole segments, within the bound.
func TestHubRuns(t *testing.T) {
	const total = 3000
	const maxBytes = 16 * minSegment // segments of minSegment bytes
	h := newHub(100000, maxBytes)
	if h.segCap != minSegment {
		t.Fatalf("segments of %d bytes, want %d", h.segCap, minSegment)
	}
	runner, plain := newFollower(h), newFollower(h)
	h.join(runner)
	h.join(plain)
	want := make([]string, total)
	for k := range want {
		switch {
		case k%97 == 0:
			want[k] = strings.Repeat("L", minSegment/4+k%50) // a frame of its own
		default:
			want[k] = fmt.Sprintf("frame %d %s", k, strings.Repeat("x", k%200))
		}
	}
	type result struct {
		got []string
		err error
	}
	res := make(chan result, 2)
	go func() { got, err := readRuns(runner, total); res <- result{got, err} }()
	go func() {
		var got []string
		var batch []*entry
		for len(got) < total {
			var err error
			batch, err = plain.next(context.Background(), nil, nil, batch[:0], 7, 1<<20)
			if err != nil {
				res <- result{got, err}
				return
			}
			for _, e := range batch {
				got = append(got, string(e.msg.Payload()))
			}
		}
		res <- result{got, nil}
	}()
	for k, p := range want {
		for h.head.Load()-min(runner.cursor.Load(), plain.cursor.Load()) >= 20 {
			time.Sleep(10 * time.Microsecond) // keep within the byte bound
		}
		e := &frameMeta{born: int64(k)}
		if k%131 == 0 {
			e.to = 1 // a notice: followers fetch it entry by entry
		}
		if err := h.publishFrame(ws.OpText, []byte(p), ws.CompressionOptions{}, e); err != nil {
			t.Fatal(err)
		}
		if k == total/2 {
			// A reload: segments of the new size from the next frame on.
			h.setLimits(100000, 2*maxBytes)
			if h.segCap != 2*minSegment || h.seg != nil {
				t.Fatalf("after a reload: segments of %d bytes, the old one still filled: %v", h.segCap, h.seg != nil)
			}
		}
		if _, held := h.retained(); held > maxBytes {
			t.Fatalf("the log holds %d bytes over the bound of %d", held, maxBytes)
		}
		if k%50 == 0 {
			checkHeld(t, h)
		}
	}
	for range 2 {
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		for k := range want {
			if r.got[k] != want[k] {
				t.Fatalf("frame %d: %.20q, want %.20q", k, r.got[k], want[k])
			}
		}
	}
	checkHeld(t, h)
	// Once everybody has fetched everything, a scan releases the old
	// segments: the log holds about the newest.
	for k := range scanEveryMessages {
		h.publishFrame(ws.OpText, []byte("x"), ws.CompressionOptions{}, &frameMeta{born: int64(k)})
		runner.cursor.Store(h.head.Load())
		plain.cursor.Store(h.head.Load())
	}
	checkHeld(t, h)
	if _, held := h.retained(); held > 2*minSegment {
		t.Fatalf("the log holds %d bytes with nothing to deliver", held)
	}
}

// TestHubWakesEverySleeper: with more sleepers than publish wakes itself,
// the waker wakes every one, each time, and none that went to sleep at the
// head is woken for nothing (it would spin).
func TestHubWakesEverySleeper(t *testing.T) {
	const followers, rounds = 3*inlineWakes + 1, 50
	h := newHub(1024, 1<<20)
	fs, errs := followN(h, followers, rounds)
	for k := range rounds {
		// All asleep at the head: the publish below must wake them all.
		waitFor(t, "every follower to sleep", 10*time.Second, func() bool {
			return h.sleeperCount() == followers && minCursor(fs) == h.head.Load()
		})
		h.publish(testEntry(0, k))
	}
	for range followers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the waker to end", 10*time.Second, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !h.waking
	})
}

// TestHubOnWake: a follower with an owner and no goroutine waiting is told
// of the next publish through owner.wake, by the waker however many sleep,
// once per sleep, and takes the frames without waiting.
func TestHubOnWake(t *testing.T) {
	for _, n := range []int{1, 2 * inlineWakes} {
		h := newHub(1024, 1<<20)
		woken := make(chan *follower, n)
		fs := make([]*follower, n)
		for i := range fs {
			f := newFollower(h)
			f.owner = wakeFunc(func(how wakeHow) bool {
				if how != wakeInline { // by the waker, however many sleep
					t.Errorf("%d sleepers: woken with %v, want the waker's", n, how)
				}
				woken <- f
				return false
			})
			h.join(f)
			if !h.sleep(f, f.cursor.Load()) {
				t.Fatal("sleep with nothing published")
			}
			fs[i] = f
		}
		h.publish(testEntry(0, 0))
		seen := map[*follower]bool{}
		for range n {
			seen[<-woken] = true
		}
		if len(seen) != n {
			t.Fatalf("%d sleepers: %d woken", n, len(seen))
		}
		for _, f := range fs {
			var b batch
			if ok, err := f.take(&b, true, 10, 1<<20); !ok || err != nil || len(b.entries) != 1 {
				t.Fatalf("take after the wake-up: %v %v %d", ok, err, len(b.entries))
			}
		}
		// Woken once: nobody sleeps now, so the next publish tells no one.
		h.publish(testEntry(0, 1))
		if n := h.sleeperCount(); n != 0 {
			t.Fatalf("%d sleepers after the wake-up", n)
		}
		waitFor(t, "the waker to end", 10*time.Second, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return !h.waking
		})
		if len(woken) != 0 {
			t.Fatalf("%d wake-ups more than the sleepers", len(woken))
		}
	}
}

// TestHubFramesOfTheirOwnAmongSmallOnes: large frames between small ones
// do not cost the small ones a new allocation each; the byte bound counts
// the small ones' allocation once.
func TestHubFramesOfTheirOwnAmongSmallOnes(t *testing.T) {
	h := newHub(100000, 1<<30) // segments of maxSegment bytes
	hold := newFollower(h)     // reads nothing: the log keeps everything
	h.join(hold)
	reader := newFollower(h)
	h.join(reader)
	large := strings.Repeat("L", maxSegment/4+1)
	var frames int64
	const pairs = 100
	for k := range pairs {
		for _, p := range []string{fmt.Sprintf("small %d", k), large} {
			if err := h.publishFrame(ws.OpText, []byte(p), ws.CompressionOptions{}, &frameMeta{born: int64(k)}); err != nil {
				t.Fatal(err)
			}
			frames += int64(ws.PreparedFrameSize(len(p)))
		}
	}
	checkHeld(t, h)
	if _, held := h.retained(); held > frames+maxSegment {
		t.Fatalf("the log counts %d bytes for %d bytes of frames", held, frames)
	}
	// Every frame comes out in order, small ones as runs.
	got, err := readRuns(reader, 2*pairs)
	if err != nil {
		t.Fatal(err)
	}
	for k := range pairs {
		if got[2*k] != fmt.Sprintf("small %d", k) || got[2*k+1] != large {
			t.Fatalf("frame %d or %d out of place", 2*k, 2*k+1)
		}
	}
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
		if int(f.idx) != i {
			t.Errorf("follower at %d has idx %d", i, f.idx)
		}
	}
	for i, f := range h.sleepers {
		if int(f.sleepIdx) != i {
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

// TestHubPublishAllocs: a small frame costs the log no allocation of its
// own: its entry comes from a slab and its frame goes into the shared
// segment (each allocated once for many frames).
func TestHubPublishAllocs(t *testing.T) {
	h := newHub(100000, 64<<20)
	f := newFollower(h)
	h.join(f)
	payload := []byte(`{"type":"a","data":{},"context":{}}`)
	k := int64(0)
	allocs := testing.AllocsPerRun(10*entrySlab, func() {
		k++
		if err := h.publishFrame(ws.OpText, payload, ws.CompressionOptions{}, &frameMeta{born: k}); err != nil {
			t.Fatal(err)
		}
		f.cursor.Store(h.head.Load())
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per frame published", allocs)
	}
}

// wakeFunc is a followerOwner that is only woken (its followers are not
// cut early: cuts is not set).
type wakeFunc func(how wakeHow) bool

func (w wakeFunc) wake(how wakeHow) bool { return w(how) }
func (wakeFunc) onCut()                  {}
func (wakeFunc) holds() uint64           { return 0 } // everything: no arena is recycled
