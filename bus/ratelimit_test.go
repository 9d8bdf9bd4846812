package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

func TestBucket(t *testing.T) {
	const s = int64(time.Second)
	b := newBucket(2, 3, 0) // 2 a second, 3 at once
	for i := range 3 {
		if !b.take(0) {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	if b.take(0) || b.take(s/4) {
		t.Fatal("a fourth message in the first quarter second passed")
	}
	if !b.take(s/2) || b.take(s/2) { // one token back after half a second
		t.Fatal("the token of half a second")
	}
	if !b.take(100*s) || !b.take(100*s) || !b.take(100*s) || b.take(100*s) { // refilled up to the burst only
		t.Fatal("the bucket is not capped at its burst")
	}
	if b.take(99 * s) { // a clock going back adds nothing
		t.Fatal("time going back added tokens")
	}
}

// TestRateLimitedFlood: a client over its message rate is closed with 1008
// "message rate limit", counted and listed; what it sent before that is
// within its burst and rate; a healthy client beside it gets every one of
// its own messages, in order, and stays connected.
func TestRateLimitedFlood(t *testing.T) {
	const rate, burst = 50, 20
	s, url := testServer(t, Options{Auth: Auth{Tokens: map[string]Permissions{
		"flood-token-0123456789": {Name: "flooder", Rate: rate, Burst: burst},
	}}})
	healthy := dial(t, url, nil)
	flooder := dial(t, url+"/flood-token-0123456789", nil)
	start := time.Now()

	// The flooder writes as fast as it can until the bus closes it, while
	// the healthy client sends 200 messages.
	const n = 200
	go func() {
		for i := 0; ; i++ {
			if flooder.WriteMessage(context.Background(), ws.OpText, fmt.Appendf(nil, `{"type":"flood","data":{"i":%d}}`, i)) != nil {
				return
			}
		}
	}()
	go func() {
		for i := range n {
			if healthy.WriteMessage(context.Background(), ws.OpText, fmt.Appendf(nil, `{"type":"ping","data":{"i":%d}}`, i)) != nil {
				return
			}
		}
	}()
	// The flooder reads what it gets, up to the close frame.
	flooderEnd := make(chan error, 1)
	go func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _, err := flooder.ReadMessage(ctx)
			cancel()
			if err != nil {
				flooderEnd <- err
				return
			}
		}
	}()
	// The healthy client gets all of its messages, in order, among the
	// frames of the flood that were relayed.
	floods, next := 0, 0
	for next < n {
		_, b := read(t, healthy)
		switch {
		case strings.Contains(string(b), `"flood"`):
			floods++
		case string(b) == fmt.Sprintf(`{"type":"ping","data":{"i":%d}}`, next):
			next++
		default:
			t.Fatalf("healthy client: got %q, want ping %d", b, next)
		}
	}
	err := <-flooderEnd
	elapsed := time.Since(start)
	var ce *ws.CloseError
	if !errors.As(err, &ce) || ce.Code != ws.StatusPolicyViolation || ce.Reason != rateLimitReason {
		t.Fatalf("the flooder ended with %v, want 1008 %q", err, rateLimitReason)
	}
	// No more of the flood than its burst and its rate over the whole
	// test: a bound that only a broken limit breaks, however slow the
	// machine.
	if most := burst + int(rate*elapsed.Seconds()) + 1; floods > most {
		t.Errorf("%d frames of the flood relayed in %v, more than %d", floods, elapsed, most)
	}
	send(t, healthy, ws.OpText, []byte(`{"type":"still here"}`))
	for {
		if _, b := read(t, healthy); string(b) == `{"type":"still here"}` {
			break
		}
	}
	if got := counterValue(t, s, `ovbus_closes_total{reason="rate_limited"}`); got != 1 {
		t.Errorf("rate_limited closes: %v", got)
	}
	cs := s.RecentCloses()
	if len(cs) != 1 || cs[0].Reason != reasonRateLimited || cs[0].Code != ws.StatusPolicyViolation || cs[0].Session.Identity != "token:flooder" {
		t.Errorf("recent closes: %+v", cs)
	}
	if s.Clients() != 1 {
		t.Errorf("%d clients, want the healthy one", s.Clients())
	}
}

// TestRateLimitFromASet: a named permission set's rate applies to the
// clients of its network rule; a client within its rate is never closed.
func TestRateLimitFromASet(t *testing.T) {
	s, url := testServer(t, Options{Auth: Auth{
		Sets:     map[string]Permissions{"slow": {Rate: 0.01, Burst: 3}}, // no token comes back during the test
		Loopback: "slow",
	}})
	c := dial(t, url, nil)
	for i := range 3 {
		m := fmt.Appendf(nil, `{"i":%d}`, i)
		send(t, c, ws.OpText, m)
		expect(t, ws.OpText, m, c)
	}
	send(t, c, ws.OpText, []byte(`{"i":3}`))
	_, _, err := c.ReadMessage(context.Background())
	var ce *ws.CloseError
	if !errors.As(err, &ce) || ce.Code != ws.StatusPolicyViolation {
		t.Fatalf("the fourth message at once: %v, want 1008", err)
	}
	if cs := s.RecentCloses(); len(cs) != 1 || cs[0].Session.Identity != "loopback" {
		t.Errorf("recent closes: %+v", cs)
	}
}

// TestRateLimitOutlivesTheConnection: a client closed for its rate that
// connects again from the same address gets no new burst: it is refused
// with 429 and Retry-After until its bucket holds a token, and then starts
// from that token.
func TestRateLimitOutlivesTheConnection(t *testing.T) {
	// One message per 100 s: no token comes back during the test.
	s, url := testServer(t, Options{Auth: Auth{
		Sets:     map[string]Permissions{"slow": {Rate: 0.01, Burst: 2}},
		Loopback: "slow",
	}})
	closedAfter := func(c *ws.Conn, n int) {
		t.Helper()
		for i := range n {
			m := fmt.Appendf(nil, `{"i":%d}`, i)
			send(t, c, ws.OpText, m)
			expect(t, ws.OpText, m, c)
		}
		send(t, c, ws.OpText, []byte(`{"over":1}`))
		_, _, err := c.ReadMessage(context.Background())
		var ce *ws.CloseError
		if !errors.As(err, &ce) || ce.Code != ws.StatusPolicyViolation {
			t.Fatalf("after %d messages: %v, want 1008", n, err)
		}
	}
	closedAfter(dial(t, url, nil), 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := ws.Dial(ctx, url, nil)
	var de *ws.DialError
	if !errors.As(err, &de) || de.StatusCode != 429 || de.Header.Get("Retry-After") == "" {
		t.Fatalf("reconnecting at once: %v, want 429 with Retry-After", err)
	}
	if wait, _ := strconv.Atoi(de.Header.Get("Retry-After")); wait < 90 || wait > 100 {
		t.Errorf("Retry-After %q, want the 100 s a token takes", de.Header.Get("Retry-After"))
	}
	if got := counterValue(t, s, `ovbus_rejected_total{reason="rate_limited"}`); got != 1 {
		t.Errorf("rate_limited refusals: %v", got)
	}
	// Once the bucket holds a token (100 s later, moved here by hand), the
	// client gets in with that one token.
	s.spent.mu.Lock()
	for k, b := range s.spent.by {
		b.last -= int64(100 * time.Second)
		s.spent.by[k] = b
	}
	s.spent.mu.Unlock()
	closedAfter(dial(t, url, nil), 1)
	if got := counterValue(t, s, `ovbus_closes_total{reason="rate_limited"}`); got != 2 {
		t.Errorf("rate_limited closes: %v", got)
	}
	// Another identity from the same address has a bucket of its own.
	if b := s.spent.bucket("token:x 127.0.0.1", 0.01, 2, s.hub.now()); b.tokens != 2 {
		t.Errorf("another identity's bucket holds %v tokens", b.tokens)
	}
}
