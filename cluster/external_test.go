package cluster

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ovbus/ovbus/ws"
)

// natsServer starts a standalone nats-server on 127.0.0.1 (port 0: any).
func natsServer(t *testing.T, port int, edit func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true, JetStream: true,
		StoreDir: t.TempDir(), MaxPayload: 2 << 20}
	if port == 0 {
		o.Port = server.RANDOM_PORT
	}
	if edit != nil {
		edit(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func externalOptions(url, node string, order Order) Options {
	return Options{Name: "ext", NodeName: node, Order: order, NATSURL: url, MaxMsgSize: 1 << 20,
		Logger: slog.New(slog.DiscardHandler)}
}

// Two nodes on one external NATS (with a token), in both orders.
func TestExternalNATS(t *testing.T) {
	s := natsServer(t, 0, func(o *server.Options) { o.Authorization = "s3cret" })
	for _, order := range []Order{OrderTotal, OrderSender} {
		t.Run(string(order), func(t *testing.T) {
			var opts []Options
			for _, name := range []string{"a", "b"} {
				o := externalOptions(s.ClientURL(), name, order)
				o.Token = "s3cret"
				opts = append(opts, o)
			}
			nodes := startNodes(t, opts)
			waitUp(t, nodes, 10*time.Second)
			a, b := dialNode(t, nodes[0]), dialNode(t, nodes[1])
			a.send(ws.OpText, msg("a", 0))
			b.send(ws.OpBinary, "\x01\x02")
			for _, c := range []*wsClient{a, b} {
				got := c.waitN(2, 5*time.Second)
				if order == OrderTotal && (got[0] != a.waitN(2, 0)[0] || got[1] != a.waitN(2, 0)[1]) {
					t.Errorf("clients saw different orders")
				}
			}
		})
	}
	bad := externalOptions(s.ClientURL(), "c", OrderSender)
	bad.Token = "wrong"
	n, err := New(bad)
	if err != nil {
		t.Fatalf("New with a wrong token: %v (should start with its link down)", err)
	}
	defer n.close()
}

func TestExternalWithoutJetStream(t *testing.T) {
	s := natsServer(t, 0, func(o *server.Options) { o.JetStream = false })
	_, err := New(externalOptions(s.ClientURL(), "a", OrderTotal))
	if err == nil || !strings.Contains(err.Error(), "enable JetStream") || !strings.Contains(err.Error(), `"sender"`) {
		t.Fatalf("New = %v, want an error saying to enable JetStream or choose sender", err)
	}
	n, err := New(externalOptions(s.ClientURL(), "a", OrderSender))
	if err != nil {
		t.Fatalf("order sender without JetStream: %v", err)
	}
	n.close()
}

func TestExternalMaxPayloadTooSmall(t *testing.T) {
	s := natsServer(t, 0, func(o *server.Options) { o.MaxPayload = 512 << 10 })
	_, err := New(externalOptions(s.ClientURL(), "a", OrderSender))
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(512<<10)) || !strings.Contains(err.Error(), strconv.Itoa(1<<20)) {
		t.Fatalf("New = %v, want an error naming max_payload %d and max_msg_size %d", err, 512<<10, 1<<20)
	}
}

// NATS unreachable at start: the node serves its own clients, and joins
// once the server is there.
func TestExternalLateServer(t *testing.T) {
	port := freePorts(t, 1)[0]
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	nodes := startNodes(t, []Options{externalOptions(url, "a", OrderTotal), externalOptions(url, "b", OrderTotal)})
	a := dialNode(t, nodes[0])
	a.send(ws.OpText, msg("a", 0))
	a.waitN(1, 5*time.Second)
	if nodes[0].node.Up() {
		t.Fatal("up without a server")
	}
	natsServer(t, port, nil)
	waitUp(t, nodes, 15*time.Second)
	b := dialNode(t, nodes[1])
	a.send(ws.OpText, msg("a", 1))
	got := b.waitN(1, 5*time.Second)
	if got[0].data == msg("a", 0) {
		// Sent before the server was there, and offered to the cluster
		// once it was: it may reach b's node after b connected.
		got = b.waitN(2, 5*time.Second)[1:]
	}
	if got[0].data != msg("a", 1) {
		t.Errorf("b got %q", got[0].data)
	}
}

// A stream that answers late for a moment (its leader busy storing a large
// frame on a loaded machine) is not a lost link: the node stays up (frames
// that wait longer than stallAfter cross directly meanwhile:
// TestRelaxWhileTheStreamDoesNotAnswer). One that stays silent takes the
// link down, and the link comes back with the answers.
func TestLateAnswerKeepsTheLinkUp(t *testing.T) {
	s := natsServer(t, 0, nil)
	p := newStallProxy(t, s.Addr().String())
	nodes := startNodes(t, []Options{externalOptions("nats://"+p.addr(), "a", OrderTotal)})
	waitUp(t, nodes, 10*time.Second)
	n := nodes[0].node

	// Long enough for a probe to go unanswered whenever it starts, shorter
	// than probeMisses of them in a row.
	p.stall()
	for end := time.Now().Add(probeAnswer + 2*probeInterval); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if !n.Up() {
			d, _ := n.health()
			t.Fatalf("link down after one late answer: %s", d)
		}
	}
	p.resume()
	a := dialNode(t, nodes[0])
	a.send(ws.OpText, msg("a", 0))
	if got := a.waitN(1, 10*time.Second); got[0].data != msg("a", 0) {
		t.Errorf("got %q", got[0].data)
	}
	if c := testutil.CollectAndCount(n.m.dropped); c != 0 {
		t.Errorf("%d drop series, want none", c)
	}

	p.stall()
	for deadline := time.Now().Add(30 * time.Second); n.Up(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("link still up with no answer for 30 s")
		}
	}
	if d, _ := n.health(); !strings.Contains(d, "no answer") {
		t.Errorf("health = %q, want it to say there was no answer", d)
	}
	p.resume()
	waitUp(t, nodes, 20*time.Second)
}

// stallProxy forwards TCP connections to a server and, while stalled, holds
// what either side sends (the connection stays open, nothing is lost).
type stallProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	gate chan struct{} // closed while forwarding
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, gate: make(chan struct{})}
	close(p.gate)
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		p.resume()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already stalled
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}
