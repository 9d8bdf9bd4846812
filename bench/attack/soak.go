//go:build linux

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func init() {
	register(&scenario{
		name:    "soak",
		doc:     "mixed load (senders, readers, churn, slow clients, bad frames) for a duration, RSS sampled",
		target:  "RSS flat and nothing lost for the healthy clients",
		timeout: 0, // none: the soak stops itself after -duration plus two minutes
		setup:   setupSoak,
	})
}

// The soak's traffic. Senders number their messages; every healthy reader
// checks that it receives each sender's numbers without a gap.
func setupSoak(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	dur := fs.Duration("duration", 30*time.Minute, "how long the load runs")
	every := fs.Duration("sample", 10*time.Second, "RSS sampling interval")
	senders := fs.Int("senders", 4, "healthy senders")
	readers := fs.Int("readers", 8, "healthy readers (half of them with deflate)")
	rate := fs.Int("rate", 50, "messages per second per sender")
	size := fs.Int("size", 1024, "bytes per message")
	churn := fs.Int("churn", 20, "connect / greeting / disconnect cycles per second")
	slow := fs.Int("slow", 4, "never-reading clients alive at a time (each replaced after -slow-life)")
	slowLife := fs.Duration("slow-life", 60*time.Second, "how long a never-reading client lives")
	bad := fs.Duration("bad-every", 500*time.Millisecond, "one bad frame or handshake this often")
	return func(ctx context.Context, e *env, r *result) error {
		ctx, cancel := context.WithTimeout(ctx, *dur+2*time.Minute)
		defer cancel()
		s, err := serve(ctx, e, r, "soak", map[string]any{"max_msg_size": 1})
		if err != nil {
			return err
		}
		load, stop := context.WithTimeout(ctx, *dur)
		defer stop()

		// Healthy readers.
		type reader struct {
			c      *conn
			mu     sync.Mutex
			next   map[int]int // sender → next number expected
			lost   int
			frames int
			done   chan struct{}
			end    string
		}
		var rs []*reader
		for i := range *readers {
			c, err := dial(ctx, s.addr, s.route, dialOptions{Deflate: i%2 == 1})
			if err != nil {
				return err
			}
			defer c.nc.Close()
			if err := c.readGreeting(10 * time.Second); err != nil {
				return err
			}
			rd := &reader{c: c, next: map[int]int{}, done: make(chan struct{})}
			rs = append(rs, rd)
			go func() {
				defer close(rd.done)
				for {
					f, err := c.readFrame(1 << 20)
					if err != nil {
						rd.end = describeEnd(err)
						return
					}
					if f.Op == opClose {
						rd.end = fmt.Sprintf("close %d", f.closeCode())
						return
					}
					p := f.Payload
					if f.RSV1 {
						if p, err = inflateBytes(p); err != nil {
							rd.end = "inflate: " + err.Error()
							return
						}
					}
					snd, n, ok := soakNumbers(p)
					rd.mu.Lock()
					rd.frames++
					if ok {
						if want, seen := rd.next[snd]; seen && n > want {
							rd.lost += n - want
						}
						rd.next[snd] = n + 1
					}
					rd.mu.Unlock()
				}
			}()
		}

		var wg sync.WaitGroup
		var sentBy = make([]atomic.Int64, *senders)
		var senderErrs, churnErrs errCounts
		for i := range *senders {
			c, err := dial(ctx, s.addr, s.route, dialOptions{})
			if err != nil {
				return err
			}
			defer c.nc.Close()
			echo := startDrainer(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(time.Second / time.Duration(*rate))
				defer t.Stop()
				for n := 0; load.Err() == nil && !echo.ended(); n++ {
					select {
					case <-load.Done():
						return
					case <-t.C:
					}
					head := fmt.Sprintf(`{"type":"soak.msg","data":{"s":%d,"n":%d,"pad":"`, i, n)
					msg := append([]byte(head), bytes.Repeat([]byte("x"), max(*size-len(head)-16, 0))...)
					msg = append(msg, `"},"context":{}}`...)
					if err := c.send(opText, msg, false); err != nil {
						senderErrs.add(err)
						return
					}
					sentBy[i].Store(int64(n + 1))
				}
			}()
		}

		// Churn.
		var cycles atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second / time.Duration(max(*churn, 1)))
			defer t.Stop()
			for load.Err() == nil {
				select {
				case <-load.Done():
					return
				case <-t.C:
				}
				c, err := dial(load, s.addr, s.route, dialOptions{Source: nextSource()})
				if err != nil {
					if load.Err() == nil {
						churnErrs.add(err)
					}
					continue
				}
				c.readGreeting(10 * time.Second)
				c.closeWith(1000)
				cycles.Add(1)
			}
		}()

		// Slow clients: never read, replaced after slowLife.
		var slowOpened atomic.Int64
		for k := range *slow {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if sleepCtx(load, time.Duration(k)**slowLife/time.Duration(*slow)) != nil {
					return
				}
				for load.Err() == nil {
					c, err := dial(load, s.addr, s.route, dialOptions{Deflate: k%2 == 0})
					if err != nil {
						continue
					}
					slowOpened.Add(1)
					sleepCtx(load, *slowLife)
					c.nc.Close()
				}
			}()
		}

		// Bad frames and handshakes.
		var badMu sync.Mutex
		badAnswers := map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(*bad)
			defer t.Stop()
			for i := 0; load.Err() == nil; i++ {
				select {
				case <-load.Done():
					return
				case <-t.C:
				}
				kind, answer := badClient(load, s, i)
				answer = addrPattern.ReplaceAllString(answer, "ADDR")
				badMu.Lock()
				badAnswers[kind+" → "+answer]++
				badMu.Unlock()
			}
		}()

		// Sample RSS, heap and goroutines.
		var rss, heap, gor []sample
		t0 := time.Now()
		snap := func() {
			sn, _ := takeSnapshot(s)
			at := time.Since(t0).Seconds()
			rss = append(rss, sample{at, float64(sn.RSS) / (1 << 20)})
			heap = append(heap, sample{at, float64(sn.HeapInuse) / (1 << 20)})
			gor = append(gor, sample{at, float64(sn.Goroutines)})
		}
		snap()
		tick := time.NewTicker(*every)
		for load.Err() == nil {
			select {
			case <-load.Done():
			case <-tick.C:
				snap()
				e.logf("soak: %.0fs RSS %.1f MiB", time.Since(t0).Seconds(), rss[len(rss)-1].V)
			}
		}
		tick.Stop()
		wg.Wait()
		snap()
		// Let the readers take the last messages, then count what is missing.
		total := 0
		for i := range sentBy {
			total += int(sentBy[i].Load())
		}
		deadline := time.Now().Add(10 * time.Second)
		lost, cutReaders := 0, 0
		for _, rd := range rs {
			for time.Now().Before(deadline) {
				rd.mu.Lock()
				caught := true
				for i := range sentBy {
					if rd.next[i] < int(sentBy[i].Load()) {
						caught = false
					}
				}
				rd.mu.Unlock()
				if caught {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			rd.mu.Lock()
			missing := rd.lost
			for i := range sentBy {
				missing += int(sentBy[i].Load()) - rd.next[i]
			}
			rd.mu.Unlock()
			lost += missing
			select {
			case <-rd.done:
				cutReaders++
				r.note("a healthy reader was cut: %s", rd.end)
			default:
			}
		}
		r.addSeries("RSS MiB", rss)
		r.addSeries("heap in use MiB", heap)
		r.addSeries("goroutines", gor)
		r.fig("duration", dur.Seconds(), "s")
		r.fig("messages sent by the healthy senders", float64(total), "")
		r.fig("healthy readers", float64(len(rs)), "")
		r.fig("messages lost by healthy readers", float64(lost), "")
		r.fig("healthy readers cut", float64(cutReaders), "")
		r.fig("sender errors", float64(senderErrs.count()), "")
		r.fig("churn cycles", float64(cycles.Load()), "")
		r.fig("churn errors", float64(churnErrs.count()), "")
		r.fig("slow clients opened", float64(slowOpened.Load()), "")
		r.text("bad clients → answers", countMap(badAnswers))
		first, last, peak := rss[0].V, rss[len(rss)-1].V, 0.0
		for _, p := range rss {
			peak = max(peak, p.V)
		}
		r.fig("RSS first sample", first, "MiB")
		r.fig("RSS last sample", last, "MiB")
		r.fig("RSS peak", peak, "MiB")
		r.fig("heap in use first", heap[0].V, "MiB")
		r.fig("heap in use last", heap[len(heap)-1].V, "MiB")
		r.fig("goroutines first", gor[0].V, "")
		r.fig("goroutines last", gor[len(gor)-1].V, "")
		r.fig("server WARNING lines", float64(s.warningCount()), "")
		// Flat: the second half's peak no more than 20% (and 8 MiB) over the first half's.
		half := len(rss) / 2
		p1, p2 := 0.0, 0.0
		for i, p := range rss {
			if i < half {
				p1 = max(p1, p.V)
			} else {
				p2 = max(p2, p.V)
			}
		}
		r.fig("RSS peak, first half", p1, "MiB")
		r.fig("RSS peak, second half", p2, "MiB")
		r.note("flat means: the second half's RSS peak at most 20%% and 8 MiB over the first half's")
		r.met(lost == 0 && cutReaders == 0 && p2 <= p1*1.2+8)
		return nil
	}
}

// soakNumbers finds "s":S,"n":N in a soak message.
func soakNumbers(p []byte) (s, n int, ok bool) {
	i := bytes.Index(p, []byte(`"s":`))
	j := bytes.Index(p, []byte(`,"n":`))
	if i < 0 || j < i {
		return 0, 0, false
	}
	k := bytes.IndexByte(p[j+5:], ',')
	if k < 0 {
		return 0, 0, false
	}
	s, err1 := strconv.Atoi(string(p[i+4 : j]))
	n, err2 := strconv.Atoi(string(p[j+5 : j+5+k]))
	return s, n, err1 == nil && err2 == nil
}

// badClient sends the i-th kind of bad input and says what came back.
func badClient(ctx context.Context, s *server, i int) (kind, answer string) {
	kinds := []string{"unmasked frame", "reserved opcode", "invalid UTF-8", "oversize header", "malformed carrier", "garbage handshake"}
	kind = kinds[i%len(kinds)]
	if kind == "garbage handshake" {
		nc, err := dialTCP(ctx, s.addr, dialOptions{Source: nextSource()})
		if err != nil {
			return kind, "connect: " + err.Error()
		}
		defer nc.Close()
		nc.Write([]byte("GET /core HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"))
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 12)
		n, _ := nc.Read(buf)
		return kind, string(bytes.TrimSpace(buf[:n]))
	}
	c, err := dial(ctx, s.addr, s.route, dialOptions{Source: nextSource()})
	if err != nil {
		return kind, "dial: " + err.Error()
	}
	defer c.nc.Close()
	c.readGreeting(5 * time.Second)
	var frame []byte
	switch kind {
	case "unmasked frame":
		frame = []byte{0x81, 0x02, 'h', 'i'}
	case "reserved opcode":
		frame = appendFrame(nil, true, false, 0x3, []byte("x"))
	case "invalid UTF-8":
		frame = appendFrame(nil, true, false, opText, []byte{0xff, 0xfe, 0xfd})
	case "oversize header":
		frame = []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0} // 256 MiB announced
	case "malformed carrier":
		frame = appendFrame(nil, true, false, opText, []byte(`{"type":"soak.bad","data":{},"context":{"session":"x"}}`))
	}
	if _, err := c.nc.Write(frame); err != nil {
		return kind, "write: " + err.Error()
	}
	if kind == "malformed carrier" {
		// The bus drops the frame and keeps the connection (docs/protocol.md §3).
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			f, err := c.readFrame(1 << 16)
			if err != nil {
				return kind, describeEnd(err)
			}
			if bytes.Contains(f.Payload, []byte("ovos.session.rejected")) {
				return kind, "ovos.session.rejected"
			}
		}
	}
	return kind, c.waitClose(5 * time.Second).How
}
