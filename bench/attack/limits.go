//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The ceilings and promises of the bus's limits (write_timeout,
// max_connections, the file limit, the cuts) and the slow-consumer
// bookkeeping.

func init() {
	register(&scenario{
		name:    "fullbus",
		doc:     "many idle connections, then /health and /metrics latency and one connection over max_connections (item 8)",
		target:  "/health and /metrics answer in < 100 ms; the connection over max_connections gets 503 at once",
		timeout: 15 * time.Minute,
		setup:   setupFullBus,
	})
	register(&scenario{
		name:    "fdlimit",
		doc:     "the server's file limit lowered (prlimit) to -server-nofile, then more clients than it allows (item 8, the failure as found)",
		target:  "at the file limit /health and /metrics still answer in < 100 ms and new clients get an answer, not a hang",
		timeout: 10 * time.Minute,
		setup:   setupFileLimit,
	})
	register(&scenario{
		name:    "slowcut",
		doc:     "max_msg_size 1, max_queue_bytes 2 MiB: two readers, one never-reader, a sender",
		target:  "only the never-reader is cut",
		timeout: 5 * time.Minute,
		setup:   setupSlowCut,
	})
	register(&scenario{
		name:    "wtimeout",
		doc:     "a client that stops reading until the kernel buffers fill: what it sees, and when (item 6)",
		target:  "what the README's Limits say: cut within write_timeout, with a 1008 close frame or, when a write was blocked, dropped without one; counted slow_consumer",
		timeout: 5 * time.Minute,
		setup:   setupWriteTimeout,
	})
	register(&scenario{
		name:    "shutdown",
		doc:     "close_frames_on_shutdown true and one stalled client: SIGTERM to exit (item 7)",
		target:  "exit within shutdown_timeout",
		timeout: 5 * time.Minute,
		setup:   setupShutdown,
	})
}

func setupFullBus(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	conns := fs.Int("conns", 19000, "idle connections (the harness needs as many file descriptors, plus a few)")
	maxConns := fs.Int("max-connections", 0, "the server's max_connections (default: -conns)")
	probes := fs.Int("probes", 20, "requests to /health and to /metrics")
	conc := fs.Int("concurrency", 64, "connections opened at a time")
	return func(ctx context.Context, e *env, r *result) error {
		if *maxConns == 0 {
			*maxConns = *conns
		}
		if lim := int(fileLimit()); *conns+100 > lim {
			r.note("file limit %d: %d connections asked for, %d opened", lim, *conns, lim-100)
			*conns = lim - 100
		}
		r.fig("harness file limit", float64(fileLimit()), "")
		s, err := serve(ctx, e, r, "fullbus", map[string]any{"max_connections": *maxConns})
		if err != nil {
			return err
		}
		knows := s.knows("max_connections")
		if !knows {
			r.note("the server does not know max_connections (it warned: unknown key, ignored): no ceiling is configured")
		}
		r.text("server file limit (soft hard)", s.fileLimits())
		var errs errCounts
		start := time.Now()
		cs := connectMany(ctx, s, *conns, *conc, dialOptions{Timeout: 20 * time.Second}, false, &errs)
		defer closeAll(cs)
		r.fig("idle connections open", float64(len(cs)), "")
		r.fig("time to open them", time.Since(start).Seconds(), "s")
		r.fig("connect errors", float64(errs.count()), "")
		if errs.count() > 0 {
			r.text("connect errors by kind", errs.String())
		}
		r.mib("RSS with the connections", s.rss())

		healthy := probe(r, s, *probes)
		answer, took := oneMore(ctx, r, s, fmt.Sprintf("connection %d (max_connections %d)", len(cs)+1, *maxConns))
		r.met(healthy && answer == "HTTP 503" && took < time.Second)
		return nil
	}
}

// probe times n requests to /health and to /metrics (each given 2 s) and
// reports whether every one answered within 100 ms.
func probe(r *result, s *server, n int) bool {
	var hl, ml durations
	var herr, merr errCounts
	for range n {
		if herr.count() >= 3 && merr.count() >= 3 {
			break // unreachable: three failures each are enough to say so
		}
		code, d, err := s.health(2 * time.Second)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", code)
		}
		if err != nil {
			herr.add(err)
		}
		hl = append(hl, d)
		_, d, err = s.scrapeWithin(2 * time.Second)
		if err != nil {
			merr.add(err)
		}
		ml = append(ml, d)
	}
	r.fig("/health p50", ms(hl.pct(0.5)), "ms")
	r.fig("/health max", ms(hl.pct(1)), "ms")
	r.fig("/health failures", float64(herr.count()), "")
	r.fig("/metrics p50", ms(ml.pct(0.5)), "ms")
	r.fig("/metrics max", ms(ml.pct(1)), "ms")
	r.fig("/metrics failures", float64(merr.count()), "")
	if herr.count()+merr.count() > 0 {
		r.text("probe failures", "health: "+herr.String()+"; metrics: "+merr.String())
	}
	return herr.count() == 0 && merr.count() == 0 && hl.pct(1) < 100*time.Millisecond && ml.pct(1) < 100*time.Millisecond
}

// oneMore dials one more client and records, under name, what the server
// answered and how fast.
func oneMore(ctx context.Context, r *result, s *server, name string) (string, time.Duration) {
	t := time.Now()
	extra, err := dial(ctx, s.addr, s.route, dialOptions{Timeout: 5 * time.Second})
	took := time.Since(t)
	var he *handshakeError
	answer := ""
	switch {
	case err == nil:
		answer = "upgraded (no ceiling)"
		extra.nc.Close()
	case errors.As(err, &he):
		answer = fmt.Sprintf("HTTP %d", he.Status)
	default:
		answer = "no answer: " + describeEnd(err)
	}
	r.text(name, answer)
	r.fig("its answer time", ms(took), "ms")
	if m, _, err := s.scrape(); err == nil {
		r.text("refusals by reason", countMapF(m.byLabel("ovbus_rejected_total")))
	}
	return answer, took
}

func setupFileLimit(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	nofile := fs.Uint64("server-nofile", 5000, "RLIMIT_NOFILE (soft and hard) set on the server as it starts")
	conns := fs.Int("conns", 0, "connections attempted (default: -server-nofile + 500)")
	probes := fs.Int("probes", 10, "requests to /health and to /metrics")
	return func(ctx context.Context, e *env, r *result) error {
		if *conns == 0 {
			*conns = int(*nofile) + 500
		}
		e.serverNofile = *nofile
		s, err := serve(ctx, e, r, "fdlimit", nil)
		e.serverNofile = 0
		if err != nil {
			return err
		}
		r.fig("file limit set on the server (soft and hard)", float64(*nofile), "")
		r.text("server file limit as it runs (soft hard)", s.fileLimits())
		var errs errCounts
		cs := connectMany(ctx, s, *conns, 64, dialOptions{Timeout: 3 * time.Second}, false, &errs)
		defer closeAll(cs)
		r.fig("connections attempted", float64(*conns), "")
		r.fig("connections upgraded", float64(len(cs)), "")
		r.fig("connections failed", float64(errs.count()), "")
		if errs.count() > 0 {
			r.text("failures by kind", errs.String())
		}
		healthy := probe(r, s, *probes)
		answer, took := oneMore(ctx, r, s, "one more client")
		r.note("a new client should get an answer (upgrade, or 503 past max_connections) at once, not a hang")
		r.met(healthy && !strings.HasPrefix(answer, "no answer") && took < time.Second)
		return nil
	}
}

func setupSlowCut(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	messages := fs.Int("messages", 600, "messages the sender sends")
	size := fs.Int("size-kib", 64, "KiB per message")
	rates := fs.String("rates", "200,0", "comma-separated messages per second, one run (and server) each; 0: as fast as the socket takes them")
	return func(ctx context.Context, e *env, r *result) error {
		ok := true
		for _, v := range strings.Split(*rates, ",") {
			rate, err := strconv.Atoi(v)
			if err != nil || rate < 0 {
				return fmt.Errorf("-rates: %q is not a rate", v)
			}
			cut, err := slowCut(ctx, e, r, rate, *messages, *size<<10)
			if err != nil {
				return err
			}
			ok = ok && len(cut) == 1 && cut[0] == "never-reader"
		}
		r.met(ok)
		return nil
	}
}

// slowCut runs one sender at rate (0: unpaced) beside two readers and a
// client that never reads, and returns the names of the clients cut.
func slowCut(ctx context.Context, e *env, r *result, rate, messages, size int) ([]string, error) {
	label := "burst"
	if rate > 0 {
		label = fmt.Sprintf("%d/s", rate)
	}
	s, err := serve(ctx, e, r, "slowcut-"+strings.ReplaceAll(label, "/", "per"), map[string]any{"max_msg_size": 1, "max_queue_bytes": 2 << 20})
	if err != nil {
		return nil, err
	}
	defer s.stop(10 * time.Second)
	names := []string{"reader-a", "reader-b", "never-reader", "sender"}
	cs := map[string]*conn{}
	for _, n := range names {
		c, err := dial(ctx, s.addr, s.route, dialOptions{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		defer c.nc.Close()
		if n != "never-reader" {
			if err := c.readGreeting(10 * time.Second); err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
		}
		cs[n] = c
	}
	drains := map[string]*drainer{}
	for _, n := range []string{"reader-a", "reader-b", "sender"} {
		drains[n] = startDrainer(cs[n])
	}
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		tick = t.C
	}
	sent := 0
	start := time.Now()
	for sent < messages && ctx.Err() == nil && !drains["sender"].ended() {
		if tick != nil {
			<-tick
		}
		if err := cs["sender"].send(opText, padMessage("attack.slowcut", sent, size, true), false); err != nil {
			r.note("%s: sender: %s", label, describeEnd(err))
			break
		}
		sent++
	}
	took := time.Since(start)
	sleepCtx(ctx, 2*time.Second)
	// The never-reader reads now: what was queued for it, then its end.
	o := cs["never-reader"].waitClose(5 * time.Second)
	never := "open"
	if !strings.HasPrefix(o.How, "timeout") {
		never = fmt.Sprintf("cut: %s after %d frames", o.How, o.Frames)
	}
	var cut []string
	for _, n := range []string{"reader-a", "reader-b", "sender"} {
		r.text(label+": "+n, drains[n].state())
		if drains[n].ended() {
			cut = append(cut, n)
		}
	}
	r.text(label+": never-reader", never)
	if never != "open" {
		cut = append(cut, "never-reader")
	}
	r.fig(label+": messages sent", float64(sent), "")
	r.fig(label+": message size", float64(size), "B")
	r.fig(label+": time to send them", took.Seconds(), "s")
	r.text(label+": clients cut", strings.Join(cut, ", "))
	if m, _, err := s.scrape(); err == nil {
		r.text(label+": closes by reason", countMapF(m.byLabel("ovbus_closes_total")))
	}
	return cut, nil
}

// stalledPair is a client that read its greeting and then nothing, and a
// sender that flooded it (reading its own echoes), so that the stalled
// client's kernel buffers are full.
type stalledPair struct {
	stalled, sender *conn
	echo            *drainer
	took            time.Duration // how long the flood took to write
}

func (p *stalledPair) close() {
	for _, c := range []*conn{p.stalled, p.sender} {
		if c != nil {
			c.nc.Close()
		}
	}
}

// stall connects the pair and writes flood bytes in size-byte messages.
// Close the pair even when it returns an error.
func stall(ctx context.Context, s *server, flood, size int) (*stalledPair, error) {
	p := &stalledPair{}
	var err error
	if p.stalled, err = dial(ctx, s.addr, s.route, dialOptions{}); err != nil {
		return p, err
	}
	if err = p.stalled.readGreeting(10 * time.Second); err != nil {
		return p, err
	}
	if p.sender, err = dial(ctx, s.addr, s.route, dialOptions{}); err != nil {
		return p, err
	}
	p.echo = startDrainer(p.sender)
	start := time.Now()
	defer func() { p.took = time.Since(start) }()
	for i := 0; i*size < flood && ctx.Err() == nil; i++ {
		if err = p.sender.send(opText, padMessage("attack.stall", i, size, true), false); err != nil {
			return p, fmt.Errorf("sender: %s", describeEnd(err))
		}
	}
	return p, nil
}

func setupWriteTimeout(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	wt := fs.Int("write-timeout", 2, "the server's write_timeout, seconds")
	flood := fs.Int("flood-mib", 48, "MiB the sender writes (well under max_queue_bytes, well over the kernel buffers)")
	return func(ctx context.Context, e *env, r *result) error {
		s, err := serve(ctx, e, r, "wtimeout", map[string]any{"write_timeout": *wt, "max_queue_bytes": 512 << 20})
		if err != nil {
			return err
		}
		p, err := stall(ctx, s, *flood<<20, 64<<10)
		defer p.close()
		if err != nil {
			return err
		}
		took := p.took
		flooded := time.Now()
		before, _, _ := s.scrape()
		limit := time.Duration(*wt)*time.Second*3 + 10*time.Second
		cutM, cut := waitMetric(ctx, s, limit, func(m metricSet) bool {
			return m.sum("ovbus_closes_total") > before.sum("ovbus_closes_total")
		})
		cutAfter := time.Since(flooded)
		o := p.stalled.waitClose(10 * time.Second)
		r.fig("configured write_timeout", float64(*wt), "s")
		r.fig("time to flood", took.Seconds(), "s")
		if cut {
			r.fig("cut after the flood ended", cutAfter.Seconds(), "s")
			r.fig("cut after the flood began", (cutAfter + took).Seconds(), "s")
			r.text("close reason recorded", countMapF(cutM.byLabel("ovbus_closes_total")))
		} else {
			r.text("cut", fmt.Sprintf("not within %v", limit))
		}
		r.text("what the stalled client saw", fmt.Sprintf("%s after %d frames", o.How, o.Frames))
		// README "Limits": a client cut between writes gets 1008; one whose
		// write was blocked is dropped without a close frame (code 0).
		const slowKey = `ovbus_closes_total{reason="slow_consumer"}`
		slow := cutM[slowKey] > before[slowKey]
		r.met(cut && slow && (o.Code == 1008 || o.Code == 0) && cutAfter <= time.Duration(*wt)*time.Second+time.Second)
		return nil
	}
}

func setupShutdown(fs *flag.FlagSet) func(context.Context, *env, *result) error {
	st := fs.Int("shutdown-timeout", 2, "the server's shutdown_timeout, seconds")
	return func(ctx context.Context, e *env, r *result) error {
		s, err := serve(ctx, e, r, "shutdown", map[string]any{
			"close_frames_on_shutdown": true, "shutdown_timeout": *st,
			"write_timeout": 120, "max_queue_bytes": 512 << 20})
		if err != nil {
			return err
		}
		healthy, err := dial(ctx, s.addr, s.route, dialOptions{})
		if err != nil {
			return err
		}
		defer healthy.nc.Close()
		if err := healthy.readGreeting(10 * time.Second); err != nil {
			return err
		}
		hd := startDrainer(healthy)
		p, err := stall(ctx, s, 32<<20, 64<<10)
		defer p.close()
		if err != nil {
			return err
		}
		sleepCtx(ctx, 500*time.Millisecond)
		took, exited := s.stop(time.Duration(*st)*time.Second + 60*time.Second)
		so := p.stalled.waitClose(5 * time.Second)
		sleepCtx(ctx, 200*time.Millisecond)
		r.fig("configured shutdown_timeout", float64(*st), "s")
		r.fig("SIGTERM to exit", took.Seconds(), "s")
		if !exited {
			r.note("the server did not exit; killed")
		}
		late := strings.Contains(readFile(s.logPath), "did not finish in time")
		r.text(`log says "did not finish in time"`, fmt.Sprint(late))
		r.text("healthy client saw", hd.state())
		r.text("sender saw", p.echo.state())
		r.text("stalled client saw", fmt.Sprintf("%s after %d frames", so.How, so.Frames))
		r.met(exited && took <= time.Duration(*st)*time.Second+500*time.Millisecond)
		return nil
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
