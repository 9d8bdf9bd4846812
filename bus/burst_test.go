package bus

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestBurstFromOneRead: of messages that reach the bus in one network read,
// the last one dropped now and then (its sender is told), every subscriber gets every allowed
// message, in order, without waiting for another message to push them out.
func TestBurstFromOneRead(t *testing.T) {
	_, url := testServer(t, Options{Auth: Auth{Required: true, Tokens: map[string]Permissions{
		"admin": {Name: "admin"},
		"gui":   {Name: "gui", Emit: []string{"gui.*"}},
	}}})
	subs := []*ws.Conn{dial(t, url+"?token=admin", nil), dial(t, url+"?token=admin", nil)}
	sender := dial(t, url, &ws.DialOptions{Header: http.Header{"Authorization": {"Bearer gui"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for round := range 20 {
		n := 1 + round*3
		// One write carries the burst; the last message is not allowed.
		for i := range n {
			if err := sender.BufferMessage(ws.OpText, fmt.Appendf(nil, `{"type":"gui.n","data":{"i":%d}}`, i)); err != nil {
				t.Fatal(err)
			}
		}
		if round%2 == 0 {
			sender.BufferMessage(ws.OpText, []byte(`{"type":"speak"}`))
		}
		if err := sender.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, c := range append(subs, sender) {
			for i := range n {
				want := fmt.Sprintf(`{"type":"gui.n","data":{"i":%d}}`, i)
				rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
				_, b, err := c.ReadMessage(rctx)
				rcancel()
				if err != nil || string(b) != want {
					t.Fatalf("round %d, message %d: %q, %v; want %s", round, i, b, err, want)
				}
			}
		}
		if round%2 == 0 { // the sender alone is told that speak was not relayed
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			_, b, err := sender.ReadMessage(rctx)
			rcancel()
			if want := string(notAllowedMessage("speak")); err != nil || string(b) != want {
				t.Fatalf("round %d: %q, %v; want %s", round, b, err, want)
			}
		}
	}
}
