package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
	"github.com/ovbus/ovbus/ws"
)

// Defaults of FanoutConfig's zero fields.
const (
	DefaultClients  = 20
	DefaultMessages = 1000
	DefaultSize     = 256
	DefaultWarmup   = 10
	DefaultTimeout  = 5 * time.Second
	// DefaultConnectConcurrency is how many connections are being opened at
	// once. The upstream benchmark connects one by one; a few at a time is
	// faster and still gentle with accept backlogs.
	DefaultConnectConcurrency = 16
)

// ClientBoundShare is the share of one core above which a report warns that
// the client, not the bus, may have been the bottleneck.
const ClientBoundShare = 0.8

// FanoutConfig describes one run of the OVOS fan-out benchmark
// (docs/protocol.md §10). A zero field means its default.
type FanoutConfig struct {
	// URL of the bus, ws:// or wss://. Several comma-separated URLs are the
	// nodes of one clustered bus: the sender connects to the first, the
	// subscribers to each in turn.
	URL string
	// Clients is the number of subscribers (M); Messages the number of
	// timed messages the sender sends (N).
	Clients, Messages int
	// Size is the length of every message in bytes (rounded up to the
	// smallest message that carries a sequence number and a timestamp).
	Size int
	// Warmup messages are sent and received before the timed phase; a
	// negative value means none.
	Warmup int
	// Timeout ends a subscriber that waits longer than this for a message.
	Timeout time.Duration
	// Rate, when positive, sends at that many messages per second (open
	// loop): each message carries its scheduled send time, so a bus that
	// falls behind is charged for the wait (no coordinated omission). Zero
	// sends back to back.
	Rate float64
	// NoGreeting is for buses that send no greeting on connect.
	NoGreeting bool
	// DrainSender reads and discards the sender's own echoes during the run.
	// The upstream benchmark's sender never reads (docs/protocol.md §3), which is the
	// default.
	DrainSender bool
	Measure
}

// Measure is how a run reaches the bus and measures it; the runs' configs
// embed it. A zero field means its default.
type Measure struct {
	// ServerPID, when positive, is the bus process whose CPU time is
	// measured over the timed phase; ServerPIDs are more processes whose
	// time is added (the other nodes of a cluster).
	ServerPID  int
	ServerPIDs []int
	// ConnectConcurrency bounds the connections being opened at once
	// (DefaultConnectConcurrency).
	ConnectConcurrency int
	// Dial is used for every connection; nil means the runner's defaults
	// (no proxy, read buffers sized for the number of clients).
	Dial *ws.DialOptions
	// Progress, when set, is called about ten times a second during the
	// timed phase with what was received so far and what is expected (0
	// when unknown).
	Progress func(done, expected int64)
}

func (m Measure) withDefaults() Measure {
	if m.ConnectConcurrency <= 0 {
		m.ConnectConcurrency = DefaultConnectConcurrency
	}
	return m
}

// pids are the processes whose CPU time is the server's.
func (m Measure) pids() []int { return append([]int{m.ServerPID}, m.ServerPIDs...) }

func (c FanoutConfig) withDefaults() FanoutConfig {
	if c.Clients <= 0 {
		c.Clients = DefaultClients
	}
	if c.Messages <= 0 {
		c.Messages = DefaultMessages
	}
	if c.Size <= 0 {
		c.Size = DefaultSize
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultWarmup
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Measure = c.Measure.withDefaults()
	return c
}

// FanoutResult is the outcome of one fan-out run.
type FanoutResult struct {
	Clients, Messages, Size, Warmup int
	Rate                            float64

	Expected   int64 // Clients × Messages
	Delivered  int64 // distinct timed messages received by the subscribers
	Dropped    int64 // Expected − Delivered
	OutOfOrder int64 // deliveries that came after a higher sequence number
	Duplicates int64 // timed messages a subscriber received more than once
	ConnErrors int   // failed connects (greeting included) + receiver and sender failures
	Timeouts   int   // subscribers ended by the receive timeout
	Errors     []string

	// WarmupWait is how long the warm-up took, from the first warm-up
	// message until every subscriber had the last one; NotWarm counts the
	// subscribers that did not have it within the timeout.
	WarmupWait time.Duration
	NotWarm    int

	// Elapsed runs from the first send to the last delivery; SendTime from
	// the first send to the end of the last write.
	Elapsed, SendTime time.Duration
	// DeliveriesPerSec is Delivered ÷ Elapsed: (M·N − dropped) ÷ (first
	// send → last delivery).
	DeliveriesPerSec float64
	Latency          stats.Summary

	// CPUFigures run from just before the first send until every
	// subscriber finished (Wall).
	CPUFigures
}

// ClientCPUPerDelivery and ServerCPUPerDelivery are CPU time per delivered
// message (0 when nothing was delivered or the figure is unknown).
func (r *FanoutResult) ClientCPUPerDelivery() time.Duration {
	return r.CPUFigures.ClientCPUPerDelivery(r.Delivered)
}

func (r *FanoutResult) ServerCPUPerDelivery() time.Duration {
	return r.CPUFigures.ServerCPUPerDelivery(r.Delivered)
}

// subscriber is one receiving connection.
type subscriber struct {
	c       *ws.Conn
	samples *stats.Samples
	order   *stats.Order
	count   atomic.Int64 // deliveries so far, for the progress display
	last    int64        // ns since start of the last delivery
	warm    chan struct{}
	timeout bool
}

// fanoutRun is the state shared by the goroutines of one run.
type fanoutRun struct {
	cfg   FanoutConfig
	start time.Time // the run's clock: every t is time.Since(start)
	dial  *ws.DialOptions
	errs  errorLog
}

func (r *fanoutRun) now() int64 { return int64(time.Since(r.start)) }

// RunFanout runs the fan-out benchmark once against cfg.URL. It returns an
// error only when the run could not take place at all (no connection, no
// sender); failures of single connections are counted in the result.
func RunFanout(ctx context.Context, cfg FanoutConfig) (*FanoutResult, error) {
	cfg = cfg.withDefaults()
	if cfg.Size < minMessageSize {
		cfg.Size = minMessageSize
	}
	r := &fanoutRun{cfg: cfg, start: time.Now(), dial: dialOptions(cfg.Dial, cfg.Clients, cfg.Size)}

	// Subscribers first, then the sender (docs/protocol.md §10); every connection
	// takes its greeting before the next phase.
	subs := make([]*subscriber, cfg.Clients)
	var conns connSet // closed at the end or on cancel
	defer conns.closeAll()
	stop := conns.closeOnCancel(ctx)
	defer stop()

	urls := strings.Split(cfg.URL, ",")
	connectAll(ctx, cfg.Clients, cfg.ConnectConcurrency, func(i int) {
		c, err := r.connect(ctx, urls[i%len(urls)])
		if err != nil {
			r.errs.add("subscriber connect: %v", err)
			return
		}
		conns.add(c)
		subs[i] = &subscriber{
			c:       c,
			samples: stats.NewSamples(cfg.Messages),
			order:   stats.NewOrder(cfg.Messages),
			warm:    make(chan struct{}),
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	live := slices.DeleteFunc(subs, func(s *subscriber) bool { return s == nil })
	if len(live) == 0 {
		return nil, fmt.Errorf("no subscriber could connect to %s: %s", cfg.URL, r.errs.first())
	}
	sender, err := r.connect(ctx, urls[0])
	if err != nil {
		return nil, fmt.Errorf("sender: %w", err)
	}
	conns.add(sender)

	// Receivers run from here to the end of the run.
	var done sync.WaitGroup
	for _, s := range live {
		done.Add(1)
		go func() {
			defer done.Done()
			r.receive(s)
		}()
	}
	if cfg.DrainSender {
		go func() {
			var buf []byte
			for {
				_, b, err := sender.ReadMessageInto(bg, buf[:0])
				if err != nil {
					return
				}
				buf = b
			}
		}()
	}

	// Warm-up: W messages, then wait until every subscriber saw the last
	// one (or gave up), so the timed phase starts with every subscriber in
	// the fan-out.
	msg := make([]byte, 0, cfg.Size+32)
	warmStart := r.now()
	if cfg.Warmup > 0 {
		for i := 0; i < cfg.Warmup; i++ {
			msg = appendMessage(msg[:0], true, int64(i), r.now(), cfg.Size)
			if err := sender.WriteMessage(bg, ws.TextMessage, msg); err != nil {
				return nil, fmt.Errorf("sender: warm-up: %w", err)
			}
		}
		if err := r.awaitWarm(ctx, sender, live, msg); err != nil {
			return nil, err
		}
	}
	warmWait := time.Duration(r.now() - warmStart)
	notWarm := 0
	for _, s := range live {
		select {
		case <-s.warm:
		default:
			notWarm++
		}
	}

	// Timed phase.
	cpu := startCPU(cfg.pids()...)
	stopProgress := startProgress(cfg.Progress, int64(cfg.Clients)*int64(cfg.Messages), func() int64 {
		var n int64
		for _, s := range live {
			n += s.count.Load()
		}
		return n
	})
	first, lastSend, sendErr := r.send(ctx, sender, msg)
	if sendErr != nil {
		r.errs.add("sender: %v", sendErr)
	}
	done.Wait()
	end := r.now()
	stopProgress()
	usage := cpu.stop(time.Duration(end - first))

	res := &FanoutResult{
		Clients: cfg.Clients, Messages: cfg.Messages, Size: cfg.Size, Warmup: cfg.Warmup, Rate: cfg.Rate,
		Expected:   int64(cfg.Clients) * int64(cfg.Messages),
		SendTime:   time.Duration(lastSend - first),
		CPUFigures: usage.figures(time.Duration(end-first), cfg.ServerPID),
		WarmupWait: warmWait, NotWarm: notWarm,
	}
	var lastDelivery int64
	all := stats.NewSamples(cfg.Clients * cfg.Messages)
	for _, s := range live {
		all.Merge(s.samples)
		res.Delivered += int64(s.order.Distinct)
		res.OutOfOrder += int64(s.order.OutOfOrder)
		res.Duplicates += int64(s.order.Duplicates)
		if s.timeout {
			res.Timeouts++
		}
		if s.last > lastDelivery {
			lastDelivery = s.last
		}
	}
	res.Dropped = int64(stats.Drops(int(res.Expected), int(res.Delivered)))
	res.ConnErrors = r.errs.n
	res.Errors = r.errs.msgs
	if lastDelivery > first {
		res.Elapsed = time.Duration(lastDelivery - first)
	}
	res.DeliveriesPerSec = stats.Rate(int(res.Delivered), res.Elapsed)
	res.Latency = all.Summary()
	return res, nil
}

// connect dials one connection to url and takes its greeting.
func (r *fanoutRun) connect(ctx context.Context, url string) (*ws.Conn, error) {
	return connectGreeted(ctx, strings.TrimSpace(url), r.dial, r.cfg.NoGreeting, r.cfg.Timeout)
}

// receive is a subscriber's read loop: it records receive − send for every
// timed message until it has all of them, the receive timeout passes, or
// the connection fails.
func (r *fanoutRun) receive(s *subscriber) {
	cfg := r.cfg
	warm := false
	setWarm := func() {
		if !warm {
			warm = true
			close(s.warm)
		}
	}
	if cfg.Warmup == 0 {
		setWarm()
	}
	defer setWarm()

	// The deadline is moved forward at most every 50 ms: a subscriber ends
	// after between Timeout−50ms and Timeout without a message.
	const slack = int64(50 * time.Millisecond)
	timeout := int64(cfg.Timeout)
	deadlineSetAt := r.now()
	s.c.SetReadDeadline(r.start.Add(time.Duration(deadlineSetAt + timeout)))

	buf := make([]byte, 0, cfg.Size+64)
	lastWarm := int64(cfg.Warmup - 1)
	for {
		_, b, err := s.c.ReadMessageInto(bg, buf[:0])
		now := r.now()
		if err != nil {
			if isTimeout(err) {
				s.timeout = true
			} else {
				r.errs.add("subscriber: %v", err)
			}
			return
		}
		buf = b
		kind, seq, t := parseMessage(b)
		switch kind {
		case kindRun:
			before := s.order.Distinct
			s.order.Observe(uint64(seq))
			if s.order.Distinct > before {
				s.samples.Add(time.Duration(now - t))
				s.last = now
				s.count.Add(1)
			}
			setWarm()
			if s.order.Distinct == cfg.Messages {
				return
			}
		case kindWarmup:
			if seq >= lastWarm {
				setWarm()
			}
		}
		if now-deadlineSetAt > slack {
			deadlineSetAt = now
			s.c.SetReadDeadline(r.start.Add(time.Duration(now + timeout)))
		}
	}
}

// awaitWarm waits until every subscriber has seen the last warm-up message,
// or the timeout passed. A bus may send its greeting before the client has
// joined the fan-out (docs/protocol.md §2 allows it), so a subscriber can miss the first
// warm-up messages: the last one is sent again every 20 ms until everyone
// has it.
func (r *fanoutRun) awaitWarm(ctx context.Context, sender *ws.Conn, live []*subscriber, msg []byte) error {
	deadline := time.Now().Add(r.cfg.Timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, s := range live {
		for waiting := true; waiting; {
			select {
			case <-s.warm:
				waiting = false
			case <-tick.C:
				if time.Now().After(deadline) {
					return nil // the stragglers have ended or will time out
				}
				msg = appendMessage(msg[:0], true, int64(r.cfg.Warmup-1), r.now(), r.cfg.Size)
				if err := sender.WriteMessage(bg, ws.TextMessage, msg); err != nil {
					return fmt.Errorf("sender: warm-up: %w", err)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// send sends the timed messages and returns the time of the first send and
// the end of the last write, on the run's clock.
func (r *fanoutRun) send(ctx context.Context, c *ws.Conn, msg []byte) (first, last int64, err error) {
	cfg := r.cfg
	first = r.now()
	if cfg.Rate <= 0 {
		for i := 0; i < cfg.Messages; i++ {
			t := r.now()
			if i == 0 {
				first = t
			}
			msg = appendMessage(msg[:0], false, int64(i), t, cfg.Size)
			if err := c.WriteMessage(bg, ws.TextMessage, msg); err != nil {
				return first, r.now(), err
			}
		}
		return first, r.now(), nil
	}
	// Open loop: message i is due at first + i/Rate and carries that time.
	interval := float64(time.Second) / cfg.Rate
	for i := 0; i < cfg.Messages; i++ {
		due := first + int64(float64(i)*interval)
		if wait := due - r.now(); wait > 0 {
			select {
			case <-time.After(time.Duration(wait)):
			case <-ctx.Done():
				return first, r.now(), ctx.Err()
			}
		}
		msg = appendMessage(msg[:0], false, int64(i), due, cfg.Size)
		if err := c.WriteMessage(bg, ws.TextMessage, msg); err != nil {
			return first, r.now(), err
		}
	}
	return first, r.now(), nil
}
