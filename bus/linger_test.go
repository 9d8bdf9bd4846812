package bus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestStreamingSince: a socket armed in this tick or the one before
// streams, across the wrap of the 16-bit ticks; two ticks or more before
// does not.
func TestStreamingSince(t *testing.T) {
	for _, c := range []struct {
		armed, now uint16
		want       bool
	}{
		{100, 100, true}, {100, 101, true}, {100, 102, false}, {100, 99, false},
		{65535, 65535, true}, {65535, 0, true}, {65535, 1, false}, {65534, 0, false},
		{0, 40000, false},
	} {
		if got := streamingSince(c.armed, c.now, 1); got != c.want {
			t.Errorf("armed at tick %d, now %d: streaming %v, want %v", c.armed, c.now, got, c.want)
		}
	}
}

// TestFlushHeldWakesUnderCorks: a lingering reader writes what is due
// before it sleeps, corks held by other readers or not, and the wake is
// done when flushHeld returns.
func TestFlushHeldWakesUnderCorks(t *testing.T) {
	h := newHub(1024, 1<<20)
	h.corkFor = time.Hour
	_, woken := sleepingOwner(t, h)
	h.cork()
	h.cork() // another reader of the round
	h.publish(testEntry(0, 0))
	h.flushHeld()
	if len(woken) != 1 {
		t.Fatalf("%d wakes after flushHeld, want 1", len(woken))
	}
	<-woken
	h.uncork()
	h.uncork()
	if len(woken) != 0 || h.corks.Load() != 0 || h.wakeDue {
		t.Fatalf("after the corks went: %d more wakes, corks %d, wake due %v", len(woken), h.corks.Load(), h.wakeDue)
	}
}

// TestLingeringReaders: with every reader counting as streaming (so that
// each one that relayed frames lingers, whatever the machine's timing),
// two clients that send frames back to back, a third that sends one now
// and then, and one that closes in the middle of its stream: every client
// gets every frame of each sender, in that sender's order, and the closed
// one's frames up to its close. On the portable path (no poller) nothing
// lingers and the same holds.
func TestLingeringReaders(t *testing.T) {
	s, url := testServerSet(t, Options{}, func(s *Server) { s.hub.streamTicks = 1<<16 - 1 })
	const n = 300
	subs := []*ws.Conn{dial(t, url, nil), dial(t, url, nil)}
	senders := []*ws.Conn{dial(t, url, nil), dial(t, url, nil), dial(t, url, nil)}
	quitter := dial(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Every connection reads from the start: a sender that does not read
	// would be cut as a slow consumer once its echoes fill its socket.
	type got struct{ from, seq []int }
	all := append(append(append([]*ws.Conn{}, subs...), senders...), quitter)
	res := make([]got, len(all))
	expect := 3*n + 5 // 3 streams of n (the third: lone frames), the quitter's 5 before its close
	var wg sync.WaitGroup
	for i, c := range all[:len(all)-1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(res[i].seq) < expect {
				_, b, err := c.ReadMessage(ctx)
				if err != nil {
					t.Errorf("client %d after %d frames: %v", i, len(res[i].seq), err)
					return
				}
				var from, seq int
				if _, err := fmt.Sscanf(string(b), `{"type":"s%d","data":{"i":%d}}`, &from, &seq); err != nil {
					t.Errorf("client %d: frame %q", i, b)
					return
				}
				res[i].from, res[i].seq = append(res[i].from, from), append(res[i].seq, seq)
			}
		}()
	}
	frame := func(from, i int) []byte { return fmt.Appendf(nil, `{"type":"s%d","data":{"i":%d}}`, from, i) }
	for k, c := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if k == 2 && i%50 == 0 {
					time.Sleep(time.Millisecond) // now and then: a lone frame
				}
				if err := c.WriteMessage(ctx, ws.OpText, frame(k, i)); err != nil {
					t.Errorf("sender %d: %v", k, err)
					return
				}
			}
		}()
	}
	for i := range 5 {
		if err := quitter.WriteMessage(ctx, ws.OpText, frame(3, i)); err != nil {
			t.Fatal(err)
		}
	}
	// The close frame right behind the stream, while its reader may
	// linger (a drop instead would lose frames the bus had not read yet:
	// the kernel answers a close with unread bytes with a reset).
	if err := quitter.Close(ws.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, r := range res[:len(res)-1] {
		next := map[int]int{}
		for j, from := range r.from {
			if r.seq[j] != next[from] {
				t.Fatalf("client %d: frame %d of sender %d came where %d was due", i, r.seq[j], from, next[from])
			}
			next[from]++
		}
		if next[0] != n || next[1] != n || next[2] != n || next[3] != 5 {
			t.Fatalf("client %d got %v frames by sender, want %d of each stream and the quitter's 5", i, next, n)
		}
	}
	if lingers := s.hub.lingers.Load(); pollDisabled != (lingers == 0) {
		t.Fatalf("%d lingers with the poll path off: %v", lingers, pollDisabled)
	}
}
