package bus

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestWakerWritesInline: with more sleeping clients than the publisher
// wakes itself (inlineWakes), the waker writes their batches itself
// (session.writeInline). Every client still gets every frame, in the log's
// order, whether it was asleep for each frame (one at a time) or frames
// came while it was written to (a burst).
func TestWakerWritesInline(t *testing.T) {
	_, url := testServer(t, Options{})
	const clients, n = 3 * inlineWakes, 40
	cs := make([]*ws.Conn, clients)
	for i := range cs {
		cs[i] = dial(t, url, nil)
	}
	msg := func(k int) []byte { return []byte(fmt.Sprintf(`{"type":"t","data":{"k":%d}}`, k)) }
	for k := range n { // one at a time
		send(t, cs[k%clients], ws.OpText, msg(k))
		expect(t, ws.OpText, msg(k), cs...)
	}
	for k := range n { // a burst, from one client (the log's order is the order it sent)
		send(t, cs[1], ws.OpText, msg(n+k))
	}
	for k := range n {
		expect(t, ws.OpText, msg(n+k), cs...)
	}
}

// TestSlowConsumerAmongMany: TestSlowConsumer with more clients than the
// publisher wakes itself, so that the waker writes to all of them
// (session.writeInline): the slow client's socket fills part way through
// a batch, its writer goroutine takes the rest over, and it is still cut
// with 1008 while every other client gets every frame in order.
func TestSlowConsumerAmongMany(t *testing.T) { testSlowConsumer(t, 2*inlineWakes) }

// TestWakerRounds: the waker (and its helpers, with more than a share of
// followers and more than one P) wakes every sleeper once with wakeInline,
// comes back with wakeAgain to those that ask, and hands a follower on
// with wakeHandOff after wakerRounds rounds.
func TestWakerRounds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, n := range []int{3, 2*wakerShare + 5} {
		h := newHub(1024, 1<<20)
		calls := make([][]wakeHow, n)
		var wg sync.WaitGroup
		wg.Add(n)
		for i := range n {
			wants := i % (wakerRounds + 2) // trues it returns
			f := newFollower(h)
			f.owner = wakeFunc(func(how wakeHow) bool {
				calls[i] = append(calls[i], how) // one caller at a time per follower
				again := len(calls[i]) <= wants && how != wakeHandOff
				if !again {
					wg.Done()
				}
				return again
			})
			h.join(f)
			if !h.sleep(f, f.cursor.Load()) {
				t.Fatal("sleep with nothing published")
			}
		}
		h.publish(testEntry(0, 0))
		wg.Wait()
		for i, got := range calls {
			wants := i % (wakerRounds + 2)
			want := []wakeHow{wakeInline}
			for range min(wants, wakerRounds-1) {
				want = append(want, wakeAgain)
			}
			if wants >= wakerRounds {
				want = append(want, wakeHandOff)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%d followers: follower %d (asks %d times): calls %v, want %v", n, i, wants, got, want)
			}
		}
	}
}

// TestWriteInlineSleepsWhenCaughtUp: a batch the waker writes that leaves
// the session at the head of the log puts its follower to sleep in the
// same call (writeInline reports no need to come back, and the session has
// no writer any more), instead of in the waker's next round; the client
// gets the frame.
func TestWriteInlineSleepsWhenCaughtUp(t *testing.T) {
	s, url := testServer(t, Options{})
	cl := dial(t, url, nil)
	var c *session
	s.mu.Lock()
	for _, sc := range s.sessions {
		c = sc
	}
	s.mu.Unlock()
	h := s.hub
	sleeping := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return c.f.sleepIdx >= 0
	}
	waitFor(t, "the session's writer to sleep", 60*time.Second, func() bool { return sleeping() && c.wpend.Load() == 0 })
	// Be c's writer (wpend 1): the publish's wake then starts none and
	// leaves the frame to it (wake: "a writer runs: it sees the wake").
	if !c.wpend.CompareAndSwap(0, 1) {
		t.Fatal("a writer started with nothing published")
	}
	msg := []byte(`{"type":"t","data":{}}`)
	if err := s.Publish(ws.OpText, msg, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the publish's wake", 60*time.Second, func() bool { return !sleeping() && c.wpend.Load() == 2 })
	c.wpend.Store(1) // the wake was seen: by this writer, below
	if again := c.writeInline(); again {
		for c.writeInline() { // as the waker would, so that the server can stop
		}
		t.Fatal("writeInline asks to be called again with the log written up to its head")
	}
	if !sleeping() || c.wpend.Load() != 0 {
		t.Fatalf("after writeInline: asleep %v, wpend %d; want asleep with no writer", sleeping(), c.wpend.Load())
	}
	if got := c.written.Load(); got != h.head.Load() {
		t.Fatalf("written up to %d, head %d", got, h.head.Load())
	}
	expect(t, ws.OpText, msg, cl)
}
