package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// Order "sender": frames a node's clients sent after another node started,
// but before that node subscribed, reach the other node's clients: at first
// contact (the heartbeat says what was sent) it asks for them.
func TestReplayToLateSubscriber(t *testing.T) {
	s := natsServer(t, 0, nil)
	a := startNodes(t, []Options{externalOptions(s.ClientURL(), "a", OrderSender)})[0]
	n, err := New(externalOptions(s.ClientURL(), "b", OrderSender)) // b has started...
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.New(bus.Options{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	tb := &testNode{bus: b, node: n}
	t.Cleanup(tb.stop)
	cb := dialNode(t, tb) // ... and has a client,
	ca := dialNode(t, a)
	// A probe on a's direct subject sees when the NATS server has routed
	// a's frames: only then may b subscribe, or b would get them directly
	// (a node counts a frame as sent before its publish reaches the server).
	probe, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	sub, err := probe.SubscribeSync(a.node.subj.direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ca.send(ws.OpText, msg("a", i))
	}
	ca.waitN(3, 5*time.Second)
	for routed := uint64(0); routed < 3; {
		nm, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("node a's frames did not reach the NATS server: %v", err)
		}
		m, err := parseMsg(nm.Header, nm.Data)
		if err != nil {
			t.Fatal(err)
		}
		routed = max(routed, m.last())
	}
	if err := n.Start(b); err != nil { // ... but subscribes only now
		t.Fatal(err)
	}
	got := cb.waitN(3, 10*time.Second)
	for i, f := range got {
		if f.data != msg("a", i) {
			t.Fatalf("frame %d: %q", i, f.data)
		}
	}
	if v := testutil.ToFloat64(n.m.recovered.WithLabelValues("replay")); v != 3 {
		t.Errorf("recovered = %v, want 3", v)
	}
}

// Order "total": while the stream does not answer (here: the NATS server
// node a talks to is held, as a frozen stream leader would be), a's frames
// still reach a's clients after stallAfter; /health says "relaxed"; once
// the stream answers again, they reach b's clients, each once, and the
// stream holds them.
func TestRelaxWhileTheStreamDoesNotAnswer(t *testing.T) {
	s := natsServer(t, 0, nil)
	p := newStallProxy(t, s.Addr().String())
	nodes := startNodes(t, []Options{externalOptions("nats://"+p.addr(), "a", OrderTotal), externalOptions(s.ClientURL(), "b", OrderTotal)})
	waitUp(t, nodes, 10*time.Second)
	a, b := nodes[0].node, nodes[1].node
	ca, cb := dialNode(t, nodes[0]), dialNode(t, nodes[1])
	ca.send(ws.OpText, msg("a", 0))
	cb.waitN(1, 5*time.Second)

	p.stall()
	ca.send(ws.OpText, msg("a", 1))
	ca.send(ws.OpText, msg("a", 2))
	if got := ca.waitN(3, 5*time.Second); got[1].data != msg("a", 1) || got[2].data != msg("a", 2) {
		t.Fatalf("a's client got %v", got)
	}
	waitHealthPrefix(t, a, "relaxed")
	if v := testutil.ToFloat64(a.m.relaxed); v != 1 {
		t.Errorf("order_relaxed = %v", v)
	}
	p.resume()
	got := cb.waitN(3, 10*time.Second)
	for i, f := range got {
		if f.data != msg("a", i) {
			t.Fatalf("b's client frame %d: %q", i, f.data)
		}
	}
	waitHealthPrefix(t, a, "up")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		im, err := parseMsg(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		frames += im.count
	}
	if frames != 3 {
		t.Errorf("the stream holds %d frames, want each of the 3 once", frames)
	}
	cb.send(ws.OpText, "end")
	if got := ca.waitN(4, 5*time.Second); got[3].data != "end" || len(got) != 4 {
		t.Errorf("a's client got %v, want each frame once", got)
	}
	if got := cb.waitN(4, 5*time.Second); got[3].data != "end" || len(got) != 4 {
		t.Errorf("b's client got %v, want each frame once", got)
	}
	if c := testutil.CollectAndCount(a.m.dropped); c != 0 {
		t.Errorf("%d drop series on a", c)
	}
	if v := testutil.ToFloat64(a.m.relaxedWindows); v < 1 {
		t.Errorf("relaxed windows = %v", v)
	}
}

// waitHealthPrefix waits until n's /health line starts with prefix.
func waitHealthPrefix(t *testing.T, n *Node, prefix string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h, _ := n.health()
		if strings.HasPrefix(h, prefix) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health = %q, want %s", h, prefix)
		}
	}
}

// While relaxed, the oldest unconfirmed message is offered to the stream
// again every retryInterval, and a large one only as often as its size at
// answerRate allows: a frame of many MiB offered as often as a small one
// fills the node's NATS connection and delays its heartbeats. Nothing
// answers here (the node is not started, so it hears no answers), and the
// clock is stepOut's argument.
func TestReofferPacedBySize(t *testing.T) {
	s := natsServer(t, 0, func(o *server.Options) { o.MaxPayload = 8 << 20 })
	o := externalOptions(s.ClientURL(), "a", OrderTotal)
	o.MaxMsgSize = 4 << 20
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	watch, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	sub, err := watch.SubscribeSync(n.subj.stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size, want int // offers over 2 s
	}{
		{100, 10},    // every 200 ms
		{4 << 20, 4}, // every 500 ms
	} {
		m := n.newOutMsg(1, []outFrame{{ws.OpBinary, make([]byte, tc.size)}})
		t0 := time.Now()
		n.out.mu.Lock()
		n.out.relaxed, n.out.pending, n.out.frames, n.out.bytes = true, []*outMsg{m}, 1, int64(len(m.data))
		n.out.mu.Unlock()
		n.out.lastTry = t0
		for now := t0; now.Sub(t0) <= 2*time.Second; now = now.Add(outTick) {
			n.stepOut(now)
		}
		if err := n.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := watch.Flush(); err != nil {
			t.Fatal(err)
		}
		got, _, _ := sub.Pending()
		if got != tc.want {
			t.Errorf("a %d-byte message was offered %d times in 2 s, want %d", tc.size, got, tc.want)
		}
		for range got {
			sub.NextMsg(time.Second)
		}
	}
}
