package client_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/message"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testBus is a real ovbus server on a loopback port.
type testBus struct {
	t    *testing.T
	srv  *bus.Server
	addr string // host:port
}

// startBus starts a bus on addr ("127.0.0.1:0" for any free port) and stops it at the end of the
// test.
func startBus(t *testing.T, addr string) *testBus {
	t.Helper()
	srv, err := bus.New(bus.Options{Addr: addr, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	// The port of a bus that was just stopped may take a moment to be free again.
	deadline := time.Now().Add(3 * time.Second)
	for {
		err = srv.Start()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	b := &testBus{t: t, srv: srv, addr: srv.Addr().String()}
	t.Cleanup(b.stop)
	return b
}

func (b *testBus) url() string { return "ws://" + b.addr + "/core" }

// stop shuts the bus down the way a restarted ovos-messagebus does: connections dropped.
func (b *testBus) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.srv.Shutdown(ctx)
}

// waitClients waits until the bus has n clients in its fan-out.
func (b *testBus) waitClients(n int) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.srv.Clients() != n {
		if time.Now().After(deadline) {
			b.t.Fatalf("bus has %d clients, want %d", b.srv.Clients(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dial connects a client to b with fast reconnects and closes it at the end of the test.
func dial(t *testing.T, b *testBus, opts *client.Options) *client.Client {
	t.Helper()
	c := newClient(t, b.url(), opts)
	if err := c.Connect(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return c
}

func newClient(t *testing.T, url string, opts *client.Options) *client.Client {
	t.Helper()
	if opts == nil {
		opts = &client.Options{}
	}
	if opts.ReconnectMin == 0 {
		opts.ReconnectMin = 20 * time.Millisecond
		opts.ReconnectMax = 200 * time.Millisecond
	}
	c, err := client.New(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// collector records the messages a handler receives.
type collector struct {
	mu   sync.Mutex
	msgs []message.Message
	ch   chan struct{} // signalled on every message
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 1)} }

func (c *collector) handle(m message.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *collector) types() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ts []string
	for _, m := range c.msgs {
		ts = append(ts, m.Type)
	}
	return ts
}

// waitFor waits until a message of type typ has been collected and returns it.
func (c *collector) waitFor(t *testing.T, typ string) message.Message {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		for _, m := range c.msgs {
			if m.Type == typ {
				c.mu.Unlock()
				return m
			}
		}
		c.mu.Unlock()
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("no %q message; got %v", typ, c.types())
		}
	}
}

// waitGoroutines waits until at most n goroutines run, besides the bus's
// idle workers (liveGoroutines).
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		live, stacks := liveGoroutines()
		if live <= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines besides the bus's idle workers, want <= %d:\n%s", live, n, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// liveGoroutines counts the goroutines of the process but those of the bus's
// worker pool that wait for a task (bus/internal/workers): the pool keeps up
// to a few of them after a burst of tasks, however many connections there
// were, so they are no connection's leak, and how many wait depends on how
// the tasks overlapped. It returns the dump it counted too.
func liveGoroutines() (int, []byte) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	live := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if !waitingWorker(g) {
			live++
		}
	}
	return live, buf
}

// waitingWorker reports whether g, one goroutine of a stack dump, is a bus
// worker waiting for a task: its first frame outside the runtime (whose
// frames of the channel receive a dump shows only with GOTRACEBACK=system)
// is the pool's loop itself.
func waitingWorker(g []byte) bool {
	lines := bytes.Split(g, []byte("\n"))
	for _, l := range lines[1:] { // after "goroutine N [state]:"
		if len(l) == 0 || l[0] == '\t' || bytes.HasPrefix(l, []byte("runtime.")) {
			continue // a file:line, or a runtime frame
		}
		return bytes.HasPrefix(l, []byte("github.com/ovbus/ovbus/bus/internal/workers.(*pool).work("))
	}
	return false
}

func TestWaitingWorker(t *testing.T) {
	for _, c := range []struct {
		g    string
		want bool
	}{
		{"goroutine 42 [chan receive]:\ngithub.com/ovbus/ovbus/bus/internal/workers.(*pool).work(0x12343c0, {0xd53040, 0xc0000f02c0})\n\t/src/bus/internal/workers/workers.go:84 +0x7a\ncreated by github.com/ovbus/ovbus/bus/internal/workers.(*pool).start in goroutine 40", true},
		// GOTRACEBACK=system shows the runtime's frames first.
		{"goroutine 42 gp=0xc000102a80 m=nil [chan receive]:\nruntime.gopark(0x1?, 0x0?, 0x0?, 0x0?, 0x0?)\n\t/go/src/runtime/proc.go:460 +0xce\nruntime.chanrecv1(0x0?, 0x0?)\n\t/go/src/runtime/chan.go:506 +0x12\ngithub.com/ovbus/ovbus/bus/internal/workers.(*pool).work(0x12343c0, {0xd53040, 0xc0000f02c0})\n\t/src/bus/internal/workers/workers.go:84 +0x7a", true},
		// A worker running the poller is not waiting.
		{"goroutine 41 [IO wait]:\ninternal/poll.runtime_pollWait(0x7fe374957800, 0x72)\n\t/go/src/runtime/netpoll.go:351 +0x85\ngithub.com/ovbus/ovbus/bus/internal/netpoll.(*poller).loop(0xc0000a4340)\n\t/src/bus/internal/netpoll/poller_linux.go:240 +0x6e\ngithub.com/ovbus/ovbus/bus/internal/workers.(*pool).work(0x12343c0, {0xd53040, 0xc0000f02c0})\n\t/src/bus/internal/workers/workers.go:74 +0x8d", false},
		{"goroutine 1 [chan receive]:\ntesting.(*T).Run(0xc0000fc908, {0xd226ae, 0x15}, 0xd49a58)", false},
	} {
		if got := waitingWorker([]byte(c.g)); got != c.want {
			t.Errorf("waitingWorker(%.40q…) = %v, want %v", c.g, got, c.want)
		}
	}
}
