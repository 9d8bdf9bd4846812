package bus

import (
	"bytes"
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestMemoryReleasedAfterBurst: once a burst of large messages has gone
// through max_inflight_bytes (more than releaseMinBurst charged) and
// stopped, the bus hands the memory back to the OS once, counted in
// ovbus_memory_releases_total; a second burst gets its
// own release, once the rate limit (releaseShare times the CPU the first
// took) allows it.
func TestMemoryReleasedAfterBurst(t *testing.T) {
	s, url := testServer(t, Options{Auth: Auth{Tokens: map[string]Permissions{
		"tok": {Name: "burst", Emit: []string{"burst.allowed"}}}}})
	c := dial(t, url+"?token=tok", nil)
	msg := []byte(`{"type":"burst.large","data":{"pad":"` + strings.Repeat("x", 1<<20) + `"},"context":{}}`)
	burst := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
	waitFor(t, "the first release", 60*time.Second, func() bool { return s.mem.count.Load() == 1 })
	if !strings.Contains(scrape(t, s), "ovbus_memory_releases_total 1") {
		t.Error("ovbus_memory_releases_total is not 1")
	}
	burst()
	waitFor(t, "the second release", 60*time.Second, func() bool { return s.mem.count.Load() == 2 })
	if n := s.mem.skipped.Load(); n != 0 {
		t.Errorf("%d bursts skipped as too small for the heap", n)
	}
}

// releaseAfter starts a server that releases memory after n handshakes
// (releaseMinAccepts lowered), whatever the heap did since. They are set
// before Start: the upgrade path reads them.
func releaseAfter(t *testing.T, n int64, o Options) (*Server, string) {
	t.Helper()
	return testServerSet(t, o, func(s *Server) {
		s.mem.minAccepts = n
		s.mem.minGrowth = math.MinInt64
	})
}

// TestMemoryReleasedAfterHandshakes: once enough handshakes were made
// (lowered here from releaseMinAccepts) and then none for releaseQuiet, the
// bus hands the memory back to the OS, counted in
// ovbus_memory_releases_total; fewer handshakes than that
// release nothing.
func TestMemoryReleasedAfterHandshakes(t *testing.T) {
	const n = 16
	s, url := releaseAfter(t, n, Options{})
	for range n - 1 {
		dial(t, url, nil)
	}
	if got := s.mem.accepts.Load(); got != n-1 {
		t.Fatalf("%d handshakes counted, want %d", got, n-1)
	}
	if s.mem.running.Load() {
		t.Fatal("a releaser started before the threshold")
	}
	dial(t, url, nil)
	waitFor(t, "the release", 60*time.Second, func() bool { return s.mem.count.Load() == 1 })
	if s.mem.accepted.Load() != 1 {
		t.Error("the release is not counted as one after handshakes")
	}
	if !strings.Contains(scrape(t, s), "ovbus_memory_releases_total 1") {
		t.Error("ovbus_memory_releases_total is not 1")
	}
	if got := s.mem.accepts.Load(); got != 0 {
		t.Errorf("%d handshakes left counted after the release", got)
	}
}

// TestMemoryReleaseWaitsForFanOut: a release after handshakes waits while
// a fan-out is under way (a follower has not fetched up to the head of the
// log), however long the handshakes have been over, and comes once every
// follower has caught up.
func TestMemoryReleaseWaitsForFanOut(t *testing.T) {
	const n = 16
	s, url := releaseAfter(t, n, Options{})
	fl := s.Follow(FollowOptions{Name: "behind"})
	defer fl.Close()
	if err := s.EmitRaw(ws.OpText, []byte(`{"type":"fan.out","data":{},"context":{}}`)); err != nil {
		t.Fatal(err)
	}
	for range n {
		dial(t, url, nil)
	}
	waitFor(t, "the releaser to put the release off", 60*time.Second, func() bool { return s.mem.deferred.Load() >= 2 })
	if got := s.mem.count.Load(); got != 0 {
		t.Fatalf("%d releases while a follower had not fetched the head", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if fs, err := fl.Next(ctx, make([]Frame, 0, 4)); err != nil || len(fs) != 1 {
		t.Fatalf("Next: %d frames, %v", len(fs), err)
	}
	waitFor(t, "the release", 60*time.Second, func() bool { return s.mem.count.Load() == 1 })
	if s.mem.accepted.Load() != 1 {
		t.Error("the release is not counted as one after handshakes")
	}
}

// TestMemoryReleaseWaitsForWrites: the release after handshakes also waits
// while a client has not been written everything its follower fetched (a
// fan-out's writes go on after its fetches), and comes once it has.
func TestMemoryReleaseWaitsForWrites(t *testing.T) {
	const n = 16
	s, url := releaseAfter(t, n, Options{WriteTimeout: time.Minute})
	// A client that reads nothing for now, with a small receive buffer.
	stalled := dial(t, url, &ws.DialOptions{MaxMessageSize: 32 << 20, MaxFrameSize: 32 << 20,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				nc.(*net.TCPConn).SetReadBuffer(64 << 10)
			}
			return nc, err
		}})
	for range n - 2 {
		dial(t, url, nil).CloseNow()
	}
	// One frame of 16 MiB, more than the kernel buffers of the stalled
	// client hold: its follower has fetched it, its writer is stuck in it.
	if err := s.Publish(ws.OpBinary, bytes.Repeat([]byte("z"), 16<<20), ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled client's writer to block", 60*time.Second, func() bool {
		for _, si := range s.Sessions() {
			if si.QueuedBytes > 4<<20 {
				return true
			}
		}
		return false
	})
	dial(t, url, nil).CloseNow() // the n-th handshake: the releaser starts
	waitFor(t, "the releaser to put the release off", 60*time.Second, func() bool { return s.mem.deferred.Load() >= 2 })
	if got := s.mem.count.Load(); got != 0 {
		t.Fatalf("%d releases while a client's writes were behind", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := stalled.ReadMessage(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release", 60*time.Second, func() bool { return s.mem.count.Load() == 1 })
}
