package bus

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestMaxInflightBytes: a client half way through a large message holds
// part of max_inflight_bytes; another client's message that does not fit
// beside it closes that client with 1013 and is counted (closes reason
// overloaded, in RecentCloses too); once the first
// message is complete it is relayed and its bytes are given back.
func TestMaxInflightBytes(t *testing.T) {
	const size = 600 << 10
	s, url := testServer(t, Options{MaxMsgSize: 1 << 20, MaxInflightBytes: 1 << 20})
	// a sends its message by hand, so that the test knows what the bus has
	// of it: all but the last byte in a first frame. Which of two messages
	// read at once the Budget refuses is a race (each is charged as its
	// bytes arrive), so b starts only once all of a's first frame is
	// charged; then only b's can be the one that does not fit.
	a, _ := rawDial(t, s)
	cl := ws.NewProtocol(ws.Config{Role: ws.RoleClient})
	b, c := dial(t, url, nil), dial(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := bytes.Repeat([]byte("x"), size)
	first, err := cl.AppendFrame(nil, ws.OpBinary, big[:size-1], false)
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() { // it fills the socket before the bus reads it
		_, err := a.Write(first)
		wrote <- err
	}()
	for s.inflight.InUse() < size-1 {
		if ctx.Err() != nil {
			t.Fatalf("in flight %d bytes", s.inflight.InUse())
		}
		time.Sleep(time.Millisecond)
	}
	if err := b.WriteMessage(ctx, ws.OpBinary, big); err != nil {
		t.Fatal(err)
	}
	for {
		_, _, err := b.ReadMessage(ctx)
		var ce *ws.CloseError
		if errors.As(err, &ce) {
			if ce.Code != ws.StatusTryAgainLater {
				t.Fatalf("close code %d, want 1013", ce.Code)
			}
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	if s.inflight.Refused() != 1 {
		t.Errorf("refused %d, want 1", s.inflight.Refused())
	}
	// Counted as the bus's overload, not the client's error.
	for len(s.RecentCloses()) == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if cs := s.RecentCloses(); len(cs) != 1 || cs[0].Reason != reasonOverloaded || cs[0].Code != ws.StatusTryAgainLater || cs[0].Detail == "" {
		t.Errorf("RecentCloses %+v, want one overloaded 1013 with a detail", cs)
	}
	if m := scrape(t, s); !strings.Contains(m, `ovbus_closes_total{reason="overloaded"} 1`) || !strings.Contains(m, `ovbus_closes_total{reason="protocol_error"} 0`) {
		t.Errorf("closes_total: want overloaded 1, protocol_error 0")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	last, err := cl.AppendFrame(nil, ws.OpContinuation, big[size-1:], true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(last); err != nil {
		t.Fatal(err)
	}
	expect(t, ws.OpBinary, big, c)
	for s.inflight.InUse() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("in flight %d bytes after the message was relayed", s.inflight.InUse())
		}
		time.Sleep(time.Millisecond)
	}
}
