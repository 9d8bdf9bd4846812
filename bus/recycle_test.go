package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// The recycling of shared segments' allocations (fanout.go, recycle): a
// recycled arena must never overwrite bytes that some reader may still
// read — a writer's batch being written (its follower may have left or been
// cut meanwhile), a Frame an in-process handler or a Follower keeps — and
// must be recycled once nobody can.

// holder is a followerOwner whose reader holds the frames from hold on
// (followerOwner.holds), as a session's writer does while it writes.
type holder struct{ hold atomic.Uint64 }

func (*holder) wake(wakeHow) bool { return false }
func (*holder) onCut()            {}
func (o *holder) holds() uint64   { return o.hold.Load() }

// frameOf is the payload of the k-th frame of a test: about 200 bytes, k in
// every one of them.
func frameOf(k int) []byte {
	return fmt.Appendf(nil, `{"type":"t","data":{"k":%d,"pad":"%0180d"},"context":{}}`, k, k)
}

// publishArenas publishes n arenas' worth of frames from k on (with no
// follower in the way, they are released as they go) and returns the next k.
func publishArenas(t *testing.T, h *hub, k, n int) int {
	t.Helper()
	return publishFrames(t, h, k, n*h.segCap/len(frameOf(k)))
}

// publishFrames publishes n frames from k on and returns the next k.
func publishFrames(t *testing.T, h *hub, k, n int) int {
	t.Helper()
	for end := k + n; k < end; k++ {
		if err := h.publishFrame(ws.OpText, frameOf(k), ws.CompressionOptions{}, &frameMeta{born: int64(k)}); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func recycledArenas(h *hub) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recycled
}

// testHeldRun: a writer took a run and is still writing it when its
// follower stops holding the log (gone: it leaves, or is cut); the log
// moves on by many arenas, and the run's bytes do not change. Once the
// writer is done, arenas are recycled.
func testHeldRun(t *testing.T, h *hub, cuts bool, gone func(f *follower, k int) int) {
	o := &holder{}
	f := newFollower(h)
	f.owner, f.cuts = o, cuts
	h.join(f)
	o.hold.Store(f.cursor.Load())
	k := publishFrames(t, h, 0, 100)
	var b batch
	if ok, err := f.take(&b, true, maxBatchFrames, maxBatchBytes); !ok || err != nil || b.rn.n == 0 {
		t.Fatalf("take: %v %v, run of %d", ok, err, b.rn.n)
	}
	run := b.rn.frames
	want := bytes.Clone(run)
	k = gone(f, k)
	k = publishArenas(t, h, k, 8)
	if !bytes.Equal(run, want) {
		t.Fatal("a recycled arena overwrote the run a writer was writing")
	}
	if n := recycledArenas(h); n != 0 {
		t.Fatalf("%d arenas recycled while a writer holds the oldest frames", n)
	}
	o.hold.Store(released) // the writer is done
	publishArenas(t, h, k, 8)
	if n := recycledArenas(h); n < 4 {
		t.Fatalf("%d arenas recycled in 8 arenas' worth of frames nobody holds, want at least 4", n)
	}
}

func TestRecycleSparesRunOfLeftFollower(t *testing.T) {
	testHeldRun(t, newHub(100000, 64<<20), false, func(f *follower, k int) int {
		f.h.leave(f)
		return k
	})
}

func TestRecycleSparesRunOfCutFollower(t *testing.T) {
	testHeldRun(t, newHub(256, 64<<20), true, func(f *follower, k int) int {
		for !f.cut.Load() { // past the message bound: cut
			k = publishFrames(t, f.h, k, 1)
		}
		return k
	})
}

// TestRecycleSparesHeldEntries: as the runs, for a writer that takes frame
// by frame (a receive rule, deflate): the entries' frames it holds stay.
func TestRecycleSparesHeldEntries(t *testing.T) {
	h := newHub(100000, 64<<20)
	o := &holder{}
	f := newFollower(h)
	f.owner = o
	h.join(f)
	o.hold.Store(f.cursor.Load())
	k := publishFrames(t, h, 0, 100)
	var b batch
	if ok, err := f.take(&b, false, 8, maxBatchBytes); !ok || err != nil {
		t.Fatalf("take: %v %v", ok, err)
	}
	var frames, want [][]byte
	entries := slices.Clone(b.entries)
	for _, e := range entries {
		frames = append(frames, e.msg.Frame(false))
		want = append(want, bytes.Clone(e.msg.Frame(false)))
	}
	f.cursor.Store(h.head.Load()) // it fetched everything, and writes the first 8
	k = publishArenas(t, h, k, 8)
	for i, e := range entries {
		if !bytes.Equal(frames[i], want[i]) {
			t.Fatalf("a recycled arena overwrote frame %d a writer was writing", i)
		}
		if e.seq != uint64(i) || !bytes.Equal(e.msg.Frame(false), want[i]) {
			t.Fatalf("a recycled slab reused entry %d a writer holds: seq %d", i, e.seq)
		}
	}
	o.hold.Store(f.cursor.Load()) // done with them; it follows along from here
	for range 8 {
		k = publishArenas(t, h, k, 1)
		f.cursor.Store(h.head.Load())
		o.hold.Store(h.head.Load())
	}
	if n := recycledArenas(h); n < 4 {
		t.Fatalf("%d arenas recycled behind a follower that keeps up, want at least 4", n)
	}
	h.mu.Lock()
	slabs := h.recycledS
	h.mu.Unlock()
	if slabs < 16 {
		t.Fatalf("%d entry slabs recycled behind a follower that keeps up, want at least 16", slabs)
	}
}

// TestRecycleSparesFollowerFrames: a follower without an owner (a Follower,
// the in-process dispatcher) hands its frames out to code that may keep
// them as long as it likes (Frame.Payload): no arena it could read from is
// ever recycled, even once it left.
func TestRecycleSparesFollowerFrames(t *testing.T) {
	h := newHub(100000, 64<<20)
	k := publishArenas(t, h, 0, 1) // an arena from before its join: it never reads it
	f := newFollower(h)
	h.join(f)
	k = publishArenas(t, h, k, 1)
	batch, err := f.next(context.Background(), nil, nil, nil, 8, maxBatchBytes)
	if err != nil {
		t.Fatal(err)
	}
	var kept, want [][]byte
	for _, e := range batch {
		kept = append(kept, e.msg.Payload())
		want = append(want, bytes.Clone(e.msg.Payload()))
	}
	h.leave(f)
	publishArenas(t, h, k, 8)
	for i := range kept {
		if !bytes.Equal(kept[i], want[i]) {
			t.Fatalf("a recycled arena overwrote payload %d a follower handed out", i)
		}
	}
}

// TestRecycleServerFrames: the same through the Server's API: the payloads
// an OnFrame handler and a Follower keep stay as they were while the bus
// relays many arenas' worth after them.
func TestRecycleServerFrames(t *testing.T) {
	s, _ := testServer(t, Options{})
	got := make(chan []byte, 1)
	off := s.OnFrame(func(f Frame) {
		select {
		case got <- f.Payload:
		default:
		}
	})
	defer off()
	fl := s.Follow(FollowOptions{Name: "test"})
	first := frameOf(-1)
	if err := s.EmitRaw(ws.OpText, first); err != nil {
		t.Fatal(err)
	}
	frames, err := fl.Next(context.Background(), make([]Frame, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	fl.Close()
	handled := <-got
	for k := range 8 * s.hub.segCap / len(first) {
		if err := s.EmitRaw(ws.OpText, frameOf(k)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(frames[0].Payload, first) || !bytes.Equal(handled, first) {
		t.Fatalf("a kept payload changed: follower %.40q, handler %.40q", frames[0].Payload, handled)
	}
}

// TestRecycleWithSessions: frames written to a socket client arrive intact
// while arenas are recycled under its writer, once another client's writer
// that ended no longer holds anything: in steps of two arenas' worth, each
// once the client has been written everything before it.
func TestRecycleWithSessions(t *testing.T) {
	s, url := testServer(t, Options{})
	c := dial(t, url, nil)
	gone := dial(t, url, nil)
	gone.CloseNow()
	waitFor(t, "the writer of the client that left to end", 10*time.Second, func() bool {
		s.hub.mu.Lock()
		defer s.hub.mu.Unlock()
		for f := range s.hub.departed {
			if f.owner.holds() != released {
				return false
			}
		}
		return s.Clients() == 1
	})
	step := 2 * s.hub.segCap / len(frameOf(0))
	const steps = 6
	errc := make(chan error, 1)
	go func() {
		var buf []byte
		for k := range steps * step {
			_, p, err := c.ReadMessageInto(context.Background(), buf[:0])
			if err != nil {
				errc <- err
				return
			}
			if want := frameOf(k); !bytes.Equal(p, want) {
				errc <- fmt.Errorf("frame %d: got %.60q, want %.60q", k, p, want)
				return
			}
			buf = p
		}
		errc <- nil
	}()
	for k := 0; k < steps*step; k++ {
		if k%step == 0 {
			waitFor(t, "the client to be written everything", 10*time.Second, func() bool {
				return s.Sessions()[0].QueuedMessages == 0
			})
		}
		if err := s.EmitRaw(ws.OpText, frameOf(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if r := recycledArenas(s.hub); r == 0 {
		t.Fatalf("no arena recycled in %d steps of two arenas' worth to a client that caught up before each", steps)
	}
}

// TestRecycleSparesBlockedWrite: a client that reads nothing has its
// writer blocked part way through a run when the queue bound cuts it; the
// bus relays many arenas' worth meanwhile, with nobody else to hold the
// log. When the client reads at last, it gets the frames up to the cut
// intact and in order, then its 1008 close: the run's bytes still to be
// written were not recycled under the blocked write (session.holds).
func TestRecycleSparesBlockedWrite(t *testing.T) {
	// Small socket buffers: the write blocks within the two arenas kept
	// for recycling.
	s, url := testServer(t, Options{SendBuffer: 8 << 10, WriteTimeout: time.Minute})
	stalled := dialStalled(t, url)
	k := 0
	emit := func() {
		t.Helper()
		if err := s.EmitRaw(ws.OpText, frameOf(k)); err != nil {
			t.Fatal(err)
		}
		k++
	}
	s.mu.Lock()
	c := s.sessions[0]
	s.mu.Unlock()
	// Its writer takes a run, then falls behind: blocked, the client reads
	// nothing.
	start := c.f.cursor.Load()
	emit()
	waitFor(t, "the writer to take the first frame", 10*time.Second, func() bool { return c.f.cursor.Load() != start })
	for s.Sessions()[0].QueuedBytes < 200<<10 {
		emit()
	}
	s.hub.setLimits(256, DefaultMaxQueueBytes) // cut, soon
	for !c.f.cut.Load() {
		emit()
	}
	for range 8 * s.hub.segCap / len(frameOf(k)) {
		emit()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var buf []byte
	n := 0
	for {
		_, p, err := stalled.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			var ce *ws.CloseError
			if !errors.As(err, &ce) || ce.Code != ws.StatusPolicyViolation {
				t.Fatalf("after %d frames: %v, want the 1008 close", n, err)
			}
			break
		}
		if want := frameOf(n); !bytes.Equal(p, want) {
			t.Fatalf("frame %d: got %.60q, want %.60q", n, p, want)
		}
		buf = p
		n++
	}
	if n == 0 || n >= k {
		t.Fatalf("got %d frames of %d, want those up to the cut", n, k)
	}
}

// TestReleaseForgetsRecycling: the memory release lets the arenas and
// slabs kept for recycling go, and recycling starts again afterwards.
func TestReleaseForgetsRecycling(t *testing.T) {
	const n = 4
	s, url := releaseAfter(t, n, Options{})
	h := s.hub
	for k := range 4 * h.segCap / len(frameOf(0)) {
		if err := s.EmitRaw(ws.OpText, frameOf(k)); err != nil {
			t.Fatal(err)
		}
	}
	kept := func() (int, int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.recycleQ), len(h.slabQ)
	}
	if a, sl := kept(); a == 0 || sl == 0 {
		t.Fatalf("%d arenas and %d slabs kept for recycling after 4 arenas' worth, want some", a, sl)
	}
	for range n {
		dial(t, url, nil)
	}
	waitFor(t, "the release", 60*time.Second, func() bool { return s.mem.count.Load() == 1 })
	if a, sl := kept(); a != 0 || sl != 0 {
		t.Fatalf("%d arenas and %d slabs kept for recycling after the memory release, want none", a, sl)
	}
}
