package ws

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// budgetServer accepts connections on a loopback listener with opts and runs
// handle on each; it returns the address.
func budgetServer(t *testing.T, opts *AcceptOptions, handle func(*Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, _, err := UpgradeConn(nc, opts)
				if err != nil {
					nc.Close()
					return
				}
				defer c.CloseNow()
				handle(c)
			}()
		}
	}()
	return "ws://" + ln.Addr().String() + "/"
}

// closeCode sends msg on a new compressing connection and returns the code
// of the close frame the server answers with.
func closeCode(t *testing.T, url string, msg []byte) StatusCode {
	return answer(t, url, func(ctx context.Context, c *Conn) error { return c.WriteMessage(ctx, BinaryMessage, msg) })
}

// answer dials a compressing connection, sends on it with send and returns
// the code of the close frame the server answers with (0 when there is
// none, after reporting the error).
func answer(t *testing.T, url string, send func(context.Context, *Conn) error) StatusCode {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := Dial(ctx, url, &DialOptions{EnableCompression: true, MaxMessageSize: -1})
	if err != nil {
		t.Error(err)
		return 0
	}
	defer c.CloseNow()
	if !c.Compressed() {
		t.Error("permessage-deflate not negotiated")
	}
	if err := send(ctx, c); err != nil {
		t.Error(err)
		return 0
	}
	_, _, err = c.ReadMessage(ctx)
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	t.Errorf("read: %v", err)
	return 0
}

// answers runs n answers at once and counts their close codes; any code but
// 1007, 1009 and 1013 is an error.
func answers(t *testing.T, n int, answer func() StatusCode) map[StatusCode]int {
	codes := make(chan StatusCode, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- answer()
		}()
	}
	wg.Wait()
	close(codes)
	count := map[StatusCode]int{}
	for code := range codes {
		if code != StatusMessageTooBig && code != StatusTryAgainLater && code != StatusInvalidFramePayloadData {
			t.Errorf("close code %d, want 1007, 1009 or 1013", code)
		}
		count[code]++
	}
	return count
}

// TestBudgetDeflateBombs sends many small compressed messages that inflate
// past the message limit, on many connections at once, to servers sharing a
// Budget smaller than their limits together. Each bomb is measured before
// it is inflated (startInflate), so every one is answered 1009 (too big),
// none 1013, and the Budget is never touched: their compressed bytes are
// below BudgetFree and their inflated bytes are never held.
func TestBudgetDeflateBombs(t *testing.T) {
	const (
		limit = 1 << 20
		conns = 24
	)
	budget := NewBudget(4 << 20) // 4 messages of the limit, for 24 connections
	url := budgetServer(t, &AcceptOptions{EnableCompression: true, MaxMessageSize: limit, Budget: budget}, func(c *Conn) {
		for {
			if _, _, err := c.NextMessage(context.Background()); err != nil {
				return
			}
		}
	})
	// 8 MiB of zeros, about 8 KB compressed: compressed once, not by each of
	// the 24 clients (under the race detector on a loaded machine, 24
	// compressions of 8 MiB at once outlasted answer's 20 s).
	bomb := clientWire(t, OpBinary, make([]byte, 8<<20))
	n := answers(t, conns, func() StatusCode {
		return answer(t, url, func(_ context.Context, c *Conn) error {
			_, err := c.NetConn().Write(bomb)
			return err
		})
	})
	if n[StatusMessageTooBig] != conns || budget.Refused() != 0 || budget.peak.Load() != 0 {
		t.Errorf("answers %v, Refused %d, peak %d: want %d × 1009 and the Budget untouched", n, budget.Refused(), budget.peak.Load(), conns)
	}
	waitInUse(t, budget, 0)
}

// TestBudgetBombsAnswered1009 is the deflate-bomb attack in small: 100 connections
// at once each send a deflate bomb (5 MiB of zeros, 5 KB compressed, for a
// limit of 4 MiB), to servers sharing a Budget of 4 × the limit (100 × the
// limit would be 400 MiB). Every one is answered 1009, none 1013, and the
// heap grows by what the connections hold anyway (buffers, inflaters,
// stacks), not by the bombs: before bombs were measured, most were answered
// 1013 and the heap grew by the Budget.
func TestBudgetBombsAnswered1009(t *testing.T) {
	const (
		limit = 4 << 20
		conns = 100
		slack = 12 << 20 // 100 server and 100 client connections, and the garbage collector's lag: less than the Budget
	)
	budget := NewBudget(4 * limit)
	url := budgetServer(t, &AcceptOptions{EnableCompression: true, MaxMessageSize: limit, Budget: budget}, func(c *Conn) {
		for {
			if _, _, err := c.NextMessage(context.Background()); err != nil {
				return
			}
		}
	})
	wire := clientWire(t, OpBinary, make([]byte, limit+limit/4))
	grown, n := rawAnswers(t, url, conns, wire)
	t.Logf("%v; heap grew by %d MiB at most, Budget %d MiB", n, grown>>20, budget.Limit()>>20)
	if n[StatusMessageTooBig] != conns || budget.Refused() != 0 || budget.peak.Load() != 0 {
		t.Errorf("answers %v, Refused %d, peak %d: want %d × 1009 and the Budget untouched", n, budget.Refused(), budget.peak.Load(), conns)
	}
	if !raceEnabled && grown > slack {
		t.Errorf("heap grew by %d MiB for %d bombs", grown>>20, conns)
	}
	waitInUse(t, budget, 0)
}

// clientWire returns the frame a client sends for payload: compressed
// without context takeover, masked.
func clientWire(t *testing.T, op Opcode, payload []byte) []byte {
	t.Helper()
	cp := NewProtocol(Config{Role: RoleClient, Deflate: &DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}})
	wire, err := cp.AppendMessage(nil, op, payload)
	if err != nil {
		t.Fatal(err)
	}
	return wire
}

// rawAnswers sends wire as it is on n connections at once, so that the
// clients cost nothing, and returns how far the heap in use grew above its
// level before at most (sampled every 2 ms) and the close codes answered.
func rawAnswers(t *testing.T, url string, n int, wire []byte) (int64, map[StatusCode]int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, uint64(0)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	codes := answers(t, n, func() StatusCode {
		return answer(t, url, func(_ context.Context, c *Conn) error {
			_, err := c.NetConn().Write(wire) // masked and compressed once, for all
			return err
		})
	})
	close(stop)
	<-sampled
	return int64(peak) - int64(base), codes
}

// TestBudgetHeldUntilNextRead checks when a message's charge ends: the
// server holds each message it read (it does not read again), so once the
// Budget is taken by those, the next message is refused with 1013 at once,
// and the charges come back when the holders read on.
func TestBudgetHeldUntilNextRead(t *testing.T) {
	const size = 1 << 20
	budget := NewBudget(2*size + size/2) // room for two held messages
	release := make(chan struct{})
	read := make(chan struct{}, 8)
	url := budgetServer(t, &AcceptOptions{EnableCompression: true, MaxMessageSize: 4 * size, Budget: budget}, func(c *Conn) {
		if _, msg, err := c.NextMessage(context.Background()); err != nil || len(msg) != size {
			return
		}
		read <- struct{}{}
		<-release // hold the message
		c.NextMessage(context.Background())
	})
	msg := bytes.Repeat([]byte("ovbus "), size/6+1)[:size]
	var holders []*Conn
	for range 2 {
		c := dialT(t, url, &DialOptions{EnableCompression: true})
		if err := c.WriteMessage(context.Background(), BinaryMessage, msg); err != nil {
			t.Fatal(err)
		}
		<-read
		holders = append(holders, c)
	}
	if got := budget.InUse(); got != 2*size {
		t.Errorf("InUse %d with two messages held, want %d", got, 2*size)
	}
	if code := closeCode(t, url, msg); code != StatusTryAgainLater {
		t.Errorf("third message: close code %d, want 1013", code)
	}
	if budget.Refused() != 1 {
		t.Errorf("Refused %d, want 1", budget.Refused())
	}
	close(release)
	for _, c := range holders {
		c.CloseNow()
	}
	waitInUse(t, budget, 0)
}

func waitInUse(t *testing.T, b *Budget, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.InUse() != want {
		if time.Now().After(deadline) {
			t.Fatalf("InUse %d, want %d", b.InUse(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// retainedBytes is what the Conn holds in buffers between reads: the receive
// buffer, NextMessage's buffer, the encode buffer when it keeps one, and
// the deflate state's buffers, inflater and compressor.
func (c *Conn) retainedBytes() int {
	n := cap(c.p.buf) + cap(c.message()) + cap(c.pendingInput())
	if c.wbufp != nil {
		n += cap(c.wbuf)
	}
	if d := c.p.fl; d != nil {
		n += cap(d.zbuf) + cap(d.dict) + cap(d.cbuf)
		if d.out != nil {
			n += cap(*d.out)
		}
		if d.r != nil {
			n += 44 << 10 // compress/flate's decompressor, about
		}
		if d.w != nil {
			n += 600 << 10 // klauspost's compressor, about
		}
	}
	return n
}

// TestIdleAfterLargeMessage: after a large message (683 KiB), a
// connection read with NextMessage holds no more than it held when
// idle before it (it may hold less: the small message buffer is made again
// by the next message), plain and compressed, with and without the client's
// context takeover.
func TestIdleAfterLargeMessage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		compress bool
		takeover bool
	}{{"plain", false, false}, {"deflate", true, false}, {"deflate_takeover", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			conns := make(chan *Conn, 1)
			done := make(chan struct{})
			url := budgetServer(t, &AcceptOptions{EnableCompression: tc.compress, AllowClientContextTakeover: tc.takeover}, func(c *Conn) {
				conns <- c
				<-done
			})
			defer close(done)
			cl := dialT(t, url, &DialOptions{EnableCompression: tc.compress})
			sv := <-conns
			// idle reads one message, then waits for the next until a short
			// deadline: the state a server's connection sits in while idle.
			idle := func(msg []byte) int {
				t.Helper()
				if err := cl.WriteMessage(context.Background(), TextMessage, msg); err != nil {
					t.Fatal(err)
				}
				_, got, err := sv.NextMessage(context.Background())
				if err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("read %d bytes, %v", len(got), err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				defer cancel()
				if _, _, err := sv.NextMessage(ctx); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("idle read: %v", err)
				}
				return sv.retainedBytes()
			}
			// A typical bus message, long enough to be compressed (128 bytes).
			small := []byte(`{"type": "speak", "data": {"utterance": "hello, this is a message of the usual size", "lang": "en-us"}, "context": {"source": "audio", "destination": ["skills"]}}`)
			before := idle(small)
			large := bytes.Repeat([]byte(`{"type": "gui.page.upload", "data": "xyzzy"} `), 683<<10/45)
			after := idle(large)
			again := idle(small)
			t.Logf("idle %d bytes, after %d bytes of message %d, after a small one %d", before, len(large), after, again)
			if after > before || again != before {
				t.Errorf("retained %d bytes after a large message, %d after a small one, %d when idle before", after, again, before)
			}
			if limit := 16 << 10; !tc.takeover && before > limit || before > limit+64<<10 {
				t.Errorf("an idle connection holds %d bytes", before)
			}
			if d := sv.p.fl; d != nil && cap(d.zbuf) != 0 {
				t.Errorf("an idle connection holds a compressed-input buffer of %d bytes", cap(d.zbuf))
			}
		})
	}
}

// TestNextMessageAllocs: NextMessage reads small messages, and messages of
// the pooled sizes, without allocating, with a Budget set.
func TestNextMessageAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector; make test runs this test without -race")
	}
	url := echoServer(t, nil)
	c := dialT(t, url, &DialOptions{Budget: NewBudget(64 << 20)})
	ctx := context.Background()
	for _, size := range []int{200, 200 << 10} {
		msg := bytes.Repeat([]byte("x"), size)
		c.WriteMessage(ctx, TextMessage, msg)
		c.NextMessage(ctx) // warm the pools
		allocs := testing.AllocsPerRun(100, func() {
			c.WriteMessage(ctx, TextMessage, msg)
			if _, got, err := c.NextMessage(ctx); err != nil || len(got) != size {
				t.Fatalf("read %d bytes: %v", len(got), err)
			}
		})
		if allocs > 0 {
			t.Errorf("%.1f allocations per echo of %d bytes, want 0", allocs, size)
		}
	}
}

// TestNextMessageLarge: messages around and past the largest pooled buffer,
// plain and compressed, in one frame and in many, come out of NextMessage
// whole, and their charges come back.
func TestNextMessageLarge(t *testing.T) {
	for _, compress := range []bool{false, true} {
		budget := NewBudget(64 << 20)
		url := budgetServer(t, &AcceptOptions{EnableCompression: compress, Budget: budget}, func(c *Conn) {
			for {
				op, msg, err := c.NextMessage(context.Background())
				if err != nil {
					return
				}
				if err := c.WriteMessage(context.Background(), op, msg); err != nil {
					return
				}
			}
		})
		cl := dialT(t, url, &DialOptions{EnableCompression: compress, MaxMessageSize: -1})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(7, 8))
		for _, size := range []int{maxPooledBuf - 1, maxPooledBuf, maxPooledBuf + 1, 5<<20 + 123} {
			msg := make([]byte, size)
			for i := range msg {
				msg[i] = "ovbus message "[rng.IntN(14)]
			}
			for _, fragmented := range []bool{false, true} {
				if fragmented {
					w, err := cl.Writer(ctx, BinaryMessage)
					if err != nil {
						t.Fatal(err)
					}
					for rest := msg; len(rest) > 0; {
						n := min(len(rest), 1+rng.IntN(200<<10))
						w.Write(rest[:n])
						rest = rest[n:]
					}
					if err := w.Close(); err != nil {
						t.Fatal(err)
					}
				} else if err := cl.WriteMessage(ctx, BinaryMessage, msg); err != nil {
					t.Fatal(err)
				}
				_, got, err := cl.ReadMessage(ctx)
				if err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("compress %v, %d bytes, fragmented %v: got %d bytes, %v", compress, size, fragmented, len(got), err)
				}
			}
		}
		cl.Close(StatusNormalClosure, "")
		waitInUse(t, budget, 0)
	}
}

// TestBudgetBoundsHeap: messages of the limit that fail only at their end
// (compressed text, its last byte invalid UTF-8: measured, they fit, so they
// are inflated and charged), on many connections at once, sent as raw
// frames (rawAnswers), keep the process's heap within the Budget plus what
// the connections hold anyway. A message that fails
// must give its memory back before its connection lingers (a regression:
// the charge went at once, the buffers a second later, and the heap grew to
// four times the Budget).
func TestBudgetBoundsHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector: the pieces of messages become garbage; make test runs this test without -race")
	}
	const (
		limit = 4 << 20
		conns = 50
		slack = 24 << 20 // per connection: buffers, inflater, stacks, and the garbage collector's lag
	)
	budget := NewBudget(16 << 20)
	url := budgetServer(t, &AcceptOptions{EnableCompression: true, MaxMessageSize: limit, Budget: budget}, func(c *Conn) {
		for {
			if _, _, err := c.NextMessage(context.Background()); err != nil {
				return
			}
		}
	})
	text := make([]byte, limit)
	text[limit-1] = 0xff
	wire := clientWire(t, OpText, text)
	grown, n := rawAnswers(t, url, conns, wire)
	t.Logf("%v; heap grew by %d MiB at most, Budget %d MiB", n, grown>>20, budget.Limit()>>20)
	if n[StatusInvalidFramePayloadData]+n[StatusTryAgainLater] != conns || budget.Refused() != uint64(n[StatusTryAgainLater]) {
		t.Errorf("answers %v, Refused %d: want 1007 or 1013 for all %d", n, budget.Refused(), conns)
	}
	if grown > budget.Limit()+slack {
		t.Errorf("heap grew by %d MiB with a Budget of %d MiB", grown>>20, budget.Limit()>>20)
	}
	waitInUse(t, budget, 0)
}

// TestBudgetPassesFullMessage: with a Budget of three times the limit (the
// bus's default past 80 MiB), one message of the limit that does not
// compress at all passes, compressed: its compressed bytes and pieces, then
// its pieces and their join, take twice the limit at most.
func TestBudgetPassesFullMessage(t *testing.T) {
	const limit = 8 << 20
	budget := NewBudget(3 * limit)
	sizes := make(chan int, 1)
	url := budgetServer(t, &AcceptOptions{EnableCompression: true, MaxMessageSize: limit, MaxFrameSize: -1, Budget: budget}, func(c *Conn) {
		_, msg, err := c.NextMessage(context.Background())
		if err != nil {
			t.Error(err)
		}
		sizes <- len(msg)
	})
	msg := make([]byte, limit)
	rand.NewChaCha8([32]byte{1}).Read(msg)
	answer(t, url, func(ctx context.Context, c *Conn) error { return c.WriteMessage(ctx, BinaryMessage, msg) })
	if n := <-sizes; n != limit {
		t.Fatalf("read %d bytes, want %d", n, limit)
	}
	if p := budget.peak.Load(); p > 2*limit+limit/8 || budget.Refused() != 0 {
		t.Errorf("peak %d MiB for a message of %d MiB, %d refused", p>>20, limit>>20, budget.Refused())
	}
}

// TestReaderCompressedLimit: a streamed read (Reader) of a compressed
// message measures it too: a bomb fails Reader itself with 1009, before any
// byte is handed out and without a Budget charge for its inflated bytes; a
// large message that fits streams whole.
func TestReaderCompressedLimit(t *testing.T) {
	const limit = 2 << 20
	budget := NewBudget(4 * limit)
	type read struct {
		n   int
		err error
	}
	reads := make(chan read, 2)
	url := budgetServer(t, &AcceptOptions{EnableCompression: true, MaxMessageSize: limit, Budget: budget}, func(c *Conn) {
		for {
			_, r, err := c.Reader(context.Background())
			if err != nil {
				reads <- read{err: err}
				return
			}
			n, err := io.Copy(io.Discard, r)
			reads <- read{int(n), err}
		}
	})
	msg := variedPayload(limit)
	c := dialT(t, url, &DialOptions{EnableCompression: true})
	if err := c.WriteMessage(context.Background(), TextMessage, msg); err != nil {
		t.Fatal(err)
	}
	if r := <-reads; r.err != nil || r.n != len(msg) {
		t.Fatalf("streamed %d bytes of %d: %v", r.n, len(msg), r.err)
	}
	if code := closeCode(t, url, make([]byte, limit+1)); code != StatusMessageTooBig {
		t.Errorf("bomb: close code %d, want 1009", code)
	}
	var pe *ProtocolError
	if r := <-reads; !errors.As(r.err, &pe) || pe.Code != StatusMessageTooBig || r.n != 0 {
		t.Errorf("bomb: Reader returned %v after %d bytes, want 1009 before any", r.err, r.n)
	}
	if budget.peak.Load() > limit {
		t.Errorf("Budget peak %d: the bomb's inflated bytes were charged", budget.peak.Load())
	}
	c.CloseNow()
	waitInUse(t, budget, 0)
}

// TestBudgetOnDrained: the hook runs when the bytes held fall to low after
// at least high bytes were charged since its last call, with those bytes; a
// burst that charged less, or a fall that stops above low, calls nothing.
func TestBudgetOnDrained(t *testing.T) {
	b := NewBudget(0)
	var calls []int64
	b.OnDrained(100, 10, func(c int64) { calls = append(calls, c) })
	b.acquire(60)
	b.acquire(30)
	b.release(90) // 90 charged < high: no call
	b.acquire(70)
	b.acquire(50)
	b.release(50) // 70 held: above low
	b.acquire(40)
	b.release(105) // 5 held, 250 charged: the burst is over
	b.release(5)   // nothing charged since
	if c := b.Charged(); c != 250 {
		t.Fatalf("Charged %d, want 250", c)
	}
	if len(calls) != 1 || calls[0] != 250 {
		t.Fatalf("calls %v, want one with 250 bytes", calls)
	}
	b.acquire(200)
	b.release(200)
	if len(calls) != 2 || calls[1] != 200 {
		t.Fatalf("calls %v, want a second with 200", calls)
	}
	b.OnDrained(0, 0, nil)
	b.acquire(200)
	b.release(200)
	if len(calls) != 2 {
		t.Fatalf("calls %v after the hook was removed", calls)
	}
}

// TestBudgetOnDrainedConcurrent: readers that release at the same moment
// call the hook once per burst, never twice for the same bytes.
func TestBudgetOnDrainedConcurrent(t *testing.T) {
	b := NewBudget(0)
	var calls atomic.Int64
	b.OnDrained(1000, 0, func(c int64) {
		if c != 1600 {
			t.Errorf("called with %d bytes charged, want the burst's 1600", c)
		}
		calls.Add(1)
	})
	for round := range 50 {
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			ready.Add(1)
			done.Add(1)
			b.acquire(200)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				b.release(200)
			}()
		}
		ready.Wait()
		close(start)
		done.Wait()
		if got := calls.Load(); got != int64(round+1) {
			t.Fatalf("after %d bursts of 1600 bytes, %d calls", round+1, got)
		}
	}
}
