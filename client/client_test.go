package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

func TestEmitOn(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	c := newClient(t, b.url(), nil)
	all, greet, typed := newCollector(), newCollector(), newCollector()
	c.On("*", all.handle)
	c.On("connected", greet.handle)
	c.On("test.a", typed.handle)
	if c.State() != client.Idle {
		t.Errorf("state before Connect = %v", c.State())
	}
	if err := c.Connect(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	g := greet.waitFor(t, "connected")
	if g.SessionID() != "default" {
		t.Errorf("greeting = %v", g)
	}
	if c.State() != client.Connected {
		t.Errorf("state = %v", c.State())
	}

	other := dial(t, b, nil)
	b.waitClients(2)
	if err := other.Emit(ctxT(t), message.New("test.a", map[string]any{"n": 1})); err != nil {
		t.Fatal(err)
	}
	if m := typed.waitFor(t, "test.a"); m.Data["n"] != 1.0 {
		t.Errorf("test.a = %v", m)
	}
	if err := c.Emit(ctxT(t), message.New("test.b", nil)); err != nil { // the bus echoes it back
		t.Fatal(err)
	}
	all.waitFor(t, "test.b")
	if got := all.types(); !reflect.DeepEqual(got, []string{"connected", "test.a", "test.b"}) {
		t.Errorf("* handler got %v", got)
	}
	if got := typed.types(); !reflect.DeepEqual(got, []string{"test.a"}) {
		t.Errorf("test.a handler got %v", got)
	}
	if err := c.EmitRaw(ctxT(t), []byte(`{"type":"raw.one"}`)); err != nil {
		t.Fatal(err)
	}
	all.waitFor(t, "raw.one")
}

func TestOnceAndRemove(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	c := dial(t, b, nil)
	once, removed, all := newCollector(), newCollector(), newCollector()
	c.Once("t.x", once.handle)
	off := c.On("t.x", removed.handle)
	c.On("*", all.handle)
	ctx := ctxT(t)

	c.Emit(ctx, message.New("t.x", map[string]any{"i": 1}))
	removed.waitFor(t, "t.x")
	off()
	off() // twice is harmless
	c.Emit(ctx, message.New("t.x", map[string]any{"i": 2}))
	c.Emit(ctx, message.New("t.end", nil))
	all.waitFor(t, "t.end")
	time.Sleep(20 * time.Millisecond) // let the other handlers catch up, if they were wrong
	if n := len(once.types()); n != 1 {
		t.Errorf("Once handler ran %d times", n)
	}
	if n := len(removed.types()); n != 1 {
		t.Errorf("removed handler ran %d times", n)
	}
	if once.msgs[0].Data["i"] != 1.0 {
		t.Errorf("Once got %v", once.msgs[0])
	}
}

// A handler that panics is logged and keeps receiving; the client carries on.
func TestHandlerPanicIsRecovered(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	c := dial(t, b, nil)
	got := newCollector()
	c.On("boom", func(m message.Message) {
		if m.Data["n"] == 1.0 {
			panic("handler bug")
		}
		got.handle(m)
	})
	ctx := ctxT(t)
	c.Emit(ctx, message.New("boom", map[string]any{"n": 1}))
	c.Emit(ctx, message.New("boom", map[string]any{"n": 2}))
	got.waitFor(t, "boom")
	if c.State() != client.Connected {
		t.Fatalf("state %v after a handler panic", c.State())
	}
}

func TestWaitForResponse(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	responder := dial(t, b, nil)
	responder.On("skill.ping", func(m message.Message) {
		responder.Emit(context.Background(), m.Response(map[string]any{"pong": m.Data["n"]}))
	})
	c := dial(t, b, nil)
	b.waitClients(2)
	ctx := ctxT(t)
	q := message.Message{Type: "skill.ping", Data: map[string]any{"n": 7}, Context: map[string]any{"source": "me", "destination": "skills"}}
	r, err := c.WaitForResponse(ctx, q, "", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Type != "skill.ping.response" || r.Data["pong"] != 7.0 || r.Context["destination"] != "me" {
		t.Errorf("response = %v", r)
	}

	// Timeouts and cancellation.
	start := time.Now()
	_, err = c.WaitForResponse(ctx, message.New("nobody.home", nil), "", 100*time.Millisecond)
	if !errors.Is(err, client.ErrTimeout) || time.Since(start) > 2*time.Second {
		t.Errorf("unanswered: %v after %v", err, time.Since(start))
	}
	if want := `timed out after 100ms waiting for "nobody.home.response"`; err == nil || err.Error() != want {
		t.Errorf("error text %q, want %q", err, want)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := c.WaitFor(cctx, "never", -1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled WaitFor = %v", err)
	}

	// WaitFor sees a message emitted after the call.
	got := make(chan message.Message, 1)
	go func() {
		m, err := c.WaitFor(ctx, "later", time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	time.Sleep(50 * time.Millisecond)
	responder.Emit(ctx, message.New("later", map[string]any{"x": "y"}))
	if m := <-got; m.Data["x"] != "y" {
		t.Errorf("WaitFor = %v", m)
	}
}

// Every handler sees messages in the order the bus sent them, and a handler that blocks holds
// up neither reading nor the other handlers.
func TestHandlerOrderAndSlowHandler(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	c := dial(t, b, nil)
	const n = 200
	release := make(chan struct{})
	var slow, fast []float64
	var mu sync.Mutex
	fastDone := make(chan struct{})
	slowDone := make(chan struct{})
	c.On("seq", func(m message.Message) {
		<-release
		slow = append(slow, m.Data["i"].(float64))
		if len(slow) == n {
			close(slowDone)
		}
	})
	c.On("seq", func(m message.Message) {
		mu.Lock()
		defer mu.Unlock()
		fast = append(fast, m.Data["i"].(float64))
		if len(fast) == n {
			close(fastDone)
		}
	})
	ctx := ctxT(t)
	for i := range n {
		if err := c.Emit(ctx, message.New("seq", map[string]any{"i": i})); err != nil {
			t.Fatal(err)
		}
	}
	// WaitFor is served by the reader itself: it works while the slow handler blocks.
	// (WaitForResponse registers its waiter before it emits; the bus echoes the probe.)
	if _, err := c.WaitForResponse(ctx, message.New("probe", nil), "probe", 3*time.Second); err != nil {
		t.Fatalf("reading stalled behind a slow handler: %v", err)
	}
	select {
	case <-fastDone:
	case <-time.After(5 * time.Second):
		t.Fatal("fast handler stalled behind a slow one")
	}
	close(release)
	<-slowDone
	for i := range n {
		if fast[i] != float64(i) || slow[i] != float64(i) {
			t.Fatalf("out of order at %d: fast %v slow %v", i, fast[i], slow[i])
		}
	}
}

// The bus restarts on the same port: the client reconnects by itself, its handlers still fire,
// and what was emitted meanwhile is sent once it is back.
func TestReconnectAfterBusRestart(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	addr := b.addr
	var mu sync.Mutex
	var states []client.State
	c := dial(t, b, &client.Options{OnState: func(sc client.StateChange) {
		mu.Lock()
		states = append(states, sc.State)
		mu.Unlock()
	}})
	got := newCollector()
	c.On("after", got.handle)
	c.On("queued", got.handle)
	greets := newCollector()
	c.On("connected", greets.handle)

	b.stop()
	deadline := time.Now().Add(5 * time.Second)
	for c.State() == client.Connected {
		if time.Now().After(deadline) {
			t.Fatal("client did not notice the bus went away")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Disconnected: emits are queued.
	if err := c.Emit(ctxT(t), message.New("queued", nil)); err != nil {
		t.Fatalf("Emit while disconnected: %v", err)
	}
	if c.Queued() != 1 {
		t.Errorf("Queued = %d", c.Queued())
	}

	b2 := startBus(t, addr)
	got.waitFor(t, "queued") // flushed on reconnect and echoed back
	other := dial(t, b2, nil)
	b2.waitClients(2)
	other.Emit(ctxT(t), message.New("after", nil))
	got.waitFor(t, "after")
	greets.waitFor(t, "connected") // the new connection's greeting
	if c.Queued() != 0 {
		t.Errorf("Queued after reconnect = %d", c.Queued())
	}
	// State changes reach OnState on their own goroutine: wait for the
	// reconnect to be reported rather than racing it.
	reported := func() bool {
		mu.Lock()
		defer mu.Unlock()
		i := slices.Index(states, client.Disconnected)
		return i >= 0 && slices.Contains(states[i:], client.Connected) && states[0] == client.Connecting
	}
	for deadline := time.Now().Add(5 * time.Second); !reported(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			mu.Lock()
			seen := slices.Clone(states)
			mu.Unlock()
			t.Fatalf("states = %v", seen)
		}
	}
}

func TestDisconnectedQueueBound(t *testing.T) {
	url := "ws://" + closedAddr(t) + "/core"
	ctx := ctxT(t)

	c := newClient(t, url, &client.Options{QueueSize: 2})
	if err := c.Connect(ctx); err == nil {
		t.Fatal("Connect to a closed port succeeded")
	}
	if c.State() != client.Disconnected {
		t.Errorf("state after failed Connect = %v", c.State())
	}
	c.Start() // keeps retrying in the background
	for i := range 2 {
		if err := c.Emit(ctx, message.New("q", map[string]any{"i": i})); err != nil {
			t.Fatalf("Emit %d: %v", i, err)
		}
	}
	if err := c.Emit(ctx, message.New("q", nil)); !errors.Is(err, client.ErrQueueFull) {
		t.Errorf("third Emit = %v, want ErrQueueFull", err)
	}
	if err := c.Close(); err == nil {
		t.Error("Close with queued messages returned nil")
	}
	if err := c.Emit(ctx, message.New("q", nil)); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Emit after Close = %v", err)
	}

	nq := newClient(t, url, &client.Options{QueueSize: -1})
	if err := nq.Emit(ctx, message.New("q", nil)); !errors.Is(err, client.ErrDisconnected) {
		t.Errorf("Emit without queue = %v, want ErrDisconnected", err)
	}
	if _, err := nq.WaitForResponse(ctx, message.New("q", nil), "", time.Second); !errors.Is(err, client.ErrDisconnected) {
		t.Errorf("WaitForResponse without queue = %v", err)
	}
}

// Frames that are not OVOS messages reach OnFrame handlers with a reason, not On handlers, and do
// not break the connection.
func TestMalformedFramesOnTheBus(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	c := newClient(t, b.url(), nil)
	type seen struct {
		data string
		err  error
	}
	var mu sync.Mutex
	var frames []seen
	c.OnFrame(func(f client.Frame) {
		mu.Lock()
		frames = append(frames, seen{string(f.Data), f.Err})
		mu.Unlock()
	})
	msgs := newCollector()
	c.On("*", msgs.handle)
	if err := c.Connect(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	msgs.waitFor(t, "connected")
	b.waitClients(1)

	raw, _, err := ws.Dial(ctxT(t), b.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	b.waitClients(2)
	ctx := ctxT(t)
	bad := []struct {
		op   ws.Opcode
		data string
		kind error
	}{
		{ws.TextMessage, "hello, not json", message.ErrNotJSON},
		{ws.TextMessage, `[1,2,3]`, message.ErrNotObject},
		{ws.TextMessage, `{"ciphertext":"ab","tag":"cd","nonce":"ef"}`, message.ErrEncrypted},
		{ws.TextMessage, `{"data":{}}`, message.ErrNoType},
		{ws.BinaryMessage, "\x00\x01\x02", message.ErrBinary},
		{ws.TextMessage, `{"type":"valid.after","data":{},"context":{}}`, nil},
	}
	for _, f := range bad {
		if err := raw.WriteMessage(ctx, f.op, []byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}
	msgs.waitFor(t, "valid.after")
	if got := msgs.types(); !reflect.DeepEqual(got, []string{"connected", "valid.after"}) {
		t.Errorf("On(*) got %v", got)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		n := len(frames)
		mu.Unlock()
		if n > len(bad) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(frames) != 1+len(bad) {
		t.Fatalf("OnFrame got %d frames, want %d: %v", len(frames), 1+len(bad), frames)
	}
	want := append([]struct {
		op   ws.Opcode
		data string
		kind error
	}{{ws.TextMessage, bus.Greeting, nil}}, bad...)
	for i, f := range want {
		if frames[i].data != f.data || (f.kind == nil) != (frames[i].err == nil) || (f.kind != nil && !errors.Is(frames[i].err, f.kind)) {
			t.Errorf("frame %d = %q %v, want %q %v", i, frames[i].data, frames[i].err, f.data, f.kind)
		}
	}
	if c.State() != client.Connected {
		t.Errorf("state = %v", c.State())
	}
}

func TestCloseWithoutLeaks(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	ctx := ctxT(t)
	// One connection first: on Linux the bus's first one starts its poller,
	// whose one goroutine serves the whole process from then on
	// (bus/internal/netpoll). Every other goroutine of that connection ends.
	runtime.GC()
	base, _ := liveGoroutines()
	warm := dial(t, b, nil)
	warm.Close()
	waitGoroutines(t, base+1)
	base, _ = liveGoroutines()
	for range 3 {
		c, err := client.New(b.url(), &client.Options{OnState: func(client.StateChange) {}})
		if err != nil {
			t.Fatal(err)
		}
		col := newCollector()
		c.On("*", col.handle)
		c.On("x", func(message.Message) {})
		c.Once("never", func(message.Message) {})
		c.OnFrame(func(client.Frame) {})
		if err := c.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		c.Emit(ctx, message.New("x", nil))
		col.waitFor(t, "x")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		// Done may close just after Close returns: a dispatcher that was
		// in its OnState or handler call at that moment finishes first
		// (see Close).
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("Done not closed after Close")
		}
		if c.State() != client.Closed {
			t.Errorf("state = %v", c.State())
		}
		if _, err := c.WaitFor(ctx, "x", time.Second); !errors.Is(err, client.ErrClosed) {
			t.Errorf("WaitFor after Close = %v", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	}
	// A client that never connected, and one retrying against nothing.
	idle, _ := client.New(b.url(), nil)
	idle.On("*", func(message.Message) {})
	idle.Close()
	retry, _ := client.New("ws://"+closedAddr(t)+"/core", &client.Options{ReconnectMin: time.Millisecond})
	retry.Start()
	time.Sleep(20 * time.Millisecond)
	retry.Close()
	waitGoroutines(t, base)
}

// A handler may close its own client, and so may the state callback.
func TestCloseFromCallbacks(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	c := newClient(t, b.url(), nil)
	c.On("connected", func(message.Message) { c.Close() })
	if err := c.Connect(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Close from a handler did not finish")
	}

	var c2 *client.Client
	c2 = newClient(t, b.url(), &client.Options{OnState: func(sc client.StateChange) {
		if sc.State == client.Connected {
			c2.Close()
		}
	}})
	if err := c2.Connect(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Close from OnState did not finish")
	}
}

func TestNoReconnect(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	var lastErr atomic.Value
	c := dial(t, b, &client.Options{NoReconnect: true, OnState: func(sc client.StateChange) {
		if sc.State == client.Closed && sc.Err != nil {
			lastErr.Store(sc.Err)
		}
	}})
	b.waitClients(1)
	b.stop()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("client with NoReconnect did not close after the bus went away")
	}
	if c.State() != client.Closed {
		t.Errorf("state = %v", c.State())
	}
	if lastErr.Load() == nil {
		t.Error("Closed state change carried no error")
	}
}

func TestBackoffOptionsAndURL(t *testing.T) {
	if _, err := client.New("http://x/core", nil); err == nil {
		t.Error("http URL accepted")
	}
	if _, err := client.New("ws:///core", nil); err == nil {
		t.Error("URL without host accepted")
	}
	t.Setenv("OVOS_BUS_HOST", "::1")
	t.Setenv("OVOS_BUS_PORT", "9000")
	t.Setenv("OVOS_BUS_ROUTE", "bus")
	t.Setenv("OVOS_BUS_USE_SSL", "true")
	if u := client.URLFromEnv(); u != "wss://[::1]:9000/bus" {
		t.Errorf("URLFromEnv = %s", u)
	}
	// Dials are retried with growing waits.
	var mu sync.Mutex
	var retries []time.Duration
	c := newClient(t, "ws://"+closedAddr(t)+"/core", &client.Options{
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 40 * time.Millisecond, ReconnectJitter: -1,
		OnState: func(sc client.StateChange) {
			if sc.State == client.Disconnected {
				mu.Lock()
				retries = append(retries, sc.Retry)
				mu.Unlock()
			}
		},
	})
	c.Start()
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		n := len(retries)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	if len(retries) < 4 || !reflect.DeepEqual(retries[:4], want) {
		t.Errorf("retry waits = %v, want %v...", retries, want)
	}
}

// wss:// with the bus's self-signed certificate given as the CA.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	srv, err := bus.New(bus.Options{Addr: "127.0.0.1:0", Logger: quietLog, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	url := "wss://" + srv.Addr().String() + "/core"

	if _, err := client.Dial(ctxT(t), url, nil); err == nil {
		t.Error("Dial without the CA succeeded")
	}
	c, err := client.Dial(ctxT(t), url, &client.Options{Dial: &ws.DialOptions{TLSConfig: &tls.Config{RootCAs: pool}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.WaitForResponse(ctxT(t), message.New("tls.echo", nil), "tls.echo", time.Second)
	if err != nil || r.Type != "tls.echo" {
		t.Errorf("echo over wss: %v %v", r, err)
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{Organization: []string{"OpenVoiceOS"}, CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func ExampleClient() {
	// A responder answers "demo.ping" on the bus; the client asks and waits for the answer.
	srv, _ := bus.New(bus.Options{Addr: "127.0.0.1:0", Logger: quietLog})
	srv.Start()
	defer srv.Shutdown(context.Background())
	url := "ws://" + srv.Addr().String() + "/core"
	ctx := context.Background()

	responder, _ := client.Dial(ctx, url, nil)
	defer responder.Close()
	responder.On("demo.ping", func(m message.Message) {
		responder.Emit(ctx, m.Response(map[string]any{"answer": 42}))
	})

	c, _ := client.Dial(ctx, url, nil)
	defer c.Close()
	for srv.Clients() < 2 { // both have joined the fan-out
		time.Sleep(time.Millisecond)
	}
	reply, err := c.WaitForResponse(ctx, message.New("demo.ping", nil), "", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reply)
	// Output: {"type":"demo.ping.response","data":{"answer":42},"context":{}}
}
