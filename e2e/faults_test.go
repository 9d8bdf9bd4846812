package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/internal/testport"
	"github.com/ovbus/ovbus/ws"
)

// The cluster's promises under faults. Three `ovbus serve` processes (NATS
// embedded), a sender on every node sending all along at faultRate, two
// receivers on every node, and one fault after another: SIGKILL of the
// stream's leader and of a follower (each restarted once the others carry
// on), SIGSTOP of each for 8 s, and node 2's routes cut and healed. In
// order "sender" the same faults hit the same nodes (node 2 has no special
// role there). At the end a checker goes over what every receiver got:
//
//   - no frame twice, each sender's frames in the order sent, none missing
//     (a receiver that connected late: none missing after it connected);
//   - the only frames allowed to be missing are those a killed node's
//     sender sent in its last faultInflight before the kill, and then only
//     at the end of that sender's frames;
//   - order "total": any two receivers' sequences differ by no more frames
//     than their nodes delivered outside the stream's order
//     (ovbus_cluster_relaxed_frames_total, the documented window).
//
// It also measures, per fault, the longest time a receiver on a node the
// fault did not hit went without a frame from another such node, and the
// frames lost: logged, and written as a table when OVBUS_FAULT_REPORT names
// a file (scripts/cluster-faults.sh). Nothing here times the cluster: every
// wait is for something observable (a /health line, frames sent or
// received), bounded generously.

const (
	faultRate     = 100              // frames per second per sender
	faultHold     = 150              // frames each sender sends while a fault lasts, at least
	faultStop     = 8 * time.Second  // SIGSTOP length
	faultInflight = 3 * time.Second  // what a killed node may take with it
	faultSettle   = 90 * time.Second // bound of every wait for the cluster to settle
)

func TestClusterFaults(t *testing.T) {
	for _, order := range []string{"total", "sender"} {
		t.Run(order, func(t *testing.T) {
			fc := newFaultCluster(t, order)
			defer fc.dumpIfFailed()
			fc.settle(true)
			for i := range fc.nodes {
				fc.attach(i)
			}
			fc.waitSent(faultHold)
			leader, follower := "leader", "follower"
			if order == "sender" {
				leader, follower = "node 2", "node 0"
			}
			for _, f := range []struct {
				name   string
				kind   string
				target int
			}{
				{"SIGKILL " + follower, "kill", 0},
				{"SIGKILL " + leader, "kill", 2},
				{"SIGSTOP " + follower + " 8 s", "stop", 0},
				{"SIGSTOP " + leader + " 8 s", "stop", 2},
				{"routes of " + leader + " cut and healed", "cut", 2},
			} {
				fc.inject(f.name, f.kind, f.target)
			}
			fc.finish()
		})
	}
}

// A node started first, before its peers, loses nothing: its clients send
// while it is "starting" (order total: it holds their frames until the
// stream is there; order sender: it delivers them to its own clients at
// once), then the others start, their clients connect and send too. The
// same checker as TestClusterFaults: every client gets every frame sent
// since it connected (the first node's from the first frame on), each
// sender's order, and in order "total" one order for all.
func TestClusterStartFirst(t *testing.T) {
	for _, order := range []string{"total", "sender"} {
		t.Run(order, func(t *testing.T) {
			fc := prepareFaultCluster(t, order)
			defer fc.dumpIfFailed()
			fc.nodes[0].start()
			waitHealth(t, "cluster: starting, 0 of ", faultSettle, fc.nodes[0])
			fc.attach(0)
			fc.waitSent(faultHold)
			if h := fc.nodes[0].health(); !strings.Contains(h, "cluster: starting") && !strings.Contains(h, "cluster: relaxed") {
				t.Fatalf("node 0 alone: /health %q", h)
			}
			for i := 1; i < 3; i++ {
				fc.nodes[i].start()
				fc.attach(i)
			}
			fc.settle(false)
			fc.waitSent(faultHold)
			fc.finish()
		})
	}
}

// A partial link, order "total": the route between node 0 (leading the
// stream, cluster.lead) and node 2 is cut while both reach node 1. A frame
// reaches a node only over a direct route from the server that has it, so
// node 2 could neither publish to the stream nor get it: node 1, which
// hears everyone, takes the leadership (node 2's heartbeat says it does
// not hear node 0), and node 0 does not take it back until the route
// heals. The checker as in TestClusterFaults: nothing lost, each sender's
// order, one order but for the frames delivered outside it.
//
// Node 2 dials both others (node 0 through the proxy that is cut) and
// advertises a closed port, so that neither dials it back and the cut is
// exactly that one route.
func TestClusterPartialLink(t *testing.T) {
	fc := prepareFaultCluster(t, "total")
	defer fc.dumpIfFailed()
	nodes := fc.nodes
	route := func(i int) string { return "127.0.0.1:" + strconv.Itoa(nodes[i].route) }
	cut := newProxy(t, route(0))
	dead := testport.Free(t, testport.E2E, 1)[0] // nothing listens there
	nodes[2].sb.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://" + cut.addr + ",nats://" + route(1)
	nodes[2].sb.env["OVOS_BUS_CLUSTER_ADVERTISE"] = "127.0.0.1:" + strconv.Itoa(dead)
	delete(nodes[2].sb.env, "OVOS_BUS_CLUSTER_LEAD")
	nodes[0].sb.env["OVOS_BUS_CLUSTER_LEAD"] = "true"
	startAll(nodes)
	waitHealth(t, "cluster: up, 2 of 2 peers", faultSettle, nodes...)
	waitHealth(t, "stream leader", faultSettle, nodes[0])
	waitHealth(t, "cluster: up, 2 of 2 peers", faultSettle, nodes...)
	for i := range nodes {
		fc.attach(i)
	}
	fc.waitSent(faultHold)
	rec := &faultRecord{Order: "total", Fault: "route between the leader and node 2 cut and healed", Target: -1, start: time.Now()}
	cut.stop()
	waitHealth(t, "stream leader", faultSettle, nodes[1])
	waitHealth(t, "cluster: up, 1 of 2 peers", faultSettle, nodes[0], nodes[2])
	fc.waitSent(faultHold)
	cut.start()
	rec.end = time.Now()
	waitHealth(t, "stream leader", faultSettle, nodes[0])
	waitHealth(t, "cluster: up, 2 of 2 peers", faultSettle, nodes...)
	rec.settled = time.Now()
	rec.RecoverS = rec.settled.Sub(rec.end).Seconds()
	fc.faults = append(fc.faults, rec)
	fc.finish()
}

// faultCluster is the cluster under test and everything its clients did.
type faultCluster struct {
	t       *testing.T
	order   string
	nodes   []*clusterNode
	metrics []string // each node's metrics address
	cut     []*tcpProxy
	gen     []int // restarts per node

	mu        sync.Mutex
	senders   []*fSender
	receivers []*fReceiver
	faults    []*faultRecord
}

type faultRecord struct {
	Order    string  `json:"order"`
	Fault    string  `json:"fault"`
	Target   int     `json:"target"`
	SilenceS float64 `json:"longest_silence_s"` // the longest cross-node silence
	Lost     int     `json:"lost"`              // frames lost
	Relaxed  float64 `json:"relaxed_frames"`    // frames delivered outside the stream's order, over the nodes alive at the end
	RecoverS float64 `json:"recovery_s"`        // from the fault's end until every node was up again

	start, end, settled time.Time
}

// newFaultCluster starts three nodes routed to each other; node 2's
// connections all go through proxies (as TestClusterCutLink's), so that its
// routes can be cut. With order "total" node 2 asks for the stream's
// leadership (cluster.lead): the leader faults hit it.
func newFaultCluster(t *testing.T, order string) *faultCluster {
	fc := prepareFaultCluster(t, order)
	startAll(fc.nodes)
	return fc
}

// prepareFaultCluster is newFaultCluster without starting the nodes.
func prepareFaultCluster(t *testing.T, order string) *faultCluster {
	nodes := newClusterNodes(t, 3, order)
	route := func(i int) string { return "127.0.0.1:" + strconv.Itoa(nodes[i].route) }
	fc := &faultCluster{t: t, order: order, nodes: nodes, gen: make([]int, 3),
		cut: []*tcpProxy{newProxy(t, route(2)), newProxy(t, route(0)), newProxy(t, route(1))}}
	ports := testport.Free(t, testport.E2E, 6) // kept across restarts
	for i, nd := range nodes {
		nd.sb.port = ports[i]
		nd.sb.env["OVOS_BUS_PORT"] = strconv.Itoa(ports[i])
		fc.metrics = append(fc.metrics, "127.0.0.1:"+strconv.Itoa(ports[3+i]))
		nd.sb.env["OVOS_BUS_METRICS_ADDRESS"] = fc.metrics[i]
		nd.sb.env["OVOS_BUS_CLUSTER_REPLICAS"] = "3"
	}
	nodes[0].sb.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://" + route(1)
	nodes[1].sb.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://" + route(0)
	nodes[2].sb.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://" + fc.cut[1].addr + ",nats://" + fc.cut[2].addr
	nodes[2].sb.env["OVOS_BUS_CLUSTER_ADVERTISE"] = fc.cut[0].addr
	if order == "total" {
		nodes[2].sb.env["OVOS_BUS_CLUSTER_LEAD"] = "true"
	}
	if os.Getenv("OVBUS_FAULT_DEBUG") != "" {
		for _, nd := range nodes {
			nd.sb.env["OVOS_BUS_LOG_LEVEL"] = "DEBUG"
		}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			if nd.b == nil {
				continue
			}
			nd.b.cmd.Process.Signal(syscall.SIGCONT) // a failed test may leave one stopped
		}
	})
	return fc
}

// dumpIfFailed has every node print its goroutines (SIGQUIT) when the test
// failed and OVBUS_FAULT_DEBUG is set.
func (fc *faultCluster) dumpIfFailed() {
	if os.Getenv("OVBUS_FAULT_DEBUG") == "" {
		return
	}
	for _, nd := range fc.nodes {
		if nd.b == nil {
			continue
		}
		if !fc.t.Failed() {
			fc.t.Logf("%s:\n%s", nd.name, nd.b.output())
			continue
		}
		nd.b.cmd.Process.Signal(syscall.SIGCONT)
		nd.b.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-nd.b.done:
		case <-time.After(10 * time.Second):
		}
	}
}

// settle waits until every node is up with both peers (order total: not
// relaxed) and, with whole (order total), node 2 leads the stream again and
// every copy of the stream is current.
//
// After the cut node 2 does not lead again soon, nor is its copy current:
// nats-server's copy of the stream on a node that led it while cut off takes
// the new leader's next snapshot to catch up (about a minute and a half under this traffic, its
// raft says "Expected first catchup entry to be a snapshot"), and a copy
// that is behind cannot lead. Frames are not held up by it (the node gets
// the stream from the leader), so the cut is the last fault and the check
// after it does not wait for that.
func (fc *faultCluster) settle(whole bool) {
	fc.t.Helper()
	waitHealth(fc.t, "cluster: up, 2 of 2 peers", faultSettle, fc.nodes...)
	if fc.order == "total" && whole {
		waitHealth(fc.t, "stream leader", faultSettle, fc.nodes[2])
		// Every copy of the stream current again, so that the next fault is
		// the only one: a copy that is still catching up (its node just
		// restarted) cannot stand in for the leader.
		waitHealth(fc.t, "3 of 3 copies", faultSettle, fc.nodes...)
		waitHealth(fc.t, "cluster: up, 2 of 2 peers", faultSettle, fc.nodes...)
	}
}

// inject runs one fault against node target and records what it did.
func (fc *faultCluster) inject(name, kind string, target int) {
	t := fc.t
	t.Helper()
	fc.settle(true)
	rec := &faultRecord{Order: fc.order, Fault: name, Target: target, start: time.Now()}
	nd := fc.nodes[target]
	var others []*clusterNode
	for i, o := range fc.nodes {
		if i != target {
			others = append(others, o)
		}
	}
	switch kind {
	case "kill":
		fc.died(target)
		nd.b.kill()
		fc.waitSent(faultHold)
		if fc.order == "total" {
			// The others carry on in one order again: a leader elected.
			waitHealth(t, "cluster: up, 1 of 2 peers", faultSettle, others...)
		}
		rec.end = time.Now()
		fc.gen[target]++
		nd.start()
		fc.attach(target)
	case "stop":
		if err := nd.b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(faultStop) // the fault is a freeze of this length
		if err := nd.b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		rec.end = time.Now()
	case "cut":
		for _, p := range fc.cut {
			p.stop()
		}
		waitLink(t, false, faultSettle, nd)
		if fc.order == "total" {
			waitHealth(t, "cluster: up, 1 of 2 peers", faultSettle, others...)
		}
		fc.waitSent(faultHold)
		for _, p := range fc.cut {
			p.start()
		}
		rec.end = time.Now()
	}
	fc.settle(kind != "cut")
	rec.settled = time.Now()
	rec.RecoverS = rec.settled.Sub(rec.end).Seconds()
	fc.mu.Lock()
	fc.faults = append(fc.faults, rec)
	fc.mu.Unlock()
	t.Logf("%s: %s, settled %.1fs after", fc.order, name, rec.RecoverS)
}

// fSender sends clusterMsg(name, i) at faultRate until stopped or its
// connection ends, recording when each frame went out.
type fSender struct {
	name string
	node int
	c    *ws.Conn
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	sent []time.Time
	died time.Time // when its node was killed
}

// fReceiver records every frame it gets, with the time.
type fReceiver struct {
	name      string
	node      int
	connected time.Time
	c         *ws.Conn

	mu   sync.Mutex
	got  []rFrame
	died time.Time
}

type rFrame struct {
	from string
	i    int
	at   time.Time
}

// attach connects a new sender and two receivers to node i (after a
// restart: the clients of its new process).
func (fc *faultCluster) attach(i int) {
	t := fc.t
	t.Helper()
	url := fc.nodes[i].b.url()
	tag := "n" + strconv.Itoa(i) + "g" + strconv.Itoa(fc.gen[i])
	for _, r := range []string{"a", "b"} {
		g := dialGo(t, url, nil)
		expectGreeting(t, g)
		rc := &fReceiver{name: "r" + r + "-" + tag, node: i, connected: time.Now(), c: g.c}
		go rc.read()
		fc.mu.Lock()
		fc.receivers = append(fc.receivers, rc)
		fc.mu.Unlock()
	}
	g := dialGo(t, url, nil)
	expectGreeting(t, g)
	s := &fSender{name: "s-" + tag, node: i, c: g.c, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	go func() { // the sender's own frames come back to it: read and drop them
		for {
			if _, _, err := g.c.ReadMessage(context.Background()); err != nil {
				return
			}
		}
	}()
	fc.mu.Lock()
	fc.senders = append(fc.senders, s)
	fc.mu.Unlock()
}

func (s *fSender) run() {
	defer close(s.done)
	tick := time.NewTicker(time.Second / faultRate)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.c.WriteMessage(ctx, ws.OpText, []byte(clusterMsg(s.name, i)))
		cancel()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.sent = append(s.sent, time.Now())
		s.mu.Unlock()
	}
}

func (s *fSender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sent)
}

func (r *fReceiver) read() {
	for {
		_, data, err := r.c.ReadMessage(context.Background())
		if err != nil {
			return
		}
		from, i, ok := senderOf(frame{op: ws.OpText, data: data})
		if !ok {
			continue
		}
		r.mu.Lock()
		r.got = append(r.got, rFrame{from, i, time.Now()})
		r.mu.Unlock()
	}
}

func (r *fReceiver) frames() []rFrame {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rFrame(nil), r.got...)
}

// died marks node i's clients as gone with it, now.
func (fc *faultCluster) died(i int) {
	now := time.Now()
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, s := range fc.senders {
		if s.node == i && s.died.IsZero() {
			s.mu.Lock()
			s.died = now
			s.mu.Unlock()
		}
	}
	for _, r := range fc.receivers {
		if r.node == i && r.died.IsZero() {
			r.mu.Lock()
			r.died = now
			r.mu.Unlock()
		}
	}
}

// waitSent waits until every live sender has sent k more frames.
func (fc *faultCluster) waitSent(k int) {
	fc.t.Helper()
	fc.mu.Lock()
	want := map[*fSender]int{}
	for _, s := range fc.senders {
		if s.died.IsZero() {
			want[s] = s.count() + k
		}
	}
	fc.mu.Unlock()
	deadline := time.Now().Add(faultSettle)
	for s, n := range want {
		for s.count() < n {
			if time.Now().After(deadline) {
				fc.t.Fatalf("%s sent %d frames, want %d", s.name, s.count(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// finish stops the senders, waits until every receiver has what it should
// and checks it all.
func (fc *faultCluster) finish() {
	t := fc.t
	t.Helper()
	for _, s := range fc.senders {
		close(s.stop)
		<-s.done
	}
	deadline := time.Now().Add(faultSettle)
	for !fc.complete() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	relaxed := make([]float64, len(fc.nodes))
	for i := range fc.nodes {
		relaxed[i] = fc.metric(i, "ovbus_cluster_relaxed_frames_total")
	}
	fc.check(relaxed)
	fc.report(relaxed)
}

// live reports whether r's node still runs the process r connected to.
func (r *fReceiver) live() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.died.IsZero()
}

// expect returns, for a live receiver, the frames of s it must have: from
// (the first frame s sent after r connected; 0 for a receiver there from
// the start) to the last frame s sent, or, for a sender that died, its
// last frame sent faultInflight before its node died.
func expect(r *fReceiver, s *fSender) (from, to int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from = len(s.sent)
	for i, at := range s.sent {
		if at.After(r.connected) {
			from = i
			break
		}
	}
	to = len(s.sent) - 1
	if !s.died.IsZero() {
		for to >= 0 && s.sent[to].After(s.died.Add(-faultInflight)) {
			to--
		}
	}
	return from, to
}

func (fc *faultCluster) complete() bool {
	for _, r := range fc.receivers {
		if !r.live() {
			continue
		}
		last := map[string]int{}
		for _, f := range r.frames() {
			last[f.from] = f.i
		}
		for _, s := range fc.senders {
			from, to := expect(r, s)
			if from <= to {
				if got, ok := last[s.name]; !ok || got < to {
					return false
				}
			}
		}
	}
	return true
}

// metric reads a counter of node i's /metrics (0 when absent).
func (fc *faultCluster) metric(i int, name string) float64 {
	return metricValue(fc.t, fc.metrics[i], name)
}

// report logs the faults' table and writes it to OVBUS_FAULT_REPORT.
func (fc *faultCluster) report(relaxed []float64) {
	var sum float64
	for _, v := range relaxed {
		sum += v
	}
	if len(fc.faults) == 0 {
		fc.t.Logf("order %s: frames delivered outside the stream's order: %v (per node %v)", fc.order, sum, relaxed)
		return
	}
	var b strings.Builder
	for _, f := range fc.faults {
		f.SilenceS = fc.silence(f).Seconds()
		f.Lost = fc.lostIn(f)
		fmt.Fprintf(&b, "| %s | %s | %.3f s | %d | %.1f s |\n", f.Order, f.Fault, f.SilenceS, f.Lost, f.RecoverS)
	}
	fc.t.Logf("order %s: frames delivered outside the stream's order over the run: %v (per node %v)\n| order | fault | longest cross-node silence | frames lost | settled after |\n|---|---|---:|---:|---:|\n%s",
		fc.order, sum, relaxed, b.String())
	path := os.Getenv("OVBUS_FAULT_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fc.t.Fatal(err)
	}
	defer f.Close()
	for _, r := range fc.faults {
		r.Relaxed = sum
		line, _ := json.Marshal(r)
		f.Write(append(line, '\n'))
	}
}

// silence is the longest time, from the fault's start until the cluster
// settled, that a receiver on a node the fault did not hit went without a
// frame from a sender on another such node.
func (fc *faultCluster) silence(f *faultRecord) time.Duration {
	var longest time.Duration
	for _, r := range fc.receivers {
		if r.node == f.Target || !r.connected.Before(f.start) || (!r.died.IsZero() && r.died.Before(f.settled)) {
			continue
		}
		last := f.start
		for _, fr := range r.frames() {
			node := senderNode(fr.from)
			if node == r.node || node == f.Target || fr.at.Before(f.start) || fr.at.After(f.settled) {
				continue
			}
			longest = max(longest, fr.at.Sub(last))
			last = fr.at
		}
	}
	return longest
}

// lostIn counts the frames a sender killed by fault f sent and no live
// receiver got.
func (fc *faultCluster) lostIn(f *faultRecord) int {
	lost := 0
	for _, s := range fc.senders {
		if s.died.IsZero() || s.died.Before(f.start) || s.died.After(f.end) {
			continue
		}
		best := -1
		for _, r := range fc.receivers {
			if r.live() {
				for _, fr := range r.frames() {
					if fr.from == s.name {
						best = max(best, fr.i)
					}
				}
			}
		}
		lost += s.count() - 1 - best
	}
	return lost
}

// senderNode is the node of a sender named s-n<node>g<gen>.
func senderNode(name string) int {
	rest, _ := strings.CutPrefix(name, "s-n")
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, 'g')])
	return n
}
