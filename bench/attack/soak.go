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
		name: "soak",
		doc: "mixed load for a duration: senders in busy and quiet phases, healthy readers, clients coming and " +
			"leaving in four ways, slow clients, bad frames; RSS and the live heap sampled",
		target:  "RSS and live heap flat, quiet phases included, and nothing lost for the healthy clients",
		timeout: 0, // none: the soak stops itself after -duration plus two minutes
		setup:   setupSoak,
	})
}

// The slack of the flat rule (see drift.flat), in MiB: how far RSS and the
// live heap may move beyond the proportion, whatever the run's length.
const (
	rssSlackMiB  = 8
	liveSlackMiB = 4
)

// The soak's traffic. Senders number their messages; every healthy reader
// checks that it receives each sender's numbers without a gap. The senders
// pause in the quiet phases, when only the churn, the slow and the bad
// clients go on: a bus that frees closed connections only when traffic
// passes keeps them there.
func setupSoak(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	dur := fs.Duration("duration", 30*time.Minute, "how long the load runs")
	every := fs.Duration("sample", 10*time.Second, "sampling interval (RSS, /metrics)")
	busy := fs.Duration("busy", time.Minute, "a busy phase: the senders send")
	quiet := fs.Duration("quiet", time.Minute, "a quiet phase after each busy one: nothing is published, the other clients go on (0: no quiet phase)")
	senders := fs.Int("senders", 4, "healthy senders")
	readers := fs.Int("readers", 8, "healthy readers (half of them with deflate)")
	rate := fs.Int("rate", 50, "messages per second per sender")
	size := fs.Int("size", 1024, "bytes per message")
	churn := fs.Int("churn", 20, "connect / leave cycles per second, each leaving the next way (close frame, reset after the greeting, reset before the 101, FIN)")
	slow := fs.Int("slow", 4, "never-reading clients alive at a time (each replaced after -slow-life)")
	slowLife := fs.Duration("slow-life", 60*time.Second, "how long a never-reading client lives")
	bad := fs.Duration("bad-every", 500*time.Millisecond, "one bad frame or handshake this often")
	return func(ctx context.Context, e *env, r *result) error {
		if *busy <= 0 || *quiet < 0 || *every <= 0 {
			return fmt.Errorf("-busy and -sample must be above 0 and -quiet at least 0 (have %v, %v, %v)", *busy, *every, *quiet)
		}
		ph := phases{busy: *busy, quiet: *quiet}
		ctx, cancel := context.WithTimeout(ctx, *dur+2*time.Minute)
		defer cancel()
		s, err := serve(ctx, e, r, "soak", map[string]any{"max_msg_size": 1})
		if err != nil {
			return err
		}

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

		// The phases and the samples count from here.
		t0 := time.Now()
		load, stop := context.WithTimeout(ctx, *dur)
		defer stop()
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
				for n := 0; load.Err() == nil && !echo.ended(); {
					select {
					case <-load.Done():
						return
					case <-t.C:
					}
					if ph.quietAt(time.Since(t0)) {
						continue
					}
					head := fmt.Sprintf(`{"type":"soak.msg","data":{"s":%d,"n":%d,"pad":"`, i, n)
					msg := append([]byte(head), bytes.Repeat([]byte("x"), max(*size-len(head)-16, 0))...)
					msg = append(msg, `"},"context":{}}`...)
					if err := c.send(opText, msg, false); err != nil {
						senderErrs.add(err)
						return
					}
					n++
					sentBy[i].Store(int64(n))
				}
			}()
		}

		// Churn: each cycle leaves the next way.
		cyclesBy := make([]atomic.Int64, len(leaveWays))
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second / time.Duration(max(*churn, 1)))
			defer t.Stop()
			for i := 0; load.Err() == nil; i++ {
				select {
				case <-load.Done():
					return
				case <-t.C:
				}
				way := i % len(leaveWays)
				if err := leaveWays[way].run(load, s); err != nil {
					if load.Err() == nil {
						churnErrs.add(fmt.Errorf("%s: %w", leaveWays[way].name, err))
					}
					continue
				}
				cyclesBy[way].Add(1)
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

		// Sample the server's memory and connections.
		sm := newSoakSampler(s, t0)
		sm.take()
		for load.Err() == nil {
			if sleepCtx(load, time.Until(t0.Add(ph.nextSample(time.Since(t0), *every)))) != nil {
				break
			}
			sm.take()
			e.logf("soak: %.0fs RSS %.1f MiB, live heap %.1f MiB", time.Since(t0).Seconds(), last(sm.rss), last(sm.live))
		}
		wg.Wait()
		sm.take()
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
		quietSpans := ph.quietSpans(dur.Seconds())
		r.Spans = quietSpans
		r.fig("duration", dur.Seconds(), "s")
		r.fig("busy phase", busy.Seconds(), "s")
		r.fig("quiet phase", quiet.Seconds(), "s")
		r.fig("messages sent by the healthy senders", float64(total), "")
		r.fig("healthy readers", float64(len(rs)), "")
		r.fig("messages lost by healthy readers", float64(lost), "")
		r.fig("healthy readers cut", float64(cutReaders), "")
		r.fig("sender errors", float64(senderErrs.count()), "")
		cycles, byWay := 0, map[string]int{}
		for i := range cyclesBy {
			n := int(cyclesBy[i].Load())
			cycles += n
			byWay[leaveWays[i].name] = n
		}
		r.fig("churn cycles", float64(cycles), "")
		r.text("churn cycles by way of leaving", countMap(byWay))
		r.fig("churn errors", float64(churnErrs.count()), "")
		if churnErrs.count() > 0 {
			r.text("churn errors by kind", churnErrs.String())
		}
		r.fig("slow clients opened", float64(slowOpened.Load()), "")
		r.text("bad clients → answers", countMap(badAnswers))
		r.fig("server WARNING lines", float64(s.warningCount()), "")
		sm.record(r)

		rssD := measureDrift(sm.rss, quietSpans)
		liveD := measureDrift(sm.live, quietSpans)
		rssD.record(r, "RSS")
		liveD.record(r, "live heap")
		r.note("flat means: the second half's peak at most 20%% and %d MiB over the first half's, and no quiet phase "+
			"ending more than %[1]d MiB above where it began (RSS); the same with %d MiB for the live heap",
			rssSlackMiB, liveSlackMiB)
		if *quiet > 0 {
			r.note("phases: %v busy (the senders send), then %v quiet (nothing published), from the start; "+
				"the churn, slow and bad clients go on throughout", *busy, *quiet)
		}
		r.met(lost == 0 && cutReaders == 0 && rssD.flat(rssSlackMiB) && liveD.flat(liveSlackMiB))
		return nil
	}
}

// phases alternates busy and quiet spans from the start of the load, busy
// first.
type phases struct{ busy, quiet time.Duration }

// quietAt reports whether d after the start falls in a quiet phase.
func (p phases) quietAt(d time.Duration) bool {
	return p.quiet > 0 && d%(p.busy+p.quiet) >= p.busy
}

// nextSample is when the sample after the one at d falls: every `every`
// from the start, and also just inside both ends of each quiet phase, so
// that what a phase kept is measured over the whole of it.
func (p phases) nextSample(d, every time.Duration) time.Duration {
	next := (d/every + 1) * every
	if p.quiet <= 0 {
		return next
	}
	edge := min(200*time.Millisecond, p.quiet/4)
	period := p.busy + p.quiet
	base := d / period * period
	for _, at := range []time.Duration{base + p.busy + edge, base + period - edge, base + period + p.busy + edge} {
		if at > d && at < next {
			next = at
		}
	}
	return next
}

// quietSpans are the quiet phases of a load of total seconds, the last one
// cut short where the load ends.
func (p phases) quietSpans(total float64) []span {
	if p.quiet <= 0 {
		return nil
	}
	var out []span
	period := (p.busy + p.quiet).Seconds()
	for at := p.busy.Seconds(); at < total; at += period {
		out = append(out, span{Label: "quiet", From: at, To: min(at+p.quiet.Seconds(), total)})
	}
	return out
}

// soakSampler keeps the soak's time series of the server.
type soakSampler struct {
	s                    *server
	t0                   time.Time
	rss, live, inuse     []sample // MiB
	gor, conns, departed []sample
	liveFrom             string // the metric the live heap came from
	noDeparted           bool   // the server has no ovbus_departed_writers
	scrapeErrs           errCounts
}

func newSoakSampler(s *server, t0 time.Time) *soakSampler { return &soakSampler{s: s, t0: t0} }

// take samples RSS from /proc and the rest from /metrics.
func (sm *soakSampler) take() {
	at := time.Since(sm.t0).Seconds()
	sn, err := takeSnapshot(sm.s)
	sm.rss = append(sm.rss, sample{at, float64(sn.RSS) / (1 << 20)})
	if err != nil {
		sm.scrapeErrs.add(err)
		return
	}
	// The live heap is known from the first collection on.
	if sn.m.sum("go_gc_duration_seconds_count") > 0 {
		_, sm.liveFrom = sn.m.liveHeap()
		sm.live = append(sm.live, sample{at, float64(sn.LiveHeap) / (1 << 20)})
	}
	sm.inuse = append(sm.inuse, sample{at, float64(sn.HeapInuse) / (1 << 20)})
	sm.gor = append(sm.gor, sample{at, float64(sn.Goroutines)})
	sm.conns = append(sm.conns, sample{at, float64(sn.Conns)})
	if d, ok := sn.m["ovbus_departed_writers"]; ok {
		sm.departed = append(sm.departed, sample{at, d})
	} else {
		sm.noDeparted = true
	}
}

// record writes the series and their end points into r.
func (sm *soakSampler) record(r *result) {
	r.addSeries("RSS MiB", sm.rss)
	r.addSeries("live heap MiB", sm.live)
	r.addSeries("heap in use MiB", sm.inuse)
	r.addSeries("goroutines", sm.gor)
	r.addSeries("connections", sm.conns)
	r.text("live heap from", sm.liveFrom)
	r.fig("RSS first sample", first(sm.rss), "MiB")
	r.fig("RSS last sample", last(sm.rss), "MiB")
	r.fig("RSS peak", peak(sm.rss), "MiB")
	r.fig("live heap first", first(sm.live), "MiB")
	r.fig("live heap last", last(sm.live), "MiB")
	r.fig("live heap peak", peak(sm.live), "MiB")
	r.fig("heap in use first", first(sm.inuse), "MiB")
	r.fig("heap in use last", last(sm.inuse), "MiB")
	r.fig("goroutines first", first(sm.gor), "")
	r.fig("goroutines last", last(sm.gor), "")
	r.fig("connections peak", peak(sm.conns), "")
	r.fig("connections last", last(sm.conns), "")
	if sm.noDeparted {
		r.note("the server has no ovbus_departed_writers gauge")
	} else {
		r.addSeries("departed writers", sm.departed)
		r.fig("departed writers peak", peak(sm.departed), "")
		r.fig("departed writers last", last(sm.departed), "")
	}
	if n := sm.scrapeErrs.count(); n > 0 {
		r.note("%d samples without /metrics: %s", n, sm.scrapeErrs.String())
	}
}

func first(s []sample) float64 {
	if len(s) == 0 {
		return 0
	}
	return s[0].V
}

func last(s []sample) float64 {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].V
}

func peak(s []sample) float64 {
	p := 0.0
	for _, x := range s {
		p = max(p, x.V)
	}
	return p
}

// drift is how a series moved over a soak: the peaks of its two halves (by
// sample), and the most it grew over one quiet phase (the last sample in
// the phase less the first). A quiet phase is where memory kept until
// traffic passes shows: the halves' peaks alone can miss it, as the next
// busy phase sweeps it away.
type drift struct {
	firstHalf, secondHalf float64
	quietGrowth           float64
	quietFrom             float64 // the start of that phase (s); -1 when no phase had two samples
}

func measureDrift(s []sample, quiet []span) drift {
	d := drift{quietFrom: -1}
	half := len(s) / 2
	for i, p := range s {
		if i < half {
			d.firstHalf = max(d.firstHalf, p.V)
		} else {
			d.secondHalf = max(d.secondHalf, p.V)
		}
	}
	for _, q := range quiet {
		var in []sample
		for _, p := range s {
			if p.T >= q.From && p.T <= q.To {
				in = append(in, p)
			}
		}
		if len(in) < 2 {
			continue
		}
		if g := in[len(in)-1].V - in[0].V; d.quietFrom < 0 || g > d.quietGrowth {
			d.quietGrowth, d.quietFrom = g, q.From
		}
	}
	return d
}

// flat: the second half's peak at most 20 % and slack over the first
// half's, and no quiet phase growing by more than slack (the series' unit).
func (d drift) flat(slack float64) bool {
	return d.secondHalf <= d.firstHalf*1.2+slack && d.quietGrowth <= slack
}

// record writes the drift of the series called name (in MiB) into r.
func (d drift) record(r *result, name string) {
	r.fig(name+" peak, first half", d.firstHalf, "MiB")
	r.fig(name+" peak, second half", d.secondHalf, "MiB")
	if d.quietFrom >= 0 {
		r.fig(name+": most growth over a quiet phase", d.quietGrowth, "MiB")
		r.fig(name+": that phase began at", d.quietFrom, "s")
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
