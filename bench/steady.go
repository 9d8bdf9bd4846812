package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
	"github.com/ovbus/ovbus/ws"
)

// SteadyConfig describes one run of the steady-traffic benchmark: the bus as
// an OVOS device uses it, a few clients that each send a frame now and then,
// all the time, and all receive everything. A zero field means its default.
type SteadyConfig struct {
	// URL of the bus, ws:// or wss://.
	URL string
	// Clients all send and all receive.
	Clients int
	// Rate is the frames per second of all clients together, spread evenly
	// over them (SteadyPlan); Duration how long they send.
	Rate     float64
	Duration time.Duration
	// Mix is the sizes and kinds of the frames; zero sizes are the
	// defaults (DefaultSizeMix), the binary share is as given.
	Mix SizeMix
	// Seed picks the frames' sizes (SizeMix.Frame); 0 is DefaultSteadySeed.
	Seed uint64
	// Timeout bounds the greeting, the warm-up, and the wait for the last
	// deliveries after the last frame was due.
	Timeout time.Duration
	// NoGreeting is for buses that send no greeting on connect.
	NoGreeting bool
	Measure
}

func (c SteadyConfig) withDefaults() SteadyConfig {
	if c.Clients <= 0 {
		c.Clients = DefaultClients
	}
	if c.Rate <= 0 {
		c.Rate = DefaultSteadyRate
	}
	if c.Duration <= 0 {
		c.Duration = DefaultSteadyDuration
	}
	if c.Mix.JSONMin == 0 && c.Mix.JSONMax == 0 {
		c.Mix.JSONMin, c.Mix.JSONMax = DefaultSizeMix.JSONMin, DefaultSizeMix.JSONMax
	}
	if c.Mix.BinaryMin == 0 && c.Mix.BinaryMax == 0 {
		c.Mix.BinaryMin, c.Mix.BinaryMax = DefaultSizeMix.BinaryMin, DefaultSizeMix.BinaryMax
	}
	if c.Seed == 0 {
		c.Seed = DefaultSteadySeed
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Measure = c.Measure.withDefaults()
	return c
}

// SteadyResult is the outcome of one steady run.
type SteadyResult struct {
	Clients     int
	Rate        float64
	BinaryShare float64
	Duration    time.Duration

	Planned    int64 // frames the schedule holds
	Sent       int64 // frames the clients sent
	SentBinary int64 // of which binary
	SentBytes  int64 // payload bytes sent
	// Expected is Sent × Clients: every client gets every frame, its own
	// too (docs/protocol.md §3).
	Expected   int64
	Delivered  int64 // distinct frames received, over every client
	Lost       int64 // frames sent that a client never received
	OutOfOrder int64 // frames that came after a later frame of the same sender
	Duplicates int64 // frames a client received more than once
	Unexpected int64 // frames naming a sender or number the schedule does not hold
	ConnErrors int   // failed reads and writes
	Errors     []string

	// WarmupWait is how long it took until every client had a warm-up
	// frame from every client; NotWarm counts those that had not within
	// the timeout.
	WarmupWait time.Duration
	NotWarm    int

	// Elapsed runs from the first frame's due time to the last delivery;
	// DeliveriesPerSec is Delivered ÷ Elapsed.
	Elapsed          time.Duration
	DeliveriesPerSec float64
	// Latency is every first delivery's receive time − its frame's due
	// time: a frame sent late because the client fell behind, or because
	// its connection was busy with a large frame, is charged for the wait
	// (no coordinated omission).
	Latency *stats.Histogram
	// SendLag is how late each frame left its client after its due time:
	// the client's own share of the latency.
	SendLag *stats.Histogram
	// FromSend is every first delivery's receive time − the time its
	// sender began to write it: Latency without the sender's lateness, so
	// the bus's share (with the kernel's and the receiving client's). A
	// client that falls behind its schedule because a bus delivered to it
	// in bursts is still charged in Latency.
	FromSend *stats.Histogram

	// CPUFigures run from the first due time until every client finished
	// receiving (Wall).
	CPUFigures
}

// ServerCPUPerFrame is the server's CPU time per frame sent, and
// ServerCPUPerDelivery per frame delivered (0 when unknown).
func (r *SteadyResult) ServerCPUPerFrame() time.Duration {
	return r.CPUFigures.ServerCPUPerDelivery(r.Sent)
}

func (r *SteadyResult) ServerCPUPerDelivery() time.Duration {
	return r.CPUFigures.ServerCPUPerDelivery(r.Delivered)
}

// steadyClient is one connection: a sender on its own schedule and a
// receiver of everything.
type steadyClient struct {
	id       int
	c        *ws.Conn
	streams  *stats.Streams
	latency  *stats.Histogram
	lag      *stats.Histogram
	fromSend *stats.Histogram
	count    atomic.Int64 // deliveries so far, for the progress display
	last     int64        // run clock of the last first delivery
	warmed   []bool       // a warm-up frame from client i arrived
	nWarm    int
	warm     chan struct{} // closed once every client's warm-up frame arrived
	got      int           // first deliveries
	sent     int
	binary   int64
	bytes    int64
}

// steadyRun is the state the goroutines of one steady run share.
type steadyRun struct {
	cfg   SteadyConfig
	plan  SteadyPlan
	start time.Time
	t0    int64 // run clock of the schedule's start
	// planned is every frame of the schedule: what each client receives.
	planned int
	// sentAt is when each client began to write each frame of its plan
	// ([client][seq], run clock): what FromSend runs from.
	sentAt [][]atomic.Int64
	dial   *ws.DialOptions
	errs   errorLog
}

func (r *steadyRun) now() int64 { return int64(time.Since(r.start)) }

// newSteadyRun is a run of cfg (with its defaults), its clock started.
func newSteadyRun(cfg SteadyConfig) *steadyRun {
	plan := SteadyPlan{Clients: cfg.Clients, Rate: cfg.Rate, Duration: cfg.Duration}
	r := &steadyRun{cfg: cfg, plan: plan, planned: plan.Total(), start: time.Now(), dial: dialOptions(cfg.Dial, cfg.Clients, cfg.Mix.JSONMax)}
	r.sentAt = make([][]atomic.Int64, cfg.Clients)
	for i := range r.sentAt {
		r.sentAt[i] = make([]atomic.Int64, plan.Frames(i))
	}
	return r
}

// RunSteady runs the steady benchmark once against cfg.URL. It returns an
// error only when the run could not take place (a client could not connect);
// failures during the run are counted in the result.
func RunSteady(ctx context.Context, cfg SteadyConfig) (*SteadyResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Mix.Check(); err != nil {
		return nil, err
	}
	r := newSteadyRun(cfg)
	plan := r.plan
	expected := make([]int, cfg.Clients)
	for i := range expected {
		expected[i] = plan.Frames(i)
	}

	clients := make([]*steadyClient, cfg.Clients)
	var conns connSet
	defer conns.closeAll()
	stop := conns.closeOnCancel(ctx)
	defer stop()
	connectAll(ctx, cfg.Clients, cfg.ConnectConcurrency, func(i int) {
		c, err := connectGreeted(ctx, strings.TrimSpace(cfg.URL), r.dial, cfg.NoGreeting, cfg.Timeout)
		if err != nil {
			r.errs.add("connect: %v", err)
			return
		}
		conns.add(c)
		clients[i] = &steadyClient{id: i, c: c, streams: stats.NewStreams(expected),
			latency: stats.NewHistogram(), lag: stats.NewHistogram(), fromSend: stats.NewHistogram(),
			warmed: make([]bool, cfg.Clients), warm: make(chan struct{})}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, cl := range clients {
		if cl == nil {
			return nil, fmt.Errorf("%d clients wanted, %d connected: %s", cfg.Clients, cfg.Clients-r.errs.n, r.errs.first())
		}
	}

	// Receivers run from here until they have every frame of the plan or
	// the drain deadline passes.
	var receiving sync.WaitGroup
	for _, cl := range clients {
		receiving.Add(1)
		go func() {
			defer receiving.Done()
			r.receive(cl)
		}()
	}

	warmStart := r.now()
	notWarm, err := r.warmUp(ctx, clients)
	if err != nil {
		return nil, err
	}
	warmWait := time.Duration(r.now() - warmStart)

	// Timed phase: the schedule starts a moment from now, so that every
	// sender is waiting for its first due time when it comes.
	r.t0 = r.now() + int64(10*time.Millisecond)
	cpu := startCPU(cfg.pids()...)
	total := int64(plan.Total()) * int64(cfg.Clients)
	stopProgress := startProgress(cfg.Progress, total, func() int64 {
		var n int64
		for _, cl := range clients {
			n += cl.count.Load()
		}
		return n
	})
	// A sender whose writes the bus stopped taking ends when the schedule
	// is over by the timeout: its write fails, and it is counted.
	watchdog := time.AfterFunc(time.Duration(r.t0-r.now())+cfg.Duration+cfg.Timeout, func() {
		for _, cl := range clients {
			cl.c.SetWriteDeadline(time.Now())
		}
	})
	var sending sync.WaitGroup
	for _, cl := range clients {
		sending.Add(1)
		go func() {
			defer sending.Done()
			write := func(op ws.Opcode, b []byte) error { return cl.c.WriteMessage(bg, op, b) }
			if err := r.send(ctx, cl, write); err != nil {
				r.errs.add("client %d: send: %v", cl.id, err)
			}
		}()
	}
	sending.Wait()
	watchdog.Stop()
	r.drain(clients, &receiving)
	end := r.now()
	stopProgress()
	usage := cpu.stop(time.Duration(end - r.t0))
	return r.result(clients, usage, end, notWarm, warmWait), nil
}

// warmUp has every client send a warm-up frame, again every 20 ms, until
// every client has one from every client (a bus may greet a client before
// it is in the fan-out: docs/protocol.md §2) or the timeout passes. It
// returns how many clients were not warm by then.
func (r *steadyRun) warmUp(ctx context.Context, clients []*steadyClient) (notWarm int, err error) {
	deadline := time.Now().Add(r.cfg.Timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var msg []byte
	sendAll := func() error {
		for _, cl := range clients {
			msg = appendSteadyJSON(msg[:0], true, cl.id, 0, r.now(), r.cfg.Mix.JSONMin)
			if err := cl.c.WriteMessage(bg, ws.TextMessage, msg); err != nil {
				return fmt.Errorf("client %d: warm-up: %w", cl.id, err)
			}
		}
		return nil
	}
	if err := sendAll(); err != nil {
		return 0, err
	}
	for _, cl := range clients {
		for waiting := true; waiting; {
			select {
			case <-cl.warm:
				waiting = false
			case <-tick.C:
				if time.Now().After(deadline) {
					waiting = false // the stragglers are counted as not warm
					continue
				}
				if err := sendAll(); err != nil {
					return 0, err
				}
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	for _, cl := range clients {
		select {
		case <-cl.warm:
		default:
			notWarm++
		}
	}
	return notWarm, nil
}

// send is a client's sender: each frame of its schedule, written with write
// at its due time or as soon after it as the client gets round to it (none is
// skipped), stamped with the due time.
func (r *steadyRun) send(ctx context.Context, cl *steadyClient, write func(op ws.Opcode, b []byte) error) error {
	cfg := r.cfg
	n := r.plan.Frames(cl.id)
	text := make([]byte, 0, cfg.Mix.JSONMax+64)
	var bin []byte // allocated at the first binary frame, filled once
	for k := range n {
		due := r.t0 + int64(r.plan.Due(cl.id, k))
		// Precise pauses (Pause), at most maxPause each, so that a run
		// that is cancelled stops soon.
		for wait := due - r.now(); wait > 0; wait = due - r.now() {
			if err := ctx.Err(); err != nil {
				return err
			}
			Pause(min(time.Duration(wait), maxPause))
		}
		now := r.now()
		cl.lag.Record(time.Duration(now - due))
		r.sentAt[cl.id][k].Store(now)
		size, isBinary := cfg.Mix.Frame(cfg.Seed, cl.id, k)
		var err error
		if isBinary {
			if bin == nil {
				bin = make([]byte, cfg.Mix.BinaryMax)
				for i := range bin {
					bin[i] = byte(i * 7) // filler: what audio would be
				}
			}
			putSteadyBinary(bin, cl.id, k, due)
			err = write(ws.BinaryMessage, bin[:size])
			cl.binary++
		} else {
			text = appendSteadyJSON(text[:0], false, cl.id, k, due, size)
			err = write(ws.TextMessage, text)
		}
		if err != nil {
			return fmt.Errorf("frame %d: %w", k, err)
		}
		cl.sent++
		cl.bytes += int64(size)
	}
	return nil
}

// maxPause is the longest a sender pauses before it looks at its context.
const maxPause = 50 * time.Millisecond

// receive is a client's read loop: it records the latency of every first
// delivery until the client has every frame of the plan, or its connection
// fails or reaches the drain deadline.
func (r *steadyRun) receive(cl *steadyClient) {
	defer func() {
		if cl.nWarm < len(cl.warmed) {
			close(cl.warm) // the warm-up does not wait for a failed client
		}
	}()
	var buf []byte
	for {
		op, b, err := cl.c.ReadMessageInto(bg, buf[:0])
		now := r.now()
		if err != nil {
			if !isTimeout(err) {
				r.errs.add("client %d: receive: %v", cl.id, err)
			}
			return
		}
		buf = b
		kind, from, seq, t := parseSteady(op == ws.BinaryMessage, b)
		switch kind {
		case kindRun:
			if cl.streams.Observe(from, uint64(seq)) {
				cl.latency.Record(time.Duration(now - t))
				if sent := r.sentAt[from][seq].Load(); sent != 0 {
					cl.fromSend.Record(time.Duration(now - sent))
				}
				cl.last = now
				cl.count.Add(1)
				if cl.got++; cl.got == r.planned {
					return
				}
			}
		case kindWarmup:
			if from >= 0 && from < len(cl.warmed) && !cl.warmed[from] {
				cl.warmed[from] = true
				if cl.nWarm++; cl.nWarm == len(cl.warmed) {
					close(cl.warm)
				}
			}
		}
	}
}

// drain waits for the receivers to have every frame, for at most the
// timeout after the last frame was sent; then it ends the stragglers.
func (r *steadyRun) drain(clients []*steadyClient, receiving *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { receiving.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(r.cfg.Timeout):
	}
	for _, cl := range clients {
		cl.c.SetReadDeadline(time.Now()) // a timeout, not an error: what is missing counts as lost
	}
	<-done
}

// result adds up the clients' counts.
func (r *steadyRun) result(clients []*steadyClient, usage cpuUsage, end int64, notWarm int, warmWait time.Duration) *SteadyResult {
	cfg := r.cfg
	res := &SteadyResult{
		Clients: cfg.Clients, Rate: cfg.Rate, BinaryShare: cfg.Mix.BinaryShare, Duration: cfg.Duration,
		Planned: int64(r.plan.Total()), WarmupWait: warmWait, NotWarm: notWarm,
		Latency: stats.NewHistogram(), SendLag: stats.NewHistogram(), FromSend: stats.NewHistogram(),
		CPUFigures: usage.figures(time.Duration(end-r.t0), cfg.ServerPID),
	}
	sent := make([]int, len(clients))
	for i, cl := range clients {
		sent[i] = cl.sent
		res.Sent += int64(cl.sent)
		res.SentBinary += cl.binary
		res.SentBytes += cl.bytes
		res.SendLag.Merge(cl.lag)
	}
	var last int64
	for _, cl := range clients {
		tot := cl.streams.Totals()
		res.Delivered += int64(tot.Distinct)
		res.OutOfOrder += int64(tot.OutOfOrder)
		res.Duplicates += int64(tot.Duplicates)
		res.Unexpected += int64(tot.Unexpected)
		res.Lost += int64(cl.streams.Lost(sent))
		res.Latency.Merge(cl.latency)
		res.FromSend.Merge(cl.fromSend)
		last = max(last, cl.last)
	}
	res.Expected = res.Sent * int64(len(clients))
	res.ConnErrors, res.Errors = r.errs.n, r.errs.msgs
	if last > r.t0 {
		res.Elapsed = time.Duration(last - r.t0)
	}
	res.DeliveriesPerSec = stats.Rate(int(res.Delivered), res.Elapsed)
	return res
}
