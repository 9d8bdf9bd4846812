package bench

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// startBus starts the real ovbus bus on 127.0.0.1:0 and returns its URL.
func startBus(t testing.TB) string {
	t.Helper()
	s, err := bus.New(bus.Options{
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return "ws://" + s.Addr().String() + bus.DefaultRoute
}

// relay is a minimal fan-out server on ws.Accept: every message goes to
// every client, the sender included, in one order, text as text and binary
// as binary. mutate, when set, sees every message in relay order and returns
// what to send instead (nothing, the message, or several): the tests use it
// to drop, reorder and delay; it runs under the relay's lock, so a mutate
// that sleeps stalls the whole relay.
type relay struct {
	greeting bool
	mutate   func(b []byte) [][]byte

	mu      sync.Mutex
	clients map[*relayClient]struct{}
}

type relayClient struct {
	c  *ws.Conn
	ch chan relayMsg
}

type relayMsg struct {
	op ws.Opcode
	b  []byte
}

func startRelay(t testing.TB, greeting bool, mutate func([]byte) [][]byte) string {
	t.Helper()
	r := &relay{greeting: greeting, mutate: mutate, clients: map[*relayClient]struct{}{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/core"
}

func (r *relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	c, err := ws.Accept(w, req, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	if r.greeting {
		c.WriteMessage(context.Background(), ws.TextMessage, []byte(bus.Greeting))
	}
	rc := &relayClient{c: c, ch: make(chan relayMsg, 1<<16)}
	r.mu.Lock()
	r.clients[rc] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.clients, rc)
		r.mu.Unlock()
		close(rc.ch)
	}()
	go func() {
		for m := range rc.ch {
			if c.WriteMessage(context.Background(), m.op, m.b) != nil {
				c.CloseNow()
				for range rc.ch {
				}
				return
			}
		}
	}()
	for {
		op, b, err := c.ReadMessage(context.Background())
		if err != nil {
			return
		}
		out := [][]byte{b}
		r.mu.Lock()
		if r.mutate != nil {
			out = r.mutate(b)
		}
		for cl := range r.clients {
			for _, m := range out {
				cl.ch <- relayMsg{op, m}
			}
		}
		r.mu.Unlock()
	}
}

// startEcho starts an echo server on ws.Accept (as examples/echoserver).
func startEcho(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, err := ws.Accept(w, req, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		var buf []byte
		for {
			op, b, err := c.ReadMessageInto(context.Background(), buf[:0])
			if err != nil {
				return
			}
			buf = b
			if c.WriteMessage(context.Background(), op, b) != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
}
