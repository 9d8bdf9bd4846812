//go:build linux

package ws

import (
	"bytes"
	"context"
	"io"
	"net"
	"reflect"
	"testing"
)

// tryFrames returns n prepared text frames back to back and their
// payloads.
func tryFrames(t *testing.T, n, size int) ([]byte, [][]byte) {
	t.Helper()
	var frames []byte
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = bytes.Repeat([]byte{byte('a' + i%26)}, size)
		var err error
		if frames, _, err = AppendPreparedMessage(frames, OpText, payloads[i], CompressionOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return frames, payloads
}

// readFrames reads the frames of payloads from the peer end a (their
// length is known: PreparedFrameSize) and checks with feed that they are
// those messages, in order, and nothing else.
func readFrames(t *testing.T, a net.Conn, payloads [][]byte) {
	t.Helper()
	size := 0
	want := make([]rec, len(payloads))
	for i, pl := range payloads {
		size += PreparedFrameSize(len(pl))
		want[i] = rec{Kind: EventMessage, Op: OpText, Data: string(pl)}
	}
	wire := make([]byte, size)
	if n, err := io.ReadFull(a, wire); err != nil {
		t.Fatalf("read %d of %d bytes: %v", n, size, err)
	}
	res := feed(t, NewProtocol(Config{Role: RoleClient, MaxMessageSize: -1, MaxFrameSize: -1}), wire, nil)
	if res.err != nil || !reflect.DeepEqual(res.events, want) {
		t.Fatalf("%d events (%v), want the %d messages sent", len(res.events), res.err, len(want))
	}
}

// TestTryWritePreparedFramesWhole: a socket with room takes the frames at
// once; nothing is held.
func TestTryWritePreparedFramesWhole(t *testing.T) {
	c, a, _ := tryPair(t, nil)
	frames, payloads := tryFrames(t, 10, 100)
	n, held, err := c.tryWritePreparedFrames(frames)
	if err != nil || held || n != len(frames) {
		t.Fatalf("n %d of %d, held %v, %v", n, len(frames), held, err)
	}
	readFrames(t, a, payloads)
	// The write lock is free: an ordinary write goes through.
	if err := c.WritePreparedFrames(context.Background(), frames); err != nil {
		t.Fatal(err)
	}
	readFrames(t, a, payloads)
}

// TestTryWritePreparedFramesAllocs: a write that never waits allocates
// nothing (a fan-out makes one per delivery).
func TestTryWritePreparedFramesAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector; make test runs this test without -race")
	}
	c, a, _ := tryPair(t, nil)
	frames, _ := tryFrames(t, 1, 300)
	go io.Copy(io.Discard, a)
	allocs := testing.AllocsPerRun(1000, func() {
		if n, held, err := c.tryWritePreparedFrames(frames); err != nil || held || n != len(frames) {
			t.Fatalf("n %d of %d, held %v, %v", n, len(frames), held, err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%.2f allocations per write, want 0", allocs)
	}
}

// TestTryWritePreparedFramesFull: on a socket whose peer reads nothing the
// tries fill it, one of them part way (held: the write lock stays taken),
// then they write nothing; finishPreparedFrames writes the rest once the
// peer reads, and every frame arrives whole and in order.
func TestTryWritePreparedFramesFull(t *testing.T) {
	c, a, _ := tryPair(t, nil)
	frames, payloads := tryFrames(t, 64, 1000)
	var all [][]byte
	var finish func() error
	for tries := 0; finish == nil; tries++ {
		if tries > 100000 {
			t.Fatal("the socket never filled")
		}
		n, held, err := c.tryWritePreparedFrames(frames)
		switch {
		case err != nil:
			t.Fatal(err)
		case held:
			rest := frames[n:]
			finish = func() error { return c.finishPreparedFrames(context.Background(), rest) }
			all = append(all, payloads...)
		case n == len(frames):
			all = append(all, payloads...)
		case n == 0:
			// Full exactly at the end of a try (rare): the ordinary
			// write waits.
			finish = func() error { return c.WritePreparedFrames(context.Background(), frames) }
			all = append(all, payloads...)
		default:
			t.Fatalf("part written (%d of %d) but not held", n, len(frames))
		}
	}
	done := make(chan error, 1)
	go func() { done <- finish() }()
	readFrames(t, a, all)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Free again: a try writes, an ordinary write too.
	if n, held, err := c.tryWritePreparedFrames(frames); err != nil || held || n != len(frames) {
		t.Fatalf("after the finish: n %d of %d, held %v, %v", n, len(frames), held, err)
	}
	readFrames(t, a, payloads)
}

// TestTryWritePreparedFramesNothingHappens: a try that cannot write at
// once changes nothing: it reports 0 and the frames go the ordinary way.
func TestTryWritePreparedFramesNothingHappens(t *testing.T) {
	c, a, _ := tryPair(t, nil)
	frames, payloads := tryFrames(t, 3, 10)
	c.wmu.Lock() // another writer holds the lock
	n, held, err := c.tryWritePreparedFrames(frames)
	c.wmu.Unlock()
	if n != 0 || held || err != nil {
		t.Fatalf("lock taken: n %d, held %v, %v", n, held, err)
	}
	// Buffered frames must go first.
	if err := c.BufferMessage(OpText, payloads[0]); err != nil {
		t.Fatal(err)
	}
	if n, held, err := c.tryWritePreparedFrames(frames); n != 0 || held || err != nil {
		t.Fatalf("frames buffered: n %d, held %v, %v", n, held, err)
	}
	if err := c.WritePreparedFrames(context.Background(), frames); err != nil {
		t.Fatal(err)
	}
	readFrames(t, a, append([][]byte{payloads[0]}, payloads...))
	c.CloseNow()
	if _, _, err := c.tryWritePreparedFrames(frames); err == nil {
		t.Fatal("closed: no error")
	}
}
