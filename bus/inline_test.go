package bus

import (
	"fmt"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

// TestWakerWritesInline: with more sleeping clients than the publisher
// wakes itself (inlineWakes), the waker writes their batches itself
// (session.writeInline). Every client still gets every frame, in the log's
// order, whether it was asleep for each frame (one at a time) or frames
// came while it was written to (a burst).
func TestWakerWritesInline(t *testing.T) {
	_, url := testServer(t, Options{})
	const clients, n = 3 * inlineWakes, 40
	cs := make([]*ws.Conn, clients)
	for i := range cs {
		cs[i] = dial(t, url, nil)
	}
	msg := func(k int) []byte { return []byte(fmt.Sprintf(`{"type":"t","data":{"k":%d}}`, k)) }
	for k := range n { // one at a time
		send(t, cs[k%clients], ws.OpText, msg(k))
		expect(t, ws.OpText, msg(k), cs...)
	}
	for k := range n { // a burst, from one client (the log's order is the order it sent)
		send(t, cs[1], ws.OpText, msg(n+k))
	}
	for k := range n {
		expect(t, ws.OpText, msg(n+k), cs...)
	}
}

// TestSlowConsumerAmongMany: TestSlowConsumer with more clients than the
// publisher wakes itself, so that the waker writes to all of them
// (session.writeInline): the slow client's socket fills part way through
// a batch, its writer goroutine takes the rest over, and it is still cut
// with 1008 while every other client gets every frame in order.
func TestSlowConsumerAmongMany(t *testing.T) { testSlowConsumer(t, 2*inlineWakes) }
