package bench

import (
	"testing"
	"time"
)

// With a URL list (the nodes of a cluster) the sender takes the first URL
// and the subscribers each URL in turn. Two separate buses here: only the
// subscriber on the sender's bus gets the messages.
func TestFanoutSpreadsSubscribers(t *testing.T) {
	a, b := startBus(t), startBus(t)
	if _, err := ParseTarget("pair=" + a + "," + b); err != nil {
		t.Fatalf("ParseTarget of a URL list: %v", err)
	}
	if _, err := ParseTarget("pair=" + a + ",http://x/core"); err == nil {
		t.Error("a URL list with an http URL was accepted")
	}
	r, err := RunFanout(ctxT(t), FanoutConfig{URL: a + "," + b, Clients: 2, Messages: 20, Warmup: -1,
		Timeout: 300 * time.Millisecond, Measure: Measure{ServerPID: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Delivered != 20 || r.Dropped != 20 {
		t.Errorf("delivered %d dropped %d, want 20 and 20 (one subscriber on each bus)", r.Delivered, r.Dropped)
	}
}
