package bus

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestMaxInflightBytes: a client half way through a large message holds
// part of max_inflight_bytes; another client's message that does not fit
// beside it closes that client with 1013 and is counted; once the first
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
	for s.inflight.InUse() < size/2 {
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
