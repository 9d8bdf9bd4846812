package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovbus/ovbus/cluster/clusterconf"
	"github.com/ovbus/ovbus/internal/testport"
)

// freePorts returns n ports for embedded nodes, from cluster's own range
// (internal/testport says why).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	return testport.Free(t, testport.Cluster, n)
}

// meshOptions returns the options of n embedded nodes that route to each
// other on loopback.
func meshOptions(t testing.TB, n int, order Order) []Options {
	skipTotalInside(t, order)
	ports := freePorts(t, n)
	var out []Options
	for i := range n {
		o := Options{Name: "test", NodeName: "n" + strconv.Itoa(i), Order: order, MaxMsgSize: 1 << 20,
			Listen: "127.0.0.1:" + strconv.Itoa(ports[i]), StoreDir: t.TempDir(),
			Logger: slog.New(slog.DiscardHandler)}
		for j := range n {
			if j != i {
				o.Routes = append(o.Routes, "nats://127.0.0.1:"+strconv.Itoa(ports[j]))
			}
		}
		out = append(out, o.WithDefaults())
	}
	return out
}

func TestEmbeddedClusterHasJetStream(t *testing.T) {
	var es []*embedded
	for _, o := range meshOptions(t, 3, OrderTotal) {
		e, err := startEmbedded(&o)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
		t.Cleanup(e.shutdown)
	}
	nc, err := nats.Connect("", nats.InProcessServer(es[0].srv), nats.Token(es[0].token))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	start := time.Now()
	var s jetstream.Stream
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t"}, Storage: jetstream.MemoryStorage, Replicas: 3})
		cancel()
		if err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no R3 stream after %v: %v", time.Since(start), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("R3 stream after %v; leader %s", time.Since(start), s.CachedInfo().Cluster.Leader)
	if _, err := js.Publish(context.Background(), "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
}

func TestEmbeddedListenError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	o := Options{Name: "test", NodeName: "n", Listen: l.Addr().String(), MaxMsgSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)}.WithDefaults()
	start := time.Now()
	if _, err := startEmbedded(&o); err == nil {
		t.Fatal("started on a port in use")
	} else {
		t.Logf("%v (after %v)", err, time.Since(start))
	}
}

// signalHandler is a slog handler that closes seen at the first record
// whose message contains match.
type signalHandler struct {
	match string
	once  *sync.Once
	seen  chan struct{}
}

func newSignalHandler(match string) *signalHandler {
	return &signalHandler{match: match, once: new(sync.Once), seen: make(chan struct{})}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

// TestEmbeddedRouteToken: with cluster.route_token, two nodes with the same
// token form a cluster and a node with another token joins neither, in
// either direction.
func TestEmbeddedRouteToken(t *testing.T) {
	opts := meshOptions(t, 3, OrderSender)
	var logs []*signalHandler
	for i := range opts {
		opts[i].RouteToken = "right-token"
		if i == 2 {
			opts[i].RouteToken = "wrong-token"
		}
		h := newSignalHandler("authentication error")
		logs = append(logs, h)
		opts[i].Logger = slog.New(h)
	}
	var es []*embedded
	for i := range opts {
		e, err := startEmbedded(&opts[i])
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
		t.Cleanup(e.shutdown)
	}
	accepted := func(e *embedded) []string {
		rz, err := e.srv.Routez(&server.RoutezOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rz.Routes {
			if !r.DidSolicit {
				ids = append(ids, r.RemoteID)
			}
		}
		return ids
	}
	// The two with the right token route to each other...
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Contains(accepted(es[0]), es[1].srv.ID()) && !slices.Contains(accepted(es[1]), es[0].srv.ID()) {
		if time.Now().After(deadline) {
			t.Fatal("the nodes with the same token did not route to each other")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ... and each side refused the other: the odd node's routes to the
	// first node, the first node's route to it.
	for _, i := range []int{0, 2} {
		select {
		case <-logs[i].seen:
		case <-time.After(20 * time.Second):
			t.Fatalf("node %d never refused a route with the wrong token", i)
		}
	}
	// A node that dials a peer registers the route when the peer's INFO
	// arrives, before the peer has checked its CONNECT and refused it: so
	// a refused route may show for a moment on the side that dialed. What
	// the token guards is what a node accepts: no node accepts a route from
	// a node with another token, and the two with the same token do.
	if ids := accepted(es[2]); len(ids) != 0 {
		t.Errorf("the node with the wrong token accepted routes from %v", ids)
	}
	for i := range 2 {
		if slices.Contains(accepted(es[i]), es[2].srv.ID()) {
			t.Errorf("node %d accepted a route from the node with the wrong token", i)
		}
	}
}

func TestRouteTokenOnlyEmbedded(t *testing.T) {
	o := Options{NATSURL: "nats://127.0.0.1:4222", RouteToken: "x"}
	err := o.Validate()
	var ke *KeyError
	if !errors.As(err, &ke) || !slices.Contains(ke.Keys, "cluster.route_token") {
		t.Fatalf("route_token with nats_url: %v", err)
	}
}

// recordHandler keeps the records it is given.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// A link error that repeats (a peer refusing this node's route token, about
// once a second) is logged once per serverLogWindow, then summed up; the
// connection nats-server puts before it is an attribute, not part of the
// kind.
func TestServerLogRateLimited(t *testing.T) {
	h := &recordHandler{}
	l := newServerLog(slog.New(h))
	for i := range 5 {
		l.Errorf("127.0.0.1:%d - rid:%d - authentication error", 40000+i, i)
	}
	l.Warnf("something else")
	l.flush()
	var msgs []string
	for _, r := range h.recs {
		msgs = append(msgs, r.Message)
	}
	want := []string{"authentication error", "something else", "suppressed 4 similar warnings"}
	if !slices.Equal(msgs, want) {
		t.Fatalf("logged %q, want %q", msgs, want)
	}
	conn := ""
	h.recs[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "conn" {
			conn = a.Value.String()
		}
		return true
	})
	if conn != "127.0.0.1:40000 - rid:0" {
		t.Errorf("conn = %q", conn)
	}
	for _, c := range []struct{ in, conn, rest string }{
		{"127.0.0.1:6222 - rid:5 - authentication error", "127.0.0.1:6222 - rid:5", "authentication error"},
		{"[::1]:4222 - cid:12 - Slow Consumer Detected", "[::1]:4222 - cid:12", "Slow Consumer Detected"},
		{"JetStream cluster no metadata leader", "", "JetStream cluster no metadata leader"},
		{"a - b - c", "", "a - b - c"},
	} {
		if conn, rest := splitConn(c.in); conn != c.conn || rest != c.rest {
			t.Errorf("splitConn(%q) = %q, %q", c.in, conn, rest)
		}
	}
}

// skipTotalInside skips a test of order "total" with NATS inside ovbus
// where this build refuses it (clusterconf.TotalInside: 32-bit systems).
func skipTotalInside(t testing.TB, order Order) {
	if order != OrderSender && !clusterconf.TotalInside() {
		t.Skip(`order "total" with NATS inside ovbus is refused on 32-bit systems`)
	}
}
