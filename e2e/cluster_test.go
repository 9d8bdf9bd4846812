package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	busclient "github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/internal/testport"
	"github.com/ovbus/ovbus/internal/testwait"
	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// Several `ovbus serve` processes as one bus over the NATS each embeds
// (websocket.cluster.listen/routes), or over an external nats-server.

// clusterNode is one node of a test cluster: its sandbox (kept across a
// restart: the same ports and store directory) and its process.
type clusterNode struct {
	name  string
	sb    *sandbox
	route int // the cluster.listen port
	b     *busProc
}

// newClusterNodes prepares n nodes that route to each other on loopback,
// without starting them. Each gets its bus port, route port and store
// directory; edit a node's sb.env before start to change its settings.
func newClusterNodes(t *testing.T, n int, order string) []*clusterNode {
	t.Helper()
	var nodes []*clusterNode
	for i := range n {
		sb := newSandbox(t)
		sb.usePort()
		nd := &clusterNode{name: "n" + strconv.Itoa(i), sb: sb, route: routePort(t)}
		sb.env["OVOS_BUS_CLUSTER_NAME"] = "e2e"
		sb.env["OVOS_BUS_CLUSTER_NODE_NAME"] = nd.name
		sb.env["OVOS_BUS_CLUSTER_ORDER"] = order
		sb.env["OVOS_BUS_CLUSTER_LISTEN"] = "127.0.0.1:" + strconv.Itoa(nd.route)
		sb.env["OVOS_BUS_CLUSTER_STORE_DIR"] = sb.root + "/cluster"
		nodes = append(nodes, nd)
	}
	for _, nd := range nodes {
		var routes []string
		for _, other := range nodes {
			if other != nd {
				routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(other.route))
			}
		}
		nd.sb.env["OVOS_BUS_CLUSTER_ROUTES"] = strings.Join(routes, ",")
	}
	return nodes
}

// routePort returns a port for a node's routes, from e2e's own range
// (internal/testport says why).
func routePort(t *testing.T) int {
	t.Helper()
	return testport.Free(t, testport.E2E, 1)[0]
}

func (nd *clusterNode) start() { nd.b = nd.sb.start() }

func startAll(nodes []*clusterNode) {
	for _, nd := range nodes {
		nd.start()
	}
}

// health returns the node's GET /health body.
func (nd *clusterNode) health() string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + nd.b.addr() + "/health")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Sprintf("HTTP %d: %s", resp.StatusCode, b)
	}
	return string(b)
}

// waitLink waits until every node's /health says its cluster link is up
// (or down, with up false).
func waitLink(t *testing.T, up bool, timeout time.Duration, nodes ...*clusterNode) {
	t.Helper()
	want := "cluster: down"
	if up {
		want = "cluster: up"
	}
	waitHealth(t, want, timeout, nodes...)
}

// waitHealth waits until every node's /health contains want.
func waitHealth(t *testing.T, want string, timeout time.Duration, nodes ...*clusterNode) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, nd := range nodes {
		for h := nd.health(); !strings.Contains(h, want); h = nd.health() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: /health = %q after %v, want %q", nd.name, h, timeout, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// waitMesh waits until every node's /health says it is up and hears peers
// other nodes: the link is up (waitLink) as soon as the node reaches the
// stream, which after a heal may be before it hears every node again.
func waitMesh(t *testing.T, peers int, timeout time.Duration, nodes ...*clusterNode) {
	t.Helper()
	waitHealth(t, "cluster: up, "+strconv.Itoa(peers)+" of ", timeout, nodes...)
}

// collector reads every frame of one connection after the greeting.
type collector struct {
	t    *testing.T
	name string
	g    *goClient
	mu   sync.Mutex
	got  []frame
	ch   chan struct{}
}

func collect(t *testing.T, nd *clusterNode, name string) *collector {
	t.Helper()
	g := dialGo(t, nd.b.url(), nil)
	expectGreeting(t, g)
	c := &collector{t: t, name: name + "@" + nd.name, g: g, ch: make(chan struct{}, 1)}
	go func() {
		for {
			op, data, err := g.c.ReadMessage(context.Background())
			if err != nil {
				return
			}
			c.mu.Lock()
			c.got = append(c.got, frame{op: op, data: data})
			c.mu.Unlock()
			select {
			case c.ch <- struct{}{}:
			default:
			}
		}
	}()
	return c
}

func (c *collector) frames() []frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// waitFor waits until match holds for what the client received.
func (c *collector) waitFor(timeout time.Duration, what string, match func([]frame) bool) []frame {
	c.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		got := c.frames()
		if match(got) {
			return got
		}
		select {
		case <-c.ch:
		case <-deadline.C:
			c.t.Fatalf("%s: %s not received within %v; got %d frames, last %v", c.name, what, timeout, len(got), lastFrames(got, 3))
		}
	}
}

func (c *collector) waitN(n int, timeout time.Duration) []frame {
	c.t.Helper()
	return c.waitFor(timeout, fmt.Sprintf("%d frames", n), func(f []frame) bool { return len(f) >= n })
}

// waitText waits for a text frame holding s.
func (c *collector) waitText(s string, timeout time.Duration) {
	c.t.Helper()
	c.waitFor(timeout, strconv.Quote(s), func(fs []frame) bool {
		return slices.ContainsFunc(fs, func(f frame) bool { return string(f.data) == s })
	})
}

func lastFrames(fs []frame, n int) []string {
	var out []string
	for _, f := range fs[max(0, len(fs)-n):] {
		out = append(out, f.String())
	}
	return out
}

func has(fs []frame, s string) bool {
	return slices.ContainsFunc(fs, func(f frame) bool { return string(f.data) == s })
}

func clusterMsg(sender string, i int) string {
	return fmt.Sprintf(`{"type":"e2e.cluster","data":{"from":"%s","i":%d},"context":{}}`, sender, i)
}

// senderOf parses clusterMsg.
func senderOf(f frame) (string, int, bool) {
	var from string
	var i int
	s := strings.TrimPrefix(string(f.data), `{"type":"e2e.cluster","data":{"from":"`)
	j := strings.IndexByte(s, '"')
	if j < 0 {
		return "", 0, false
	}
	from = s[:j]
	if _, err := fmt.Sscanf(s[j:], `","i":%d`, &i); err != nil {
		return "", 0, false
	}
	return from, i, true
}

// checkSenderOrder fails unless fs holds, per sender, 0..n-1 in order.
func checkSenderOrder(t *testing.T, who string, fs []frame, senders []string, n int) {
	t.Helper()
	next := map[string]int{}
	for _, f := range fs {
		if from, i, ok := senderOf(f); ok {
			if i != next[from] {
				t.Fatalf("%s: from %s got message %d, want %d: the sender's order is broken", who, from, i, next[from])
			}
			next[from]++
		}
	}
	for _, s := range senders {
		if next[s] != n {
			t.Errorf("%s: got %d messages from %s, want %d", who, next[s], s, n)
		}
	}
}

// sendAll has one client on each node send n messages at once, and one
// binary frame after them.
func sendAll(t *testing.T, nodes []*clusterNode, n int) []string {
	t.Helper()
	var senders []string
	var wg sync.WaitGroup
	for _, nd := range nodes {
		g := dialGo(t, nd.b.url(), nil)
		expectGreeting(t, g)
		name := "s" + nd.name
		senders = append(senders, name)
		wg.Go(func() {
			for i := range n {
				if err := g.c.WriteMessage(context.Background(), ws.OpText, []byte(clusterMsg(name, i))); err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
			}
			g.c.WriteMessage(context.Background(), ws.OpBinary, []byte("\x00\xff"+name))
		})
	}
	wg.Wait()
	return senders
}

// Three nodes, two clients on each, a sender on each sending at once: every
// client receives every message, binary stays binary, each sender's order
// holds, and with order "total" every client's sequence is the same.
func TestClusterOrder(t *testing.T) {
	for _, order := range []string{"total", "sender"} {
		t.Run(order, func(t *testing.T) {
			nodes := newClusterNodes(t, 3, order)
			startAll(nodes)
			waitLink(t, true, 30*time.Second, nodes...)
			var cs []*collector
			for _, nd := range nodes {
				cs = append(cs, collect(t, nd, "a"), collect(t, nd, "b"))
			}
			const n = 200
			senders := sendAll(t, nodes, n)
			var seqs [][]frame
			for _, c := range cs {
				got := c.waitFor(30*time.Second, "every message", func(fs []frame) bool {
					bins := 0
					for _, f := range fs {
						if f.op == ws.OpBinary {
							bins++
						}
					}
					return len(fs) >= len(senders)*(n+1) && bins == len(senders)
				})
				checkSenderOrder(t, c.name, got, senders, n)
				seqs = append(seqs, got)
			}
			for _, c := range cs {
				for _, f := range c.frames() {
					if f.op == ws.OpBinary && !strings.HasPrefix(string(f.data), "\x00\xffs") {
						t.Errorf("%s: binary frame %v", c.name, f)
					}
				}
			}
			if order == "total" {
				for i := 1; i < len(seqs); i++ {
					if !slices.EqualFunc(seqs[0], seqs[i], func(a, b frame) bool { return a.op == b.op && string(a.data) == string(b.data) }) {
						t.Errorf("%s saw another order than %s", cs[i].name, cs[0].name)
					}
				}
			}
		})
	}
}

// Killing a node leaves the other two working; its clients reconnect to
// another node (the Go client with several URLs); restarted, it rejoins.
func TestClusterNodeDeath(t *testing.T) {
	nodes := newClusterNodes(t, 3, "total")
	startAll(nodes)
	waitLink(t, true, 30*time.Second, nodes...)
	a, b := collect(t, nodes[0], "a"), collect(t, nodes[1], "b")

	// A Go client on node 2 that knows node 0 too.
	var mu sync.Mutex
	var seen []string
	gc, err := busclient.New(nodes[2].b.url()+","+nodes[0].b.url(), &busclient.Options{ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gc.On("e2e.cluster", func(m message.Message) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%v %v", m.Data["from"], m.Data["i"]))
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gc.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer gc.Close()

	nodes[2].b.kill()
	start := time.Now()
	waitLink(t, true, 30*time.Second, nodes[0], nodes[1])
	// The stream may need a new leader: until then the two run apart.
	sender := dialGo(t, nodes[0].b.url(), nil)
	expectGreeting(t, sender)
	for i := 0; ; i++ {
		m := clusterMsg("after-kill", i)
		sender.send(ws.OpText, []byte(m))
		ok := func() bool { return has(b.frames(), m) }
		deadline := time.Now().Add(time.Second)
		for !ok() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if ok() {
			a.waitText(m, 5*time.Second)
			t.Logf("the two nodes carry frames %v after the kill (%d tries)", time.Since(start).Round(time.Millisecond), i+1)
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("no frame from node 0 reached node 1 within 30s of the kill; /health %q", nodes[1].health())
		}
	}
	// The Go client moved to node 0 and gets what is sent there.
	deadline := time.Now().Add(10 * time.Second)
	for {
		sender.send(ws.OpText, []byte(clusterMsg("for-gc", 0)))
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		got := slices.Contains(seen, "for-gc 0")
		mu.Unlock()
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Go client did not reconnect to node 0 (url %s, state %v)", gc.URL(), gc.State())
		}
	}

	nodes[2].start()
	waitLink(t, true, 30*time.Second, nodes...)
	c := collect(t, nodes[2], "c")
	nodes2 := dialGo(t, nodes[2].b.url(), nil)
	expectGreeting(t, nodes2)
	m := clusterMsg("rejoined", 0)
	nodes2.send(ws.OpText, []byte(m))
	for _, x := range []*collector{a, b, c} {
		x.waitText(m, 15*time.Second)
	}
	m = clusterMsg("to-rejoined", 0)
	sender.send(ws.OpText, []byte(m))
	c.waitText(m, 15*time.Second)
}

// A cut link heals: every connection of node 2 to the others passes one of
// three TCP proxies (to it, advertised as its address; from it to node 0
// and to node 1), which the test stops and starts. While cut, both sides
// serve their own clients; after, nothing is lost: what each side's
// clients sent meanwhile reaches the other side, and everything crosses
// again in one order.
func TestClusterCutLink(t *testing.T) {
	nodes := newClusterNodes(t, 3, "total")
	route := func(i int) string { return "127.0.0.1:" + strconv.Itoa(nodes[i].route) }
	proxies := []*tcpProxy{newProxy(t, route(2)), newProxy(t, route(0)), newProxy(t, route(1))}
	for _, nd := range nodes {
		nd.sb.env["OVOS_BUS_CLUSTER_REPLICAS"] = "3"
	}
	nodes[0].sb.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://" + route(1)
	nodes[1].sb.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://" + route(0)
	nodes[2].sb.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://" + proxies[1].addr + ",nats://" + proxies[2].addr
	nodes[2].sb.env["OVOS_BUS_CLUSTER_ADVERTISE"] = proxies[0].addr
	startAll(nodes)
	waitLink(t, true, 30*time.Second, nodes...)
	cs := []*collector{collect(t, nodes[0], "a"), collect(t, nodes[1], "b"), collect(t, nodes[2], "c")}
	s0, s2 := dialGo(t, nodes[0].b.url(), nil), dialGo(t, nodes[2].b.url(), nil)
	expectGreeting(t, s0)
	expectGreeting(t, s2)
	m := clusterMsg("before", 0)
	s0.send(ws.OpText, []byte(m))
	for _, c := range cs {
		c.waitText(m, 10*time.Second)
	}

	for _, p := range proxies {
		p.stop()
	}
	waitLink(t, false, 20*time.Second, nodes[2])
	local := clusterMsg("cut-local", 0)
	s2.send(ws.OpText, []byte(local))
	cs[2].waitText(local, 5*time.Second) // node 2 still serves its own clients
	waitLink(t, true, 30*time.Second, nodes[0], nodes[1])
	for i := 0; ; i++ { // until the majority has a stream leader again
		m := clusterMsg("cut-majority", i)
		s0.send(ws.OpText, []byte(m))
		time.Sleep(200 * time.Millisecond)
		if has(cs[1].frames(), m) {
			cs[0].waitText(m, 5*time.Second)
			break
		}
		if i > 150 {
			t.Fatal("nodes 0 and 1 do not carry frames while node 2 is cut off")
		}
	}
	if has(cs[0].frames(), local) || has(cs[1].frames(), local) {
		t.Error("a frame sent on the cut-off node reached the others")
	}

	for _, p := range proxies {
		p.start()
	}
	waitLink(t, true, 30*time.Second, nodes...)
	waitMesh(t, 2, 30*time.Second, nodes...)
	// What node 2's client sent while cut off reaches the others (node 2
	// offers it to the stream again), and node 2 fetches what the others
	// sequenced meanwhile.
	for _, c := range cs[:2] {
		c.waitText(local, 30*time.Second)
	}
	cs[2].waitText(clusterMsg("cut-majority", 0), 30*time.Second)
	m = clusterMsg("healed", 0)
	s0.send(ws.OpText, []byte(m))
	for _, c := range cs {
		c.waitText(m, 15*time.Second)
	}
	m = clusterMsg("healed-from-2", 0)
	s2.send(ws.OpText, []byte(m))
	for _, c := range cs {
		c.waitText(m, 15*time.Second)
	}
	// From the heal on, one order again.
	tail := func(c *collector) []string {
		var out []string
		fs := c.frames()
		i := slices.IndexFunc(fs, func(f frame) bool { return string(f.data) == clusterMsg("healed", 0) })
		for _, f := range fs[i:] {
			out = append(out, string(f.data))
		}
		return out
	}
	if a, c := tail(cs[0]), tail(cs[2]); !slices.Equal(a, c) {
		t.Errorf("after the heal node 0's client saw %q, node 2's %q", a, c)
	}
}

// startNATS starts a nats-server (the Go module) on 127.0.0.1 with o, for
// the length of the test, and returns its client port.
func startNATS(t *testing.T, o *server.Options) int {
	t.Helper()
	o.Host, o.Port, o.NoSigs, o.NoLog = "127.0.0.1", freePort(t), true, true
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(ns.Shutdown)
	return o.Port
}

// Two nodes on an external nats-server (the Go module, started here) with
// user and password; SIGTERM on one drains what it accepted.
func TestClusterExternalNATS(t *testing.T) {
	port := startNATS(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), MaxPayload: 32 << 20, Username: "bus", Password: "pw"})
	var nodes []*clusterNode
	maddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	for i := range 2 {
		sb := newSandbox(t)
		sb.usePort()
		if i == 0 {
			sb.env["OVOS_BUS_METRICS_ADDRESS"] = maddr
		}
		sb.env["OVOS_BUS_CLUSTER_NATS_URL"] = "nats://127.0.0.1:" + strconv.Itoa(port)
		sb.env["OVOS_BUS_CLUSTER_USER"] = "bus"
		sb.env["OVOS_BUS_CLUSTER_PASSWORD"] = "pw"
		sb.env["OVOS_BUS_CLUSTER_NODE_NAME"] = "x" + strconv.Itoa(i)
		nodes = append(nodes, &clusterNode{name: "x" + strconv.Itoa(i), sb: sb})
	}
	startAll(nodes)
	waitLink(t, true, 20*time.Second, nodes...)
	got := collect(t, nodes[1], "b")
	s := dialGo(t, nodes[0].b.url(), nil)
	expectGreeting(t, s)
	big := make([]byte, 20<<20) // within max_msg_size (25 MiB) and the server's max_payload
	big[0] = 0xff
	s.send(ws.OpBinary, big)
	if fs := got.waitN(1, 20*time.Second); fs[0].op != ws.OpBinary || len(fs[0].data) != len(big) {
		t.Errorf("the 20 MiB binary frame arrived as %v", fs[0])
	}
	// Frames the node accepted before SIGTERM still cross.
	const n = 3000
	for i := range n {
		s.send(ws.OpText, []byte(clusterMsg("x", i)))
	}
	// The bus has read them (what it reads once SIGTERM came is not
	// relayed): its cluster link numbered every frame.
	testwait.Until(t, "node x0 to number the frames", 20*time.Second, func() bool {
		return metricValue(t, maddr, "ovbus_cluster_sent_messages_total") >= n+1
	})
	if code := nodes[0].b.stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	fs := got.waitN(n+1, 20*time.Second)
	checkSenderOrder(t, got.name, fs[1:], []string{"x"}, n)
}

// What the serve command says about a cluster it cannot run, and what
// --print-config shows of the cluster keys.
func TestClusterStartupErrors(t *testing.T) {
	sb := newSandbox(t)
	sb.usePort()
	sb.env["OVOS_BUS_CLUSTER_NATS_URL"] = "nats://127.0.0.1:4222"
	sb.env["OVOS_BUS_CLUSTER_LISTEN"] = "127.0.0.1:6222"
	res := sb.run(20*time.Second, "serve")
	if res.code != 1 || !strings.Contains(res.stderr, "websocket.cluster.nats_url") || !strings.Contains(res.stderr, "websocket.cluster.listen") {
		t.Errorf("nats_url and listen: exit %d, stderr %q; want 1 and both keys named", res.code, res.stderr)
	}

	port := startNATS(t, &server.Options{MaxPayload: 1 << 20})
	delete(sb.env, "OVOS_BUS_CLUSTER_LISTEN")
	sb.env["OVOS_BUS_CLUSTER_NATS_URL"] = "nats://127.0.0.1:" + strconv.Itoa(port)
	res = sb.run(20*time.Second, "serve")
	if res.code != 1 || !strings.Contains(res.stderr, "enable JetStream") {
		t.Errorf("no JetStream: exit %d, stderr %q", res.code, res.stderr)
	}
	res = sb.run(20*time.Second, "serve", "--cluster-order", "sender")
	if res.code != 1 || !strings.Contains(res.stderr, strconv.Itoa(1<<20)) || !strings.Contains(res.stderr, strconv.Itoa(25<<20)) {
		t.Errorf("max_payload 1 MiB under max_msg_size 25 MiB: exit %d, stderr %q; want both numbers", res.code, res.stderr)
	}

	sb.env["OVOS_BUS_CLUSTER_PASSWORD"] = "a long secret password"
	sb.env["OVOS_BUS_CLUSTER_USER"] = "bus"
	res = sb.run(20*time.Second, "serve", "--print-config", "--cluster-order", "sender")
	for _, want := range []string{"cluster.nats_url", "env OVOS_BUS_CLUSTER_NATS_URL", "cluster.order", "flag --cluster-order", `"sender"`} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, res.stdout)
		}
	}
	if strings.Contains(res.stdout, "secret password") {
		t.Errorf("--print-config shows the password:\n%s", res.stdout)
	}
}
