package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovbus/ovbus/bus"
)

// Node is one ovbus node of a cluster: it carries the frames its bus accepts
// to the other nodes and publishes theirs into its bus's log.
//
// Use it in this order: New (before bus.New: Sequencer goes into
// bus.Options), Start (after the bus has started), Shutdown (after the
// bus's Shutdown, so that what the bus accepted still crosses). Its methods
// are safe for concurrent use.
type Node struct {
	o         Options
	log       *slog.Logger
	flushLog  func()    // writes the rate limiter's pending summaries
	emb       *embedded // nil with an external NATS
	nc        *nats.Conn
	js        jetstream.JetStream // order total
	stream    string
	subj      subjects
	ackPrefix string // order total: the stream's answers come to ackPrefix.<Ovbus-Seq>
	m         *metrics

	// This process's incarnation (Ovbus-Inc) and when it started.
	inc       uint64
	incStr    string
	startedAt time.Time

	bus atomic.Pointer[bus.Server]

	// the link's state (link.go)
	up        atomic.Bool
	stateWord atomic.Value           // "starting", "up", "relaxed" or "down"
	detail    atomic.Pointer[string] // the rest of the /health line
	probeErr  atomic.Pointer[string] // what the last probe found wrong; "" when nothing
	leader    atomic.Pointer[string] // order total: the stream's leader, by the last probe
	copies    atomic.Pointer[string] // order total: its copies that are current, by the last probe
	closing   atomic.Bool
	startErr  error // a startup check that failed after a late connection
	// watch goroutine only
	checked   bool // the external server was checked
	misses    int  // stream probes unanswered in a row
	leadDone  bool // Options.Lead, since the link came up: this node leads or gave up,
	leadTries int  // the requests made,
	leadNext  time.Time
	leadAgain time.Time // when a node that gave up asks again (zero: it leads)
	led       bool      // this node led the stream at a probe since
	moveNext  time.Time // the next leadership request for a peer that cannot reach the leader

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// order total: the frames Sequence queued for publishLoop; pubStop ends
	// it once everything is confirmed, pubAbort at once; pubDone says it
	// has ended
	outC     chan outFrame
	out      outbox
	pubStop  chan struct{}
	pubAbort chan struct{}
	pubDone  chan struct{}
	seenLast uint64           // the stream's last sequence at the previous probe (in.mu)
	streamH  jetstream.Stream // the stream, once found (in.mu)

	// order sender: the forwarder's context, and done when it has ended
	fwdStop   context.Context
	fwdCancel context.CancelFunc
	fwdDone   chan struct{}
	fwdBatch  []outFrame // the forwarder's scratch
	fwdSeq    uint64     // the number of the last frame it sent

	in       inbox
	ring     ring
	lastSent atomic.Uint64  // the number of the last frame sent (heartbeats)
	asks     chan *nats.Msg // replay requests, published by askLoop
	peer     peers          // who hears whom (peers.go)

	mu       sync.Mutex
	sub      *nats.Subscription // order total: the stream's republished messages
	lossLog  map[string]time.Time
	closedC  chan struct{}
	stateLog string
}

// subjects are the NATS subjects of one cluster. A node's name is one
// token of letters, digits, '-' and '_' (Options.Validate), so it can end
// a subject.
type subjects struct {
	stream   string // order total: what the stream stores
	ordered  string // order total: where it republishes it
	direct   string // frames sent directly to the other nodes
	hb       string // heartbeats
	replay   string // + a node's name: requests for its frames
	replayed string // + a node's name: the answers
}

func newSubjects(name string, order Order) subjects {
	base := "ovbus." + name + "." + string(order)
	return subjects{
		stream:   "ovbus." + name + ".total",
		ordered:  "ovbus." + name + ".ordered",
		direct:   base + ".direct",
		hb:       base + ".hb",
		replay:   base + ".replay.",
		replayed: base + ".replayed.",
	}
}

// New checks the options, starts the embedded NATS server (listen/routes)
// or connects to the external one (nats_url), and returns the node. An
// external NATS that cannot be reached now is not an error: the node starts
// with its link down and keeps trying. One that is reached and cannot carry
// the cluster (no JetStream with order "total", a max_payload under the
// bus's max_msg_size) is an error.
func New(opts Options) (*Node, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.WithDefaults()
	now := time.Now()
	logH, flush := bus.RateLimitWarnings(o.Logger.Handler(), 0, 0)
	n := &Node{
		o:         o,
		log:       slog.New(logH),
		flushLog:  flush,
		stream:    "OVBUS_" + o.Name,
		subj:      newSubjects(o.Name, o.Order),
		m:         newMetrics().observers(),
		inc:       uint64(now.UnixNano()),
		startedAt: now,
		lossLog:   make(map[string]time.Time),
		closedC:   make(chan struct{}),
		in:        inbox{origins: make(map[string]*origin)},
		peer:      peers{m: make(map[string]*peer)},
		asks:      make(chan *nats.Msg, askQueue),
		ring:      ring{maxBytes: o.StreamMaxBytes, maxAge: o.StreamMaxAge},
	}
	n.incStr = strconv.FormatUint(n.inc, 10)
	n.o.Logger = n.log
	n.stateWord.Store("starting")
	n.setDetail("connecting")
	empty := ""
	n.probeErr.Store(&empty)
	n.leader.Store(&empty)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.fwdStop, n.fwdCancel = context.WithCancel(context.Background())
	copts := []nats.Option{
		nats.Name("ovbus " + o.NodeName),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// Frames that cannot be published now are sent again from the
		// node's own buffers (the stream's pending, the ring), in order.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { n.probeSoon() }),
		nats.ReconnectHandler(func(*nats.Conn) { n.probeSoon() }),
		nats.ClosedHandler(func(*nats.Conn) { close(n.closedC) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			n.log.Warn("Cluster: NATS error", "error", shortErr(err))
		}),
	}
	if o.Order == OrderSender {
		copts = append(copts, nats.NoEcho()) // a node's own frames are already in its log
	}
	url := o.NATSURL
	if o.External() {
		copts = append(copts, externalAuth(&o)...)
		copts = append(copts, nats.RetryOnFailedConnect(true), nats.Timeout(2*time.Second))
	} else {
		emb, err := startEmbedded(&n.o)
		if err != nil {
			return nil, err
		}
		n.emb = emb
		// Over the embedded server's loopback client port, not in-process:
		// nats.go flushes a full buffer while it holds its connection's
		// lock, and nats-server's read loop may flush to the same client;
		// over net.Pipe, which buffers nothing, each waits for the other
		// (and nats.go's reader for the lock, to answer a PING) until the
		// server's write deadline. The kernel's socket buffers break the
		// cycle.
		url = emb.srv.ClientURL()
		copts = append(copts, nats.Token(emb.token))
	}
	nc, err := nats.Connect(url, copts...)
	if err != nil {
		n.shutdownServer()
		return nil, fmt.Errorf("cluster: connect to %s: %w", redactURLs(url), err)
	}
	n.nc = nc
	if o.Order == OrderTotal {
		js, err := jetstream.New(nc)
		if err != nil {
			n.close()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		n.js = js
		n.ackPrefix = nats.NewInbox()
		n.outC = make(chan outFrame, o.MaxInflight)
		n.out.kick = make(chan struct{}, 1)
		n.pubStop, n.pubAbort, n.pubDone = make(chan struct{}), make(chan struct{}), make(chan struct{})
	}
	if o.External() {
		// Give a reachable server a moment, so that the checks below can
		// refuse to start rather than log later.
		deadline := time.Now().Add(3 * time.Second)
		for !nc.IsConnected() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if nc.IsConnected() {
			if err := n.checkServer(); err != nil {
				n.close()
				return nil, err
			}
			n.checked = true
		} else {
			n.log.Warn("Cluster: NATS not reachable yet; serving this node's clients alone until it is", "url", redactURLs(o.NATSURL))
		}
	}
	return n, nil
}

// Sequencer returns what goes into bus.Options.Sequencer: the node with
// order "total", nil with order "sender" (the bus then appends its frames
// itself and the node follows its log).
func (n *Node) Sequencer() bus.Sequencer {
	if n.o.Order == OrderTotal {
		return n
	}
	return nil
}

// Name returns this node's name, the origin of its frames on the others.
func (n *Node) Name() string { return n.o.NodeName }

// checkServer refuses an external server that cannot carry the cluster,
// naming every reason.
func (n *Node) checkServer() error {
	var errs []error
	if mp := n.nc.MaxPayload(); mp < n.o.MaxMsgSize+headerRoom {
		errs = append(errs, fmt.Errorf("cluster: the NATS server's max_payload is %d bytes, but websocket.max_msg_size is %d bytes (plus %d for headers): raise max_payload on the NATS server or lower max_msg_size",
			mp, n.o.MaxMsgSize, headerRoom))
	}
	if n.o.Order == OrderTotal {
		ctx, cancel := context.WithTimeout(n.ctx, 3*time.Second)
		defer cancel()
		if _, err := n.js.AccountInfo(ctx); err != nil {
			if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
				errors.Is(err, nats.ErrNoResponders) {
				errs = append(errs, fmt.Errorf("cluster: the NATS server at %s has no JetStream, which cluster.order \"total\" needs: enable JetStream on it (nats-server -js) or choose cluster.order \"sender\"",
					n.nc.ConnectedUrlRedacted()))
			} else {
				errs = append(errs, fmt.Errorf("cluster: JetStream on %s: %w", n.nc.ConnectedUrlRedacted(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Start joins the node to b: it registers the "cluster" line of /health and
// the cluster metrics, subscribes to the other nodes' frames and starts
// carrying frames. b must have been built with Sequencer() in its options.
func (n *Node) Start(b *bus.Server) error {
	if !n.bus.CompareAndSwap(nil, b) {
		return errors.New("cluster: already started")
	}
	if err := n.m.register(b.Metrics()); err != nil {
		return fmt.Errorf("cluster: metrics: %w", err)
	}
	b.AddHealth("cluster", n.health)
	subs := []struct {
		subj string
		fn   nats.MsgHandler
	}{
		{n.subj.direct, func(m *nats.Msg) { n.receiveNATS(m, fromDirect) }},
		{n.subj.hb, n.heard},
		{n.subj.replay + n.o.NodeName, n.serveReplay},
		{n.subj.replayed + n.o.NodeName, n.replayed},
	}
	if n.o.Order == OrderTotal {
		subs = append(subs, struct {
			subj string
			fn   nats.MsgHandler
		}{n.ackPrefix + ".*", n.onAck})
	}
	for _, s := range subs {
		sub, err := n.nc.Subscribe(s.subj, s.fn)
		if err != nil {
			return fmt.Errorf("cluster: subscribe: %w", err)
		}
		// What a node cannot take in time is dropped by nats.go and, seen
		// as a gap, asked for again (replay.go): bounded, never lost.
		if err := sub.SetPendingLimits(n.o.MaxPendingMessages, int(n.o.MaxPendingBytes)); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if n.o.Order == OrderSender {
		n.fwdDone = make(chan struct{})
		go n.forward(b)
	} else {
		go n.publishLoop()
	}
	n.wg.Add(3)
	go n.watch()
	go n.heartbeats()
	go n.askLoop()
	return nil
}

// lost counts k frames that did not cross (dir "out") or did not reach this
// node's log (dir "in") and logs it, at most once every 10 s per reason.
func (n *Node) lost(dir, reason string, k int) {
	if k <= 0 {
		return
	}
	n.m.dropped.WithLabelValues(dir, reason).Add(float64(k))
	key := dir + "/" + reason
	n.mu.Lock()
	last := n.lossLog[key]
	now := time.Now()
	logIt := now.Sub(last) >= 10*time.Second
	if logIt {
		n.lossLog[key] = now
	}
	n.mu.Unlock()
	if logIt && !n.closing.Load() {
		n.log.Warn("Cluster: frames lost", "direction", dir, "reason", reason, "count", k,
			"note", "counted in ovbus_cluster_dropped_total; logged at most every 10s")
	}
}

// Shutdown drains the node: frames its bus accepted before the bus's
// Shutdown still cross (bounded by ctx), then the connection and the
// embedded server close. Call it after the bus's Shutdown.
func (n *Node) Shutdown(ctx context.Context) error {
	if !n.closing.CompareAndSwap(false, true) {
		<-n.closedC
		return nil
	}
	var errs []error
	if n.o.Order == OrderSender {
		n.waitForwarder(ctx)
	} else if n.js != nil {
		close(n.pubStop)
		if n.bus.Load() != nil {
			select {
			case <-n.pubDone:
			case <-ctx.Done():
				close(n.pubAbort)
				<-n.pubDone
				n.out.mu.Lock()
				k := n.out.frames
				n.out.mu.Unlock()
				errs = append(errs, fmt.Errorf("cluster: %d frames still unconfirmed by the stream: %w", k, ctx.Err()))
			}
		}
	}
	n.cancel()
	n.wg.Wait()
	if err := n.nc.Drain(); err == nil {
		select {
		case <-n.closedC:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("cluster: drain: %w", ctx.Err()))
		}
	}
	n.nc.Close()
	n.shutdownServer()
	n.setState("down", "shut down")
	n.flushLog()
	return errors.Join(errs...)
}

// close undoes New.
func (n *Node) close() {
	n.cancel()
	n.nc.Close()
	n.shutdownServer()
}

func (n *Node) shutdownServer() {
	if n.emb != nil {
		n.emb.shutdown()
	}
}

// redactURLs hides the passwords of a comma-separated URL list.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
