package client_test

import (
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

// waitGoroutines waits until at most n goroutines run.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want <= %d:\n%s", runtime.NumGoroutine(), n, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
