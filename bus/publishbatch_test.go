package bus

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// batchFrames returns n frames numbered from first, every seventh binary,
// every 50th larger than a quarter of a small hub's segment (a buffer of
// its own, allocated outside the lock part way through the batch).
func batchFrames(first, n int, origin string) []Frame {
	frames := make([]Frame, n)
	for i := range frames {
		k := first + i
		p := fmt.Appendf(nil, `{"type":"batch","data":{"k":%d}}`, k)
		if k%50 == 0 {
			p = fmt.Appendf(nil, `{"type":"batch","data":{"k":%d,"pad":"%s"}}`, k, bytes.Repeat([]byte("x"), 2*minSegment))
		}
		op := ws.OpText
		if k%7 == 0 {
			op = ws.OpBinary
		}
		frames[i] = Frame{Op: op, Payload: p, Origin: origin}
	}
	return frames
}

// TestHubPublishFramesWakesOnce: a follower asleep at the head is woken by
// a batch once, after its last frame, so its first fetch takes the whole
// batch (a session's writer: one write), in order, across the shared
// segments the batch fills and the large frames with buffers of their own.
// Woken per frame, the follower would fetch the batch piece by piece.
func TestHubPublishFramesWakesOnce(t *testing.T) {
	const rounds, size = 40, 300
	h := newHub(100000, 64*minSegment) // segments of 4 KiB: a batch spans several
	f := newFollower(h)
	h.join(f)
	type got struct {
		es  []*entry
		err error
	}
	res := make(chan got)
	go func() {
		for range rounds {
			es, err := f.next(context.Background(), nil, nil, nil, 10*size, 1<<30)
			res <- got{es, err}
		}
	}()
	for r := range rounds {
		waitFor(t, "the follower to sleep", 5*time.Second, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return f.sleepIdx >= 0
		})
		frames := batchFrames(r*size, size, "node-b")
		if n, err := h.publishFrames(frames, nil, ws.CompressionOptions{}, h.now()); err != nil {
			t.Fatalf("round %d: %d frames failed: %v", r, n, err)
		}
		g := <-res
		if g.err != nil {
			t.Fatal(g.err)
		}
		if len(g.es) != size {
			t.Fatalf("round %d: the woken follower took %d frames of the batch of %d", r, len(g.es), size)
		}
		for i, e := range g.es {
			if e.msg.Op() != frames[i].Op || !bytes.Equal(e.msg.Payload(), frames[i].Payload) || e.origin != "node-b" {
				t.Fatalf("round %d, frame %d: %v %.40q origin %q, want %v %.40q", r, i, e.msg.Op(), e.msg.Payload(), e.origin, frames[i].Op, frames[i].Payload)
			}
			if i > 0 && e.seq != g.es[i-1].seq+1 {
				t.Fatalf("round %d, frame %d: seq %d after %d", r, i, e.seq, g.es[i-1].seq)
			}
		}
	}
}

// TestPublishBatch: every client gets every frame of batches published
// while another goroutine publishes single frames, each batch in its
// order with its frames' types; a Follower sees each frame's origin; a
// batch with a frame that is not a data frame appends nothing; after
// Shutdown, ErrServerClosed.
func TestPublishBatch(t *testing.T) {
	const batches, size, singles = 20, 120, 200
	s, url := testServer(t, Options{})
	fl := s.Follow(FollowOptions{Name: "test"})
	defer fl.Close()
	cs := []*ws.Conn{dial(t, url, nil), dial(t, url, nil), dial(t, url, nil)}

	if err := s.PublishBatch([]Frame{{Op: ws.OpText, Payload: []byte(`{}`)}, {Op: ws.OpPing}}); err == nil {
		t.Fatal("a batch with a ping frame was taken")
	}
	if err := s.PublishBatch(nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		for k := range singles {
			if err := s.Publish(ws.OpText, fmt.Appendf(nil, `{"type":"single","data":{"k":%d}}`, k), "node-c"); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var want []Frame
	for b := range batches {
		frames := batchFrames(b*size, size, "node-b")
		want = append(want, frames...)
		if err := s.PublishBatch(frames); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	total := batches*size + singles
	// check takes the next frame a reader got; origin "-": not seen by
	// this reader (a client).
	check := func(who string, op ws.Opcode, p []byte, origin string, next *int, single *int) {
		t.Helper()
		if bytes.HasPrefix(p, []byte(`{"type":"single"`)) {
			if w := fmt.Appendf(nil, `{"type":"single","data":{"k":%d}}`, *single); !bytes.Equal(p, w) || origin != "-" && origin != "node-c" {
				t.Fatalf("%s: %s origin %q, want %s from node-c", who, p, origin, w)
			}
			*single++
			return
		}
		w := want[*next]
		if op != w.Op || !bytes.Equal(p, w.Payload) || origin != "-" && origin != w.Origin {
			t.Fatalf("%s: batch frame %d: %v %.40q origin %q, want %v %.40q origin %q", who, *next, op, p, origin, w.Op, w.Payload, w.Origin)
		}
		*next++
	}
	next, single := 0, 0
	for _, f := range nextFrames(t, fl, total) {
		check("follower", f.Op, f.Payload, f.Origin, &next, &single)
	}
	for i, c := range cs {
		next, single := 0, 0
		for range total {
			op, p := read(t, c)
			check(fmt.Sprintf("client %d", i), op, p, "-", &next, &single)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Shutdown(ctx)
	if err := s.PublishBatch(batchFrames(0, 2, "node-b")); err != ErrServerClosed {
		t.Fatalf("PublishBatch after Shutdown: %v", err)
	}
}
