//go:build linux

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The memory attacks: churn, deflate bombs, large messages then idle,
// handshake floods, stalled readers.

func init() {
	register(&scenario{
		name:    "churn",
		doc:     "connect / read the greeting / disconnect, N times, on a quiet bus",
		target:  "heap and goroutines back to their baseline",
		timeout: 30 * time.Minute,
		setup:   setupChurn,
	})
	register(&scenario{
		name:    "bomb",
		doc:     "connections each sending one deflate message that inflates past max_msg_size (item 2)",
		target:  "peak RSS under 300 MB, every connection answered 1009",
		timeout: 10 * time.Minute,
		setup:   setupBomb,
	})
	register(&scenario{
		name:    "large-idle",
		doc:     "connections each send one large message, then idle, against connections that never sent (item 3)",
		target:  "RSS per connection back to the idle figure within a second",
		timeout: 15 * time.Minute,
		setup:   setupLargeIdle,
	})
	register(&scenario{
		name:    "handshake",
		doc:     "connections each sending a huge header line and never finishing the upgrade (item 4)",
		target:  "server RSS under 50 MB",
		timeout: 10 * time.Minute,
		setup:   setupHandshake,
	})
	register(&scenario{
		name:    "stalled",
		doc:     "clients that never read (or read slowly), with and without deflate, and a sender flooding (item 5)",
		target:  "RSS within the configured bounds plus a documented constant",
		timeout: 10 * time.Minute,
		setup:   setupStalled,
	})
}

func setupChurn(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	n := fs.Int("n", 200000, "connect / greeting / disconnect cycles per round")
	rounds := fs.Int("rounds", 3, "rounds of n cycles on the same server, each measured after the next GC: a heap that grows from round to round is a leak, one that stays is retained capacity")
	conc := fs.Int("concurrency", 32, "cycles in flight")
	settle := fs.Duration("settle", 3*time.Second, "wait before each measurement")
	gcWait := fs.Duration("gc-wait", 130*time.Second, "after each round, wait up to this long for the server's next GC (the Go runtime forces one every 2 minutes) and measure again; 0: do not")
	return func(ctx context.Context, e *env, r *result) error {
		s, err := serve(ctx, e, r, "churn", nil)
		if err != nil {
			return err
		}
		sleepCtx(ctx, *settle)
		before, err := takeSnapshot(s)
		if err != nil {
			return err
		}
		// The baseline after a GC too, with /metrics scraped as often as
		// after each round (each scrape leaves garbage and a pooled gzip
		// writer), so that both sides hold the same.
		if *gcWait > 0 {
			gcs := before.m.sum("go_gc_duration_seconds_count")
			if _, ok := waitMetric(ctx, s, *gcWait, func(m metricSet) bool {
				return m.sum("go_gc_duration_seconds_count") > gcs
			}); ok {
				sleepCtx(ctx, 200*time.Millisecond)
				if b, err := takeSnapshot(s); err == nil {
					before = b
				}
			} else {
				r.note("no GC ran within -gc-wait %v before the churn: the baseline includes garbage", *gcWait)
			}
		}
		r.mib("heap in use before", before.HeapInuse)
		r.mib("heap objects before", int64(before.m.sum("go_memstats_heap_alloc_bytes")))
		r.fig("goroutines before", float64(before.Goroutines), "")
		r.mib("RSS before", before.RSS)
		var errs errCounts
		var done atomic.Int64
		var collected snapshot
		gcSeenAll := true
		for round := 1; round <= *rounds; round++ {
			// Round 1 keeps the figure names of a single churn.
			name := func(f string) string {
				if round == 1 {
					return f
				}
				return fmt.Sprintf("round %d: %s", round, f)
			}
			start := time.Now()
			done0 := done.Load()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range *conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(*n) && ctx.Err() == nil {
						c, err := dial(ctx, s.addr, s.route, dialOptions{Source: nextSource()})
						if err != nil {
							errs.add(err)
							continue
						}
						if err := c.readGreeting(10 * time.Second); err != nil {
							errs.add(err)
						}
						c.closeWith(1000)
						if k := done.Add(1); k%20000 == 0 {
							e.logf("churn: %d cycles", k)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			sleepCtx(ctx, *settle)
			after, err := takeSnapshot(s)
			if err != nil {
				return err
			}
			// Garbage counts in the heap until a GC runs; wait for one so
			// that what is left is what the server keeps.
			collected = after
			gcSeen := false
			if *gcWait > 0 {
				gcs := after.m.sum("go_gc_duration_seconds_count")
				if _, gcSeen = waitMetric(ctx, s, *gcWait, func(m metricSet) bool {
					return m.sum("go_gc_duration_seconds_count") > gcs
				}); gcSeen {
					sleepCtx(ctx, 200*time.Millisecond)
					if c, err := takeSnapshot(s); err == nil {
						collected = c
					}
				}
			}
			gcSeenAll = gcSeenAll && gcSeen
			r.fig(name("cycles"), float64(done.Load()-done0), "")
			r.fig(name("cycles per second"), float64(done.Load()-done0)/elapsed.Seconds(), "/s")
			r.mib(name("heap in use after"), after.HeapInuse)
			r.fig(name("goroutines after"), float64(after.Goroutines), "")
			r.mib(name("RSS after"), after.RSS)
			r.fig(name("connections after"), float64(after.Conns), "")
			if gcSeen {
				r.mib(name("heap in use after the next GC"), collected.HeapInuse)
				r.mib(name("heap objects after the next GC"), int64(collected.m.sum("go_memstats_heap_alloc_bytes")))
				r.fig(name("goroutines after the next GC"), float64(collected.Goroutines), "")
				r.mib(name("RSS after the next GC"), collected.RSS)
			} else if *gcWait > 0 {
				r.note("round %d: no GC ran within -gc-wait %v: its figures after the churn include garbage", round, *gcWait)
			}
		}
		// The next publish after the churn walks whatever the hub kept.
		pub, perr := publishLatency(ctx, s)

		r.fig("cycle errors", float64(errs.count()), "")
		if errs.count() > 0 {
			r.text("cycle errors by kind", errs.String())
		}
		if perr != nil {
			r.text("first publish after the churn", perr.Error())
		} else {
			r.fig("first publish after the churn (send to echo)", ms(pub), "ms")
		}
		r.note("%d rounds of %d cycles on one server; \"before\": once the server's GC count rose after its start; \"after\": %v after a round's last cycle; \"after the next GC\": once the server's GC count rose (the target is judged on the last round's, when there is one)", *rounds, *n, *settle)
		r.met(collected.HeapInuse <= before.HeapInuse+before.HeapInuse/2+(1<<20) && collected.Goroutines <= before.Goroutines+2 && (gcSeenAll || *gcWait == 0))
		return nil
	}
}

// publishLatency connects one client, sends one message and times its echo.
func publishLatency(ctx context.Context, s *server) (time.Duration, error) {
	c, err := dial(ctx, s.addr, s.route, dialOptions{})
	if err != nil {
		return 0, err
	}
	defer c.closeWith(1000)
	if err := c.readGreeting(10 * time.Second); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := c.send(opText, []byte(`{"type":"attack.ping","data":{},"context":{}}`), false); err != nil {
		return 0, err
	}
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.readFrame(1 << 16)
		if err != nil {
			return 0, err
		}
		if strings.Contains(string(f.Payload), "attack.ping") {
			return time.Since(start), nil
		}
	}
}

func setupBomb(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	conns := fs.Int("conns", 100, "connections, each sending one bomb")
	inflated := fs.Int("inflated-mib", 26, "MiB each message inflates to (zeros); the bus's max_msg_size is 25")
	return func(ctx context.Context, e *env, r *result) error {
		bomb := deflateZeros(int64(*inflated) << 20)
		s, err := serve(ctx, e, r, "bomb", nil)
		if err != nil {
			return err
		}
		var errs errCounts
		cs := connectMany(ctx, s, *conns, 32, dialOptions{Deflate: true}, false, &errs)
		defer closeAll(cs)
		for _, c := range cs {
			if !c.deflate {
				return fmt.Errorf("the server did not accept permessage-deflate")
			}
		}
		base, _, _ := s.procStatus()
		s.watch.resetPeak()
		var mu sync.Mutex
		how := map[string]int{}
		start := time.Now()
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var o outcome
				if err := c.sendCompressed(opBinary, bomb); err != nil {
					o.How = "send failed: " + describeEnd(err)
				} else {
					o = c.waitClose(60 * time.Second)
				}
				mu.Lock()
				how[o.How]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		answered := time.Since(start)
		_, hwm, herr := s.procStatus()
		peak := s.watch.peakRSS()
		killed := s.watch.wasKilled()

		r.fig("connections", float64(len(cs)), "")
		r.fig("connect errors", float64(errs.count()), "")
		r.fig("compressed bytes per message", float64(len(bomb)), "B")
		r.mib("inflated size per message", int64(*inflated)<<20)
		r.mib("RSS before the bombs", base)
		if herr == nil {
			r.mib("peak RSS (VmHWM)", hwm)
		}
		r.mib("peak RSS (sampled every 100 ms)", peak)
		r.text("answers", countMap(how))
		r.fig("time until every connection was answered", answered.Seconds(), "s")
		if killed {
			r.note("the server passed the harness's RSS limit (%d MiB) and was killed: the peak is at least that", e.rssLimit>>20)
		}
		peakAll := max(hwm, peak)
		r.met(!killed && peakAll < 300e6 && how["close 1009"] == len(cs) && len(cs) == *conns)
		return nil
	}
}

func setupLargeIdle(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	conns := fs.Int("conns", 1000, "connections")
	size := fs.Int("size-kib", 683, "KiB of the one message each connection sends")
	senders := fs.Int("senders", 16, "messages in flight at once: each sender waits for the bus's not-allowed notice before the next (0: no wait, as many in flight as the sockets take, which may pass max_inflight_bytes and be answered 1013)")
	wait := fs.Duration("wait", time.Second, "idle time before measuring, after the server has read every message")
	variants := fs.String("variants", "plain,deflate", "comma-separated: plain, deflate")
	return func(ctx context.Context, e *env, r *result) error {
		// The messages are refused by a permission rule after being read
		// whole, so that nobody receives them: otherwise each would be
		// relayed to all the other connections.
		const token = "attack-large-idle-token"
		conf := map[string]any{"auth": map[string]any{"tokens": map[string]any{
			token: map[string]any{"name": "attack", "emit": []string{"attack.allowed"}}}}}
		msg := padMessage("attack.large", 0, *size<<10, false)
		r.fig("message size", float64(len(msg)), "B")
		ok := true
		for _, v := range strings.Split(*variants, ",") {
			deflate := v == "deflate"
			if !deflate && v != "plain" {
				return fmt.Errorf("unknown variant %q", v)
			}
			if deflate {
				r.fig("deflate: bytes on the wire per message", float64(len(deflateBytes(msg))), "B")
			}
			idle, err := idleCost(ctx, e, r, v+"-idle", conf, *conns, dialOptions{Deflate: deflate, Token: token}, nil, *wait, *senders)
			if err != nil {
				return err
			}
			large, err := idleCost(ctx, e, r, v+"-large", conf, *conns, dialOptions{Deflate: deflate, Token: token}, msg, *wait, *senders)
			if err != nil {
				return err
			}
			r.fig(v+": RSS per idle connection that never sent", idle, "KiB")
			r.fig(v+": RSS per idle connection after one large message", large, "KiB")
			ok = ok && large <= idle*1.25+2
		}
		r.note("per connection = (RSS with the connections − RSS of the fresh server) / connections; each figure from its own server")
		r.met(ok)
		return nil
	}
}

// idleCost starts a server, connects n clients, has each send msg (unless
// nil), waits until the server has read them all, waits wait, and returns
// the RSS per connection in KiB.
func idleCost(ctx context.Context, e *env, r *result, label string, conf map[string]any, n int, o dialOptions, msg []byte, wait time.Duration, senders int) (float64, error) {
	s, err := serve(ctx, e, r, label, conf)
	if err != nil {
		return 0, err
	}
	defer s.stop(10 * time.Second)
	sleepCtx(ctx, 500*time.Millisecond)
	base, err := takeSnapshot(s)
	if err != nil {
		return 0, err
	}
	var errs errCounts
	cs := connectMany(ctx, s, n, 32, o, false, &errs)
	defer closeAll(cs)
	if errs.count() > 0 {
		r.text(label+": connect errors", errs.String())
	}
	if msg != nil {
		deflated := deflateBytes(msg)
		var next atomic.Int64
		var wg sync.WaitGroup
		goroutines := senders
		if goroutines == 0 {
			goroutines = 16
		}
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(len(cs)); i = next.Add(1) - 1 {
					send := func() error { return cs[i].send(opText, msg, false) }
					if cs[i].deflate {
						send = func() error { return cs[i].sendCompressed(opText, deflated) }
					}
					if err := send(); err != nil {
						errs.add(err)
						continue
					}
					if senders > 0 {
						if err := cs[i].waitNotice(30 * time.Second); err != nil {
							errs.add(err)
						}
					}
				}
			}()
		}
		wg.Wait()
		want := float64(len(cs))
		if _, ok := waitMetric(ctx, s, 60*time.Second, func(m metricSet) bool {
			return m.sum(`ovbus_rejected_total{reason="permission"}`) >= want
		}); !ok {
			r.note("%s: the server had not read every message after 60 s", label)
		}
	}
	sleepCtx(ctx, wait)
	after, err := takeSnapshot(s)
	if err != nil {
		return 0, err
	}
	r.mib(label+": RSS with the connections", after.RSS)
	r.mib(label+": heap in use with the connections", after.HeapInuse)
	// Where the RSS is: live objects (and garbage not yet collected), free
	// heap pages the runtime has not returned to the OS yet, and what it
	// returned (not resident).
	r.mib(label+": heap objects (allocated, incl. pooled and uncollected)", int64(after.m.sum("go_memstats_heap_alloc_bytes")))
	r.mib(label+": heap free, not returned to the OS", int64(after.m.sum("go_memstats_heap_idle_bytes")-after.m.sum("go_memstats_heap_released_bytes")))
	r.mib(label+": heap returned to the OS", int64(after.m.sum("go_memstats_heap_released_bytes")))
	r.mib(label+": goroutine stacks", int64(after.m.sum("go_memstats_stack_inuse_bytes")))
	r.fig(label+": GC cycles so far", after.m.sum("go_gc_duration_seconds_count"), "")
	if msg != nil {
		r.text(label+": closes by reason", countMapF(after.m.byLabel("ovbus_closes_total")))
		r.fig(label+": memory releases after the burst (ovbus_memory_releases_total)", after.m.sum("ovbus_memory_releases_total"), "")
		if errs.count() > 0 {
			r.text(label+": send errors", errs.String())
		}
	}
	if len(cs) == 0 {
		return 0, fmt.Errorf("%s: no connection", label)
	}
	return float64(after.RSS-base.RSS) / float64(len(cs)) / 1024, nil
}

func setupHandshake(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	conns := fs.Int("conns", 500, "connections")
	header := fs.Int("header-bytes", 1_000_000, "bytes of the one header line each sends")
	hold := fs.Duration("hold", 3*time.Second, "how long the unfinished handshakes are held after the last was written")
	return func(ctx context.Context, e *env, r *result) error {
		s, err := serve(ctx, e, r, "handshake", nil)
		if err != nil {
			return err
		}
		sleepCtx(ctx, 500*time.Millisecond)
		base := s.rss()
		s.watch.resetPeak()
		line := "GET " + s.route + " HTTP/1.1\r\nHost: " + s.addr + "\r\nX-Attack: " + strings.Repeat("a", *header) + "\r\n"
		ncs := make([]*bufio.Reader, *conns)
		var errs errCounts
		var mu sync.Mutex
		var open []func()
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(*conns) && ctx.Err() == nil; i = next.Add(1) - 1 {
					nc, err := dialTCP(ctx, s.addr, dialOptions{Source: nextSource()})
					if err != nil {
						errs.add(err)
						continue
					}
					nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
					if _, err := nc.Write([]byte(line)); err != nil {
						errs.add(fmt.Errorf("write: %s", describeEnd(err)))
					}
					mu.Lock()
					ncs[i] = bufio.NewReader(nc)
					open = append(open, func() { nc.Close() })
					mu.Unlock()
					nc.SetReadDeadline(time.Now().Add(*hold + 2*time.Second))
				}
			}()
		}
		wg.Wait()
		written := time.Since(start)
		sleepCtx(ctx, *hold)
		rssHold := s.rss()
		_, hwm, _ := s.procStatus()
		peak := s.watch.peakRSS()
		// What did the server answer, if anything?
		answers := map[string]int{}
		for _, br := range ncs {
			if br == nil {
				continue
			}
			resp, err := http.ReadResponse(br, nil)
			switch {
			case err != nil:
				answers["no answer: "+describeEnd(err)]++
			default:
				answers[resp.Status]++
				resp.Body.Close()
			}
		}
		for _, c := range open {
			c()
		}
		r.fig("connections", float64(*conns), "")
		r.fig("header line bytes", float64(*header), "B")
		r.fig("write or connect errors", float64(errs.count()), "")
		if errs.count() > 0 {
			r.text("errors by kind", errs.String())
		}
		r.fig("time to write every header", written.Seconds(), "s")
		r.mib("RSS before", base)
		r.mib("RSS while held", rssHold)
		r.mib("peak RSS (VmHWM)", hwm)
		r.mib("peak RSS (sampled)", peak)
		r.text("answers", countMap(answers))
		r.met(max(hwm, peak) < 50e6)
		return nil
	}
}

func setupStalled(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	stalled := fs.Int("stalled", 200, "clients that never read")
	dur := fs.Duration("duration", 15*time.Second, "how long the sender floods")
	size := fs.Int("size-kib", 16, "KiB per flood message (filler compresses about 2:1)")
	queue := fs.Int64("max-queue-bytes", 64<<20, "the server's max_queue_bytes")
	variants := fs.String("variants", "deflate,plain,deflate-slow,plain-slow", "comma-separated: deflate, plain (clients that never read); deflate-slow, plain-slow (clients that read, slowly)")
	slowRate := fs.Int("slow-kib", 256, "KiB per second each -slow client reads")
	every := fs.Duration("sample", 250*time.Millisecond, "RSS sampling interval")
	return func(ctx context.Context, e *env, r *result) error {
		conf := map[string]any{"max_queue_bytes": *queue}
		r.mib("configured max_queue_bytes", *queue)
		for _, v := range strings.Split(*variants, ",") {
			if !slices.Contains([]string{"deflate", "plain", "deflate-slow", "plain-slow"}, v) {
				return fmt.Errorf("unknown variant %q", v)
			}
			if err := stalledRun(ctx, e, r, v, conf, *stalled, *dur, *size<<10, *queue, *every, *slowRate<<10); err != nil {
				return err
			}
		}
		r.note("the bound: one log shared by every client, at most max_queue_bytes behind its slowest reader (docs/protocol.md §3)")
		return nil
	}
}

func stalledRun(ctx context.Context, e *env, r *result, v string, conf map[string]any, n int, dur time.Duration, size int, queue int64, every time.Duration, slowRate int) error {
	deflate := strings.HasPrefix(v, "deflate")
	s, err := serve(ctx, e, r, "stalled-"+v, conf)
	if err != nil {
		return err
	}
	defer s.stop(20 * time.Second)
	sleepCtx(ctx, 500*time.Millisecond)
	base := s.rss()
	var errs errCounts
	cs := connectMany(ctx, s, n, 32, dialOptions{Deflate: deflate}, true, &errs)
	defer closeAll(cs)
	if deflate && len(cs) > 0 && !cs[0].deflate {
		return fmt.Errorf("the server did not accept permessage-deflate")
	}
	if strings.HasSuffix(v, "-slow") {
		// Slow readers make the bus write (and, with deflate, compress)
		// every message while the log is full, instead of blocking early.
		for _, c := range cs {
			go readSlowly(c.nc, slowRate)
		}
	}
	sender, err := dial(ctx, s.addr, s.route, dialOptions{})
	if err != nil {
		return err
	}
	defer sender.nc.Close()
	echo := startDrainer(sender)
	msgs := make([][]byte, 64)
	for i := range msgs {
		msgs[i] = padMessage("attack.flood", i, size, true)
	}
	// Sample RSS and the log's size while the sender floods.
	var rss, logb []sample
	var peakLog int64
	stopSample := make(chan struct{})
	sampled := make(chan struct{})
	tcp0 := tcpMemPages()
	var peakTCP int64
	t0 := time.Now()
	go func() {
		defer close(sampled)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopSample:
				return
			case <-t.C:
			}
			snap, _ := takeSnapshot(s)
			at := time.Since(t0).Seconds()
			rss = append(rss, sample{at, float64(snap.RSS) / (1 << 20)})
			logb = append(logb, sample{at, float64(snap.LogBytes) / (1 << 20)})
			peakLog = max(peakLog, snap.LogBytes)
			peakTCP = max(peakTCP, tcpMemPages())
		}
	}()
	// The sender is a healthy client: it keeps at most window messages of
	// its own unread, so that the bus never has a reason to cut it.
	const window = 512
	sent, bytes := 0, 0
	for time.Since(t0) < dur && ctx.Err() == nil && !echo.ended() {
		for int64(sent)-(echo.frames.Load()-1) > window && !echo.ended() && time.Since(t0) < dur {
			time.Sleep(100 * time.Microsecond)
		}
		m := msgs[sent%len(msgs)]
		sender.nc.SetWriteDeadline(time.Now().Add(dur))
		if err := sender.send(opText, m, false); err != nil {
			r.note("%s: sender: %s", v, describeEnd(err))
			break
		}
		sent++
		bytes += len(m)
	}
	sleepCtx(ctx, time.Second)
	close(stopSample)
	<-sampled
	end, _ := takeSnapshot(s)
	peak := s.watch.peakRSS()
	r.addSeries(v+": RSS MiB", rss)
	r.addSeries(v+": ovbus_log_bytes MiB", logb)
	r.fig(v+": stalled clients", float64(len(cs)), "")
	if strings.HasSuffix(v, "-slow") {
		r.fig(v+": each reads at most", float64(slowRate>>10), "KiB/s")
	}
	r.fig(v+": messages flooded", float64(sent), "")
	r.mib(v+": bytes flooded", int64(bytes))
	r.mib(v+": RSS before", base)
	r.mib(v+": peak RSS", peak)
	r.mib(v+": peak ovbus_log_bytes", peakLog)
	r.fig(v+": (peak RSS − RSS before) / max_queue_bytes", float64(peak-base)/float64(queue), "×")
	if tcp0 >= 0 {
		r.mib(v+": peak kernel TCP memory over the start (machine-wide, /proc/net/sockstat)", (peakTCP-tcp0)*4096)
	}
	r.text(v+": closes by reason", countMapF(end.m.byLabel("ovbus_closes_total")))
	r.fig(v+": connections at the end", float64(end.Conns), "")
	r.text(v+": sender", echo.state())
	if s.watch.wasKilled() {
		r.note("%s: the server passed the harness's RSS limit and was killed", v)
	}
	return nil
}

// countMapF renders float counts as countMap does.
func countMapF(m map[string]float64) string {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = int(v)
	}
	return countMap(c)
}

// tcpMemPages returns the kernel's TCP buffer memory in pages (the "mem"
// of /proc/net/sockstat's TCP line), -1 when it cannot be read. It counts
// every TCP socket of the machine, not only the server's.
func tcpMemPages() int64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TCP:" {
			continue
		}
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "mem" {
				n, err := strconv.ParseInt(f[i+1], 10, 64)
				if err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// readSlowly reads and discards from nc at about rate bytes per second
// until the connection ends.
func readSlowly(nc net.Conn, rate int) {
	buf := make([]byte, 16<<10)
	tick := time.NewTicker(time.Duration(float64(time.Second) * float64(len(buf)) / float64(rate)))
	defer tick.Stop()
	for range tick.C {
		if _, err := nc.Read(buf); err != nil {
			return
		}
	}
}
