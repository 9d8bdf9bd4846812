package cluster

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// inboxRig is a node with only what its inbox needs: a bus whose log a
// follower reads; the replay requests it makes are read from its queue.
type inboxRig struct {
	t    *testing.T
	n    *Node
	f    *bus.Follower
	asks chan *nats.Msg
}

func newInboxRig(t *testing.T, order Order) *inboxRig {
	s := natsServer(t, 0, func(o *server.Options) { o.JetStream = false })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(bus.Options{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	o := Options{Name: "t", NodeName: "me", Order: order, NATSURL: s.ClientURL(), Logger: slog.New(slog.DiscardHandler)}.WithDefaults()
	n := &Node{o: o, log: o.Logger, m: newMetrics().observers(), lossLog: map[string]time.Time{}, nc: nc,
		subj: newSubjects(o.Name, order), startedAt: time.Now(), asks: make(chan *nats.Msg, 16),
		in: inbox{origins: map[string]*origin{}}, peer: peers{m: map[string]*peer{}}}
	n.bus.Store(b)
	return &inboxRig{t: t, n: n, f: b.Follow(bus.FollowOptions{Name: "test"}), asks: n.asks}
}

// msg3 is a message of count frames of origin from first on (each frame's
// text is origin and its number).
func msg3(origin string, inc, first uint64, count int) *inMsg {
	o := &Node{o: Options{NodeName: origin}, incStr: strconv.FormatUint(inc, 10)}
	var frames []outFrame
	for i := range count {
		frames = append(frames, outFrame{ws.OpText, []byte(origin + strconv.FormatUint(first+uint64(i), 10))})
	}
	m, _ := parseMsg(o.newOutMsg(first, frames).hdr, o.newOutMsg(first, frames).data)
	return m
}

// expect reads the next frames of the log and compares them with want.
func (r *inboxRig) expect(want ...string) {
	r.t.Helper()
	var got []string
	for len(got) < len(want) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		fs, err := r.f.Next(ctx, make([]bus.Frame, 0, 16))
		cancel()
		if err != nil {
			r.t.Fatalf("got %q, want %q: %v", got, want, err)
		}
		for _, f := range fs {
			got = append(got, string(f.Payload))
		}
	}
	if !slices.Equal(got, want) {
		r.t.Fatalf("got %q, want %q", got, want)
	}
}

// nothing checks that the log got nothing more.
func (r *inboxRig) nothing() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if fs, err := r.f.Next(ctx, make([]bus.Frame, 0, 16)); err == nil {
		r.t.Fatalf("unexpected frames %v", fs)
	}
}

// ask waits for the next replay request and checks its range.
func (r *inboxRig) ask(origin string, from, to uint64, since bool) {
	r.t.Helper()
	select {
	case m := <-r.asks:
		h := m.Header
		if m.Subject != r.n.subj.replay+origin || h.Get(hdrFrom) != strconv.FormatUint(from, 10) || h.Get(hdrTo) != strconv.FormatUint(to, 10) ||
			(h.Get(hdrSince) != "") != since || m.Reply != r.n.subj.replayed+"me" {
			r.t.Fatalf("asked %s %v (reply %s), want %s from %d to %d, since %v", m.Subject, h, m.Reply, origin, from, to, since)
		}
	case <-time.After(5 * time.Second):
		r.t.Fatalf("no request to %s for %d-%d", origin, from, to)
	}
}

// Each origin's frames go into the log in its numbering, once each: a
// repeated frame is dropped, one ahead of a gap waits for the gap's frames,
// which are asked of the origin; a gap nobody fills is counted and skipped;
// a restarted origin numbers afresh and its predecessor's late frames are
// dropped.
func TestInboxEachFrameOnceInOrder(t *testing.T) {
	r := newInboxRig(t, OrderSender)
	n := r.n
	n.receive(msg3("a", 10, 1, 2), fromDirect)
	r.expect("a1", "a2")
	n.receive(msg3("a", 10, 2, 2), fromDirect) // a2 again, and a3
	r.expect("a3")
	n.receive(msg3("a", 10, 6, 1), fromDirect) // ahead of a4, a5
	r.ask("a", 4, 5, false)
	r.nothing()
	n.receive(msg3("a", 10, 4, 2), fromReplay)
	r.expect("a4", "a5", "a6")
	n.receive(msg3("a", 9, 7, 1), fromDirect) // the earlier incarnation, late
	r.nothing()

	// A restart: numbering from 1 again; a2 of the new incarnation waits
	// for its a1, which never comes.
	n.receive(msg3("a", 11, 2, 1), fromDirect)
	r.ask("a", 1, 1, false)
	r.nothing()
	n.tickInbox(time.Now().Add(gapWait))
	r.expect("a2")
	if v := testutil.ToFloat64(n.m.dropped.WithLabelValues("in", "gap")); v != 1 {
		t.Errorf("gap drops = %v, want 1", v)
	}

	// First contact, not at the origin's first frame: what it sent since
	// this node started is asked for; it had nothing, so b5 goes on.
	n.receive(msg3("b", 20, 5, 1), fromDirect)
	r.ask("b", 1, 4, true)
	r.nothing()
	n.replayEnd("b", 20, 5, false)
	r.expect("b5")
	// A gap the origin no longer holds is counted as "behind".
	n.receive(msg3("b", 20, 9, 1), fromDirect)
	r.ask("b", 6, 8, false)
	n.replayEnd("b", 20, 8, true)
	n.receive(msg3("b", 20, 8, 1), fromReplay)
	r.expect("b8", "b9")
	if v := testutil.ToFloat64(n.m.dropped.WithLabelValues("in", "behind")); v != 2 {
		t.Errorf("behind drops = %v, want 2", v)
	}
	if v := testutil.ToFloat64(n.m.recovered.WithLabelValues("replay")); v != 3 {
		t.Errorf("recovered by replay = %v, want 3", v)
	}
}

// Order "total": the stream's messages go in as they come; a frame that
// came directly (its origin could not reach the stream) goes in at once and
// is counted as outside the stream's order; its copy from the stream is
// dropped.
func TestInboxRelaxedFrames(t *testing.T) {
	r := newInboxRig(t, OrderTotal)
	n := r.n
	n.receive(msg3("a", 1, 7, 1), fromStream) // the stream's order from its start point
	n.receive(msg3("b", 1, 3, 1), fromStream)
	r.expect("a7", "b3")
	n.receive(msg3("a", 1, 8, 2), fromDirect)
	r.expect("a8", "a9")
	n.receive(msg3("b", 1, 4, 1), fromStream)
	n.receive(msg3("a", 1, 8, 2), fromStream)
	r.expect("b4")
	r.nothing()
	if v := testutil.ToFloat64(n.m.relaxedFrames); v != 2 {
		t.Errorf("relaxed frames = %v, want 2", v)
	}
	if !n.relaxedIn(time.Now()) || n.relaxedIn(time.Now().Add(relaxLinger)) {
		t.Error("relaxedIn")
	}
	// A gap among the stream's messages is not asked of the origin at once:
	// the stream fills it.
	n.receive(msg3("b", 1, 6, 1), fromStream)
	select {
	case m := <-r.asks:
		t.Fatalf("asked at once: %v", m.Header)
	case <-time.After(50 * time.Millisecond):
	}
	n.tickInbox(time.Now().Add(streamGapAsk))
	r.ask("b", 5, 5, false)
	n.receive(msg3("b", 1, 5, 1), fromStream)
	r.expect("b5", "b6")
}

func TestRing(t *testing.T) {
	n := &Node{o: Options{NodeName: "a"}, incStr: "1"}
	r := &ring{maxBytes: 100, maxAge: time.Minute}
	var msgs []*outMsg
	for i := range 5 {
		m := n.newOutMsg(uint64(2*i+1), []outFrame{{ws.OpText, []byte("0123456789")}, {ws.OpText, []byte("0123456789")}})
		msgs = append(msgs, m)
		r.add(m)
	}
	got, first, evicted := r.get(4, 7, time.Time{})
	if len(got) != 3 || got[0] != msgs[1] || got[2] != msgs[3] || first != 4 || evicted {
		t.Errorf("get(4, 7) = %d messages from %d, evicted %v", len(got), first, evicted)
	}
	got, first, _ = r.get(1, 10, msgs[2].sent)
	if len(got) == 0 || got[0].sent.Before(msgs[2].sent) || first < 5 {
		t.Errorf("since the third: %d messages from %d", len(got), first)
	}
	// 5 messages of 22+ bytes: over 100 bytes the oldest go.
	for i := range 3 {
		r.add(n.newOutMsg(uint64(11+2*i), []outFrame{{ws.OpText, []byte("0123456789")}, {ws.OpText, []byte("0123456789")}}))
	}
	got, first, evicted = r.get(1, 4, time.Time{})
	if len(got) != 0 || first != 5 || !evicted {
		t.Errorf("after eviction get(1, 4) = %d messages, first %d, evicted %v", len(got), first, evicted)
	}
	if _, _, evicted := r.get(1, 4, time.Now().Add(time.Hour)); evicted {
		t.Error("frames older than since counted as evicted")
	}
}

// A node's own frames of this process count from 1: the first one it sees
// (here one sent directly while the stream did not answer) does not make
// those before it look old; they are delivered when they come.
func TestInboxOwnFramesFromOne(t *testing.T) {
	r := newInboxRig(t, OrderTotal)
	n := r.n
	n.inc = 5
	n.receive(msg3("me", 5, 3, 1), fromDirect)
	r.ask("me", 1, 2, false)
	r.nothing()
	n.receive(msg3("me", 5, 1, 2), fromStream)
	r.expect("me1", "me2", "me3")
}
