package cluster

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// freePorts returns n TCP ports free on 127.0.0.1 just now, below the
// kernel's ephemeral range (the embedded servers' random client ports come
// from that range and could take one before its node binds it).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(20000+rand.IntN(10000)))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// meshOptions returns the options of n embedded nodes that route to each
// other on loopback.
func meshOptions(t testing.TB, n int, order Order) []Options {
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
		out = append(out, o.withDefaults())
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
	o := Options{Name: "test", NodeName: "n", Listen: l.Addr().String(), MaxMsgSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)}.withDefaults()
	start := time.Now()
	if _, err := startEmbedded(&o); err == nil {
		t.Fatal("started on a port in use")
	} else {
		t.Logf("%v (after %v)", err, time.Since(start))
	}
}
