package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// testNode is a bus with a cluster node, on loopback.
type testNode struct {
	bus  *bus.Server
	node *Node
}

// startNodes starts one bus and node per options, and shuts them down at
// the end of the test.
func startNodes(t *testing.T, opts []Options) []*testNode {
	t.Helper()
	var out []*testNode
	for _, o := range opts {
		n, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := bus.New(bus.Options{Addr: "127.0.0.1:0", Sequencer: n.Sequencer(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(b); err != nil {
			t.Fatal(err)
		}
		tn := &testNode{bus: b, node: n}
		out = append(out, tn)
		t.Cleanup(func() { tn.stop() })
	}
	return out
}

func (tn *testNode) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tn.bus.Shutdown(ctx)
	tn.node.Shutdown(ctx)
}

func (tn *testNode) url() string { return "ws://" + tn.bus.Addr().String() + "/core" }

// waitUp waits until every node's link is up and, for embedded servers,
// until the mesh is whole: a node is up with a route to one other node
// (docs in doc.go, "A partition, order sender"), and core NATS drops a
// frame that a server knows no subscription for, so a test that expects
// every frame to reach every node waits until each server has a route to
// every other and, with order "sender", knows every node's subscription
// to the frames' subject (routes carry subscriptions once connected).
func waitUp(t *testing.T, nodes []*testNode, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, tn := range nodes {
		for !tn.node.Up() || !meshWhole(tn, len(nodes)) {
			if time.Now().After(deadline) {
				s, _ := tn.node.health()
				t.Fatalf("node %s not up with the whole mesh after %v: %s", tn.node.Name(), timeout, s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// meshWhole reports whether tn's embedded server reaches all n nodes (true
// without an embedded server: one external server carries every node).
func meshWhole(tn *testNode, n int) bool {
	e := tn.node.emb
	if e == nil {
		return true
	}
	if e.peers() < n-1 {
		return false
	}
	return tn.node.o.Order != OrderSender || e.srv.GlobalAccount().Interest(tn.node.subj.direct) >= n
}

// wsClient is a raw WebSocket client that records every frame after the
// greeting.
type wsClient struct {
	t    *testing.T
	conn *ws.Conn
	mu   sync.Mutex
	got  []frame
	ch   chan struct{}
}

type frame struct {
	op   ws.Opcode
	data string
}

func dialNode(t *testing.T, tn *testNode) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := ws.Dial(ctx, tn.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadMessage(ctx); err != nil { // the greeting
		t.Fatal(err)
	}
	c := &wsClient{t: t, conn: conn, ch: make(chan struct{}, 1)}
	go func() {
		for {
			op, b, err := conn.ReadMessage(context.Background())
			if err != nil {
				return
			}
			c.mu.Lock()
			c.got = append(c.got, frame{op, string(b)})
			c.mu.Unlock()
			select {
			case c.ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { conn.CloseNow() })
	return c
}

func (c *wsClient) send(op ws.Opcode, s string) {
	c.t.Helper()
	if err := c.conn.WriteMessage(context.Background(), op, []byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// waitN waits until the client has n frames and returns them.
func (c *wsClient) waitN(n int, timeout time.Duration) []frame {
	c.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		got := slices.Clone(c.got)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.ch:
		case <-deadline.C:
			c.t.Fatalf("got %d frames, want %d; the last: %v", len(got), n, got[max(0, len(got)-3):])
		}
	}
}

func msg(sender string, i int) string {
	return fmt.Sprintf(`{"type":"t","data":{"from":%q,"i":%d},"context":{}}`, sender, i)
}

// Three nodes, a client on each, all sending at once: every client gets
// every frame, binary frames stay binary, and in order "total" every client
// sees one and the same sequence.
func TestThreeNodes(t *testing.T) {
	for _, order := range []Order{OrderTotal, OrderSender} {
		t.Run(string(order), func(t *testing.T) {
			nodes := startNodes(t, meshOptions(t, 3, order))
			waitUp(t, nodes, 20*time.Second)
			var cs []*wsClient
			for _, tn := range nodes {
				cs = append(cs, dialNode(t, tn))
			}
			const per = 100
			var wg sync.WaitGroup
			for i, c := range cs {
				wg.Go(func() {
					for j := range per {
						c.send(ws.OpText, msg(fmt.Sprint(i), j))
					}
					c.send(ws.OpBinary, fmt.Sprintf("\x00bin%d", i))
				})
			}
			wg.Wait()
			var seqs [][]frame
			for _, c := range cs {
				seqs = append(seqs, c.waitN(3*(per+1), 10*time.Second))
			}
			for ci, got := range seqs {
				if len(got) != 3*(per+1) {
					t.Fatalf("client %d got %d frames, want %d", ci, len(got), 3*(per+1))
				}
				next := map[string]int{}
				bins := 0
				for _, f := range got {
					if f.op == ws.OpBinary {
						bins++
						continue
					}
					var from string
					var i int
					fmt.Sscanf(strings.TrimPrefix(f.data, `{"type":"t","data":{"from":"`), `%1s","i":%d`, &from, &i)
					if i != next[from] {
						t.Fatalf("client %d: from %s got %d, want %d (sender order broken)", ci, from, i, next[from])
					}
					next[from]++
				}
				if bins != 3 {
					t.Errorf("client %d got %d binary frames, want 3", ci, bins)
				}
			}
			if order == OrderTotal {
				for ci := 1; ci < len(seqs); ci++ {
					if !slices.Equal(seqs[0], seqs[ci]) {
						t.Errorf("client %d saw another order than client 0", ci)
					}
				}
			}
			resp, err := http.Get("http://" + nodes[1].bus.Addr().String() + "/health")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "cluster: up, 2 of 2 peers (order "+string(order)) {
				t.Errorf("/health = %d %q", resp.StatusCode, body)
			}
			mfs, err := nodes[1].bus.Metrics().Gather()
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, mf := range mfs {
				names[mf.GetName()] = true
			}
			for _, want := range []string{"ovbus_cluster_link_up", "ovbus_cluster_sent_messages_total", "ovbus_cluster_received_bytes_total", "ovbus_cluster_relay_latency_seconds"} {
				if !names[want] {
					t.Errorf("the bus's registry has no %s", want)
				}
			}
			m := nodes[0].node.m
			if v := testutil.ToFloat64(m.outMsgs); v != per+1 {
				t.Errorf("sent messages = %v, want %d", v, per+1)
			}
			if c := testutil.CollectAndCount(m.dropped); c != 0 {
				t.Errorf("%d drop series, want none", c)
			}
		})
	}
}

// A node that cannot reach the others says it is starting, then (after
// startWait) that it is down, and serves its own clients: with order
// "sender" at once, with order "total" once it stops waiting for the
// stream (frames it holds meanwhile are delivered then, in order).
func TestLinkDownServesLocalClients(t *testing.T) {
	for _, order := range []Order{OrderTotal, OrderSender} {
		t.Run(string(order), func(t *testing.T) {
			opts := meshOptions(t, 2, order)[:1] // its peer never starts
			nodes := startNodes(t, opts)
			tn := nodes[0]
			time.Sleep(2 * probeInterval)
			if s, ok := tn.node.health(); !ok || !strings.HasPrefix(s, "starting, 0 of 1 peers") {
				t.Errorf("health = %q, %v; want starting", s, ok)
			}
			a, b := dialNode(t, tn), dialNode(t, tn)
			a.send(ws.OpText, msg("a", 0))
			a.send(ws.OpText, msg("a", 1))
			for _, c := range []*wsClient{a, b} {
				if got := c.waitN(2, startWait+5*time.Second); got[0].data != msg("a", 0) || got[1].data != msg("a", 1) {
					t.Errorf("got %v", got)
				}
			}
			for deadline := time.Now().Add(startWait + 5*time.Second); ; time.Sleep(20 * time.Millisecond) {
				s, _ := tn.node.health()
				if strings.HasPrefix(s, "down: no other node heard") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("health = %q, want down", s)
				}
			}
			if tn.node.Up() || testutil.ToFloat64(tn.node.m.linkUp) != 0 {
				t.Error("link up without a peer")
			}
			if c := testutil.CollectAndCount(tn.node.m.dropped); c != 0 {
				t.Errorf("%d drop series, want none: the frames wait for the stream", c)
			}
		})
	}
}

// streamLeader returns the name of the node that leads the stream, as n
// sees it ("" when it cannot tell).
func streamLeader(n *Node) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := n.js.Stream(ctx, n.stream)
	if err != nil || s.CachedInfo().Cluster == nil {
		return ""
	}
	return s.CachedInfo().Cluster.Leader
}

// With Lead, a node takes the stream's leadership when its link comes up:
// here a node that does not lead restarts with Lead, and the frames of
// every node still reach every client in one order.
func TestLead(t *testing.T) {
	opts := meshOptions(t, 3, OrderTotal)
	nodes := startNodes(t, opts)
	waitUp(t, nodes, 20*time.Second)
	var leader string
	for deadline := time.Now().Add(20 * time.Second); leader == ""; time.Sleep(20 * time.Millisecond) {
		if leader = streamLeader(nodes[0].node); leader == "" && time.Now().After(deadline) {
			t.Fatal("the stream has no leader")
		}
	}
	x := 0
	for opts[x].NodeName == leader {
		x++
	}
	nodes[x].stop()
	opts[x].Lead = true
	nodes[x] = startNodes(t, opts[x:x+1])[0]
	waitUp(t, nodes, 20*time.Second)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l := streamLeader(nodes[x].node)
		if l == opts[x].NodeName {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s leads the stream, want %s (cluster.lead)", l, opts[x].NodeName)
		}
	}
	waitUp(t, nodes, 20*time.Second)
	var cs []*wsClient
	for _, tn := range nodes {
		cs = append(cs, dialNode(t, tn))
	}
	const per = 20
	for i, c := range cs {
		for j := range per {
			c.send(ws.OpText, msg(fmt.Sprint(i), j))
		}
	}
	first := cs[0].waitN(3*per, 10*time.Second)
	if len(first) != 3*per {
		for i, tn := range nodes {
			mfs, _ := tn.bus.Metrics().Gather()
			for _, mf := range mfs {
				if strings.HasPrefix(mf.GetName(), "ovbus_cluster_dropped") || strings.HasPrefix(mf.GetName(), "ovbus_cluster_received_messages") {
					for _, m := range mf.Metric {
						t.Logf("node %d %s %v %v", i, mf.GetName(), m.Label, m.Counter.GetValue())
					}
				}
			}
		}
		t.Logf("restarted %d; leader %s", x, streamLeader(nodes[1].node))
		t.Fatalf("client 0 got %d frames, want %d", len(first), 3*per)
	}
	for ci, c := range cs[1:] {
		if got := c.waitN(3*per, 10*time.Second); !slices.Equal(got, first) {
			t.Errorf("client %d saw %d frames in another order than client 0", ci+1, len(got))
		}
	}
}
