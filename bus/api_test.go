package bus

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
	"github.com/prometheus/client_golang/prometheus"
)

func nextFrames(t *testing.T, f *Follower, n int) []Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []Frame
	for len(got) < n {
		var err error
		got, err = f.Next(ctx, got)
		if err != nil {
			t.Fatalf("Next after %d frames: %v", len(got), err)
		}
	}
	return got
}

func TestFollow(t *testing.T) {
	s, url := testServer(t, Options{})
	f := s.Follow(FollowOptions{Name: "test"})
	defer f.Close()
	a := dial(t, url, nil)
	start := time.Now()
	send(t, a, ws.OpText, []byte(`{"type":"one"}`))
	send(t, a, ws.OpBinary, []byte{1, 2, 3})
	read(t, a) // the socket's frames are in the log before Emit's
	read(t, a)
	if err := s.Emit(message.Message{Type: "two"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ws.OpText, []byte(`{"type":"three"}`), "node-b"); err != nil {
		t.Fatal(err)
	}
	got := nextFrames(t, f, 4)
	want := []struct {
		op     ws.Opcode
		typ    string
		origin string
	}{{ws.OpText, "one", ""}, {ws.OpBinary, "", ""}, {ws.OpText, "two", ""}, {ws.OpText, "three", "node-b"}}
	for i, w := range want {
		g := got[i]
		if g.Op != w.op || g.Type() != w.typ || g.Origin != w.origin {
			t.Errorf("frame %d: %v %q origin %q, want %v %q origin %q", i, g.Op, g.Type(), g.Origin, w.op, w.typ, w.origin)
		}
		if i > 0 && g.Seq != got[i-1].Seq+1 {
			t.Errorf("frame %d: seq %d after %d", i, g.Seq, got[i-1].Seq)
		}
		if g.Time.Before(start.Add(-time.Millisecond)) || g.Time.After(time.Now()) {
			t.Errorf("frame %d: time %v not within the test", i, g.Time)
		}
	}
	// The published frame reached the socket client too.
	expect(t, ws.OpText, []byte(`{"type":"two","data":{},"context":{}}`), a)
	expect(t, ws.OpText, []byte(`{"type":"three"}`), a)

	// cap(dst)-len(dst) bounds a batch, but one frame always comes.
	for range 3 {
		s.Emit(message.Message{Type: "x"})
	}
	batch, err := f.Next(context.Background(), make([]Frame, 0, 2))
	if err != nil || len(batch) != 2 {
		t.Fatalf("Next with room for 2: %d frames, %v", len(batch), err)
	}
	batch, err = f.Next(context.Background(), nil)
	if err != nil || len(batch) != 1 {
		t.Fatalf("Next with no room: %d frames, %v", len(batch), err)
	}

	// ctx ends a wait; Close ends the follower.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := f.Next(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on an idle bus: %v, want deadline exceeded", err)
	}
	go func() { time.Sleep(10 * time.Millisecond); f.Close() }()
	if _, err := f.Next(context.Background(), nil); err != ErrFollowerClosed {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestFollowLagged(t *testing.T) {
	s, _ := testServer(t, Options{})
	f := s.Follow(FollowOptions{Name: "slow", MaxMessages: 3})
	defer f.Close()
	for range 5 {
		s.Emit(message.Message{Type: "x"})
	}
	if _, err := f.Next(context.Background(), nil); err != ErrLagged {
		t.Fatalf("Next 5 behind with MaxMessages 3: %v", err)
	}
	if _, err := f.Next(context.Background(), nil); err != ErrLagged {
		t.Fatalf("Next after the cut: %v", err)
	}
	if m := scrape(t, s); !strings.Contains(m, `ovbus_followers_lagged_total{follower="slow"} 1`) {
		t.Errorf("metrics: %s", grep(m, "lagged"))
	}

	// Byte bound.
	fb := s.Follow(FollowOptions{MaxBytes: 64})
	defer fb.Close()
	s.EmitRaw(ws.OpText, []byte(strings.Repeat("a", 100)))
	if _, err := fb.Next(context.Background(), nil); err != ErrLagged {
		t.Fatalf("Next 100 bytes behind with MaxBytes 64: %v", err)
	}
}

func TestFollowShutdown(t *testing.T) {
	s, _ := testServer(t, Options{})
	f := s.Follow(FollowOptions{})
	s.Emit(message.Message{Type: "last"})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := f.Next(context.Background(), nil)
	if err != nil || len(got) != 1 || got[0].Type() != "last" {
		t.Fatalf("Next after Shutdown: %v %v, want the frame published before it", got, err)
	}
	if _, err := f.Next(context.Background(), nil); err != ErrServerClosed {
		t.Fatalf("Next after the last frame: %v", err)
	}
	if err := s.Publish(ws.OpText, []byte(`{}`), "x"); err != ErrServerClosed {
		t.Fatalf("Publish after Shutdown: %v", err)
	}
	if err := s.EmitAs(nil, ws.OpText, []byte(`{}`)); err != ErrServerClosed {
		t.Fatalf("EmitAs after Shutdown: %v", err)
	}
}

type recordingSequencer struct {
	mu     sync.Mutex
	frames [][]byte
	got    chan struct{}
}

func (r *recordingSequencer) Sequence(op ws.Opcode, payload []byte) {
	r.mu.Lock()
	r.frames = append(r.frames, payload)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func TestSequencer(t *testing.T) {
	seq := &recordingSequencer{got: make(chan struct{}, 16)}
	s, url := testServer(t, Options{Sequencer: seq})
	a := dial(t, url, nil)
	send(t, a, ws.OpText, []byte(`{"type":"from.socket"}`))
	<-seq.got
	s.Emit(message.Message{Type: "from.emit"})
	<-seq.got
	send(t, a, ws.OpText, []byte(`{"type":"bad","context":{"session":1}}`))
	<-seq.got
	seq.mu.Lock()
	frames := seq.frames
	seq.mu.Unlock()
	want := []string{`{"type":"from.socket"}`, `{"type":"from.emit","data":{},"context":{}}`,
		`{"type":"ovos.session.rejected","data":{"msg_type":"bad","reason":"malformed_carrier"},"context":{}}`}
	for i, w := range want {
		if string(frames[i]) != w {
			t.Errorf("sequenced %d: %s, want %s", i, frames[i], w)
		}
	}
	// Nothing reached the log: the client gets only what the sequencer
	// publishes, in its order.
	for i := len(frames) - 1; i >= 0; i-- {
		if err := s.Publish(ws.OpText, frames[i], "seq"); err != nil {
			t.Fatal(err)
		}
	}
	for i := len(frames) - 1; i >= 0; i-- {
		expect(t, ws.OpText, frames[i], a)
	}
}

func TestSessionsAndRecentCloses(t *testing.T) {
	s, url := testServer(t, Options{MaxMsgSize: 64, Auth: Auth{Tokens: map[string]Permissions{
		"secret": {Name: "kitchen"},
	}}})
	a := dial(t, url+"?token=secret", &ws.DialOptions{Header: http.Header{"User-Agent": {"test-agent"}, "Origin": {"http://o.example"}}})
	b := dial(t, url, nil)
	send(t, a, ws.OpText, []byte(`{"type":"m"}`))
	expect(t, ws.OpText, []byte(`{"type":"m"}`), a, b)

	ss := s.Sessions()
	if len(ss) != 2 {
		t.Fatalf("Sessions: %+v", ss)
	}
	sa := ss[0]
	if sa.ID == 0 || sa.ID >= ss[1].ID || sa.UserAgent != "test-agent" || sa.Origin != "http://o.example" ||
		sa.Token != "kitchen" || sa.Remote == "" || sa.Connected.IsZero() {
		t.Errorf("session a: %+v", sa)
	}
	if sa.FramesIn != 1 || sa.BytesIn != 12 {
		t.Errorf("session a in: %d frames, %d bytes", sa.FramesIn, sa.BytesIn)
	}
	if ss[1].Token != "" {
		t.Errorf("session b has token %q", ss[1].Token)
	}
	// Writes are counted once the writer is done with the batch.
	deadline := time.Now().Add(5 * time.Second)
	for s.Sessions()[1].FramesOut != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if sb := s.Sessions()[1]; sb.FramesOut != 1 || sb.BytesOut != 14 || sb.QueuedMessages != 0 || sb.QueuedBytes != 0 {
		t.Errorf("session b out: %+v", sb)
	}

	// b closes normally, a sends too much.
	b.Close(ws.StatusNormalClosure, "bye")
	send(t, a, ws.OpText, []byte(`{"type":"`+strings.Repeat("x", 100)+`"}`))
	for len(s.RecentCloses()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cs := s.RecentCloses()
	if len(cs) != 2 {
		t.Fatalf("RecentCloses: %+v", cs)
	}
	byReason := map[string]CloseInfo{}
	for _, c := range cs {
		byReason[c.Reason] = c
	}
	if c := byReason[reasonClientClose]; c.Code != ws.StatusNormalClosure || c.Detail != "bye" || c.Session.ID != ss[1].ID || c.Closed.IsZero() {
		t.Errorf("client close: %+v", c)
	}
	if c := byReason[reasonOversize]; c.Code != ws.StatusMessageTooBig || c.Session.Token != "kitchen" {
		t.Errorf("oversize close: %+v", c)
	}
	if !cs[0].Closed.After(cs[1].Closed) && !cs[0].Closed.Equal(cs[1].Closed) {
		t.Errorf("RecentCloses not newest first: %v, %v", cs[0].Closed, cs[1].Closed)
	}
	if n := len(s.Sessions()); n != 0 {
		t.Errorf("%d sessions left", n)
	}
}

func TestRecentClosesKeepsTheLast100(t *testing.T) {
	s, _ := testServer(t, Options{})
	for i := range 150 {
		s.removeSession(&session{}, CloseInfo{Session: SessionInfo{ID: uint64(i)}})
	}
	cs := s.RecentCloses()
	if len(cs) != 100 || cs[0].Session.ID != 149 || cs[99].Session.ID != 50 {
		t.Fatalf("%d closes, newest %d, oldest %d", len(cs), cs[0].Session.ID, cs[len(cs)-1].Session.ID)
	}
}

func TestAuthorizeAndEmitAs(t *testing.T) {
	s, url := testServer(t, Options{Auth: Auth{Required: true, Tokens: map[string]Permissions{
		"admin": {Name: "admin"},
		"gui":   {Name: "gui", Emit: []string{"gui.*"}},
	}}})
	const local = "127.0.0.1:50000"
	if _, ok := s.Authorize("", local); ok {
		t.Error("no token accepted though required")
	}
	if _, ok := s.Authorize("wrong", local); ok {
		t.Error("unknown token accepted")
	}
	if p, ok := s.Authorize("admin", local); !ok || p != nil {
		t.Errorf("admin: %v %v, want nil permissions", p, ok)
	}
	p, ok := s.Authorize("gui", local)
	if !ok || p == nil || p.Name != "gui" {
		t.Fatalf("gui: %v %v", p, ok)
	}
	a := dial(t, url+"?token=admin", nil)
	if err := s.EmitAs(p, ws.OpText, []byte(`{"type":"speak"}`)); err != ErrNotAllowed {
		t.Fatalf("EmitAs speak under gui: %v", err)
	}
	m := []byte(`{"type":"gui.page.show"}`)
	if err := s.EmitAs(p, ws.OpText, m); err != nil {
		t.Fatal(err)
	}
	expect(t, ws.OpText, m, a) // and not the forbidden one before it
	if err := s.EmitAs(nil, ws.OpClose, nil); err == nil {
		t.Error("EmitAs accepted a close opcode")
	}

	// Without tokens: loopback has everything, other addresses nothing, and
	// a token the bus does not know is refused from anywhere.
	open, _ := testServer(t, Options{})
	for _, c := range []struct {
		token, remote string
		ok            bool
	}{{"", local, true}, {"", "[::1]:1", true}, {"", "[::ffff:127.0.0.1]:1", true}, {"", "192.0.2.7:1", false}, {"anything", local, false}} {
		if p, ok := open.Authorize(c.token, c.remote); ok != c.ok || p != nil {
			t.Errorf("Authorize(%q, %q) = %v %v, want %v", c.token, c.remote, p, ok, c.ok)
		}
	}
}

func TestAddHealth(t *testing.T) {
	s, _ := testServer(t, Options{})
	base := "http://" + s.Addr().String() + "/health"
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || body != "ok" {
		t.Fatalf("no checks: %d %q", code, body)
	}
	var mu sync.Mutex
	state, up := "up", true
	s.AddHealth("nats", func() (string, bool) { mu.Lock(); defer mu.Unlock(); return state, up })
	if code, body := get(); code != 200 || body != "ok\nnats: up" {
		t.Fatalf("check up: %d %q", code, body)
	}
	mu.Lock()
	state, up = "down: dial tcp 127.0.0.1:4222: connection refused", false
	mu.Unlock()
	if code, body := get(); code != 503 || body != "unhealthy\nnats: down: dial tcp 127.0.0.1:4222: connection refused" {
		t.Fatalf("check down: %d %q", code, body)
	}
}

func TestMetricsRegistry(t *testing.T) {
	s, _ := testServer(t, Options{})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ovbus_cluster_test_total", Help: "A test counter."})
	s.Metrics().MustRegister(c)
	c.Add(3)
	if m := scrape(t, s); !strings.Contains(m, "ovbus_cluster_test_total 3") {
		t.Errorf("scrape lacks the added counter: %s", grep(m, "cluster"))
	}
}
