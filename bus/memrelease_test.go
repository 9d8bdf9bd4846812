package bus

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestMemoryReleasedAfterBurst: once a burst of large messages has gone
// through max_inflight_bytes (more than releaseMinBurst charged) and
// stopped, the bus hands the memory back to the OS once, counted in
// ovbus_memory_releases_total (issue 10 item 3); a second burst gets its
// own release, once the rate limit (releaseShare times the CPU the first
// took) allows it.
func TestMemoryReleasedAfterBurst(t *testing.T) {
	s, url := testServer(t, Options{Auth: Auth{Tokens: map[string]Permissions{
		"tok": {Name: "burst", Emit: []string{"burst.allowed"}}}}})
	c := dial(t, url+"?token=tok", nil)
	msg := []byte(`{"type":"burst.large","data":{"pad":"` + strings.Repeat("x", 1<<20) + `"},"context":{}}`)
	burst := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for range releaseMinBurst/(1<<20) + 2 {
			if err := c.WriteMessage(ctx, ws.OpText, msg); err != nil {
				t.Fatal(err)
			}
			// The bus refuses it after reading it whole and says so.
			_, b, err := c.ReadMessage(ctx)
			if err != nil || !bytes.Contains(b, []byte(NotAllowedType)) {
				t.Fatalf("notice: %v %.100q", err, b)
			}
		}
	}
	burst()
	waitFor(t, "the first release", 10*time.Second, func() bool { return s.mem.count.Load() == 1 })
	if !strings.Contains(scrape(t, s), "ovbus_memory_releases_total 1") {
		t.Error("ovbus_memory_releases_total is not 1")
	}
	burst()
	waitFor(t, "the second release", 60*time.Second, func() bool { return s.mem.count.Load() == 2 })
	if n := s.mem.skipped.Load(); n != 0 {
		t.Errorf("%d bursts skipped as too small for the heap", n)
	}
}
