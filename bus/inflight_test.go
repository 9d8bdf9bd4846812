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
	a, b := dial(t, url, nil), dial(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := a.Writer(ctx, ws.OpBinary)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), size)
	w.Write(big[:size-1]) // all but the last frame
	// b's message is refused only if it does not fit beside what a holds:
	// wait until a holds more than the budget minus b's message (its bytes
	// arrive frame by frame; all but one buffered frame are sent).
	for s.inflight.InUse() <= (1<<20)-size {
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
	w.Write(big[size-1:])
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	expect(t, ws.OpBinary, big, a)
	for s.inflight.InUse() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("in flight %d bytes after the message was relayed", s.inflight.InUse())
		}
		time.Sleep(time.Millisecond)
	}
}
