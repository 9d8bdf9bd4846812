package cluster

import (
	"context"
	"encoding/json"
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
	"github.com/ovbus/ovbus/ws"
)

// The NATS headers a frame crosses with; its bytes are the message's data,
// unchanged. (nats.go reads header names in canonical MIME form.)
const (
	hdrOrigin = "Ovbus-Origin" // the node whose client sent the frame
	hdrOp     = "Ovbus-Op"     // "binary" for a binary frame; absent for text
	hdrSent   = "Ovbus-Sent"   // when the origin accepted it, Unix nanoseconds
)

// probeInterval is how often the link is checked. probeAnswer is how long a
// probe waits for the stream's answer, and probeMisses how many probes in a
// row must go unanswered before an up link is taken down: a stream leader
// busy for a moment (storing a large frame on a loaded machine) is not a
// lost quorum, and taking the link down sends every frame of the meantime
// to this node's clients only. A definite answer (an error, no route, the
// NATS connection lost) takes the link down at once.
const (
	probeInterval = 500 * time.Millisecond
	probeAnswer   = 2 * time.Second
	probeMisses   = 3
)

// Node is one ovbus node of a cluster: it carries the frames its bus accepts
// to the other nodes and publishes theirs into its bus's log.
//
// Use it in this order: New (before bus.New: Sequencer goes into
// bus.Options), Start (after the bus has started), Shutdown (after the
// bus's Shutdown, so that what the bus accepted still crosses). Its methods
// are safe for concurrent use.
type Node struct {
	o       Options
	log     *slog.Logger
	emb     *embedded // nil with an external NATS
	nc      *nats.Conn
	js      jetstream.JetStream // order total
	subject string              // where the node publishes its frames
	ordered string              // order total: where the stream republishes them
	stream  string
	m       *metrics

	bus atomic.Pointer[bus.Server]

	up       atomic.Bool
	detail   atomic.Pointer[string] // why the link is down, or what it is up on
	closing  atomic.Bool
	startErr error // a startup check that failed after a late connection
	checked  bool  // the external server was checked (watch goroutine only)
	misses   int   // stream probes unanswered in a row (watch goroutine only)
	// Options.Lead, since the link came up (watch goroutine only): this
	// node leads or gave up, the requests made, when to look again
	leadDone  bool
	leadTries int
	leadNext  time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// order total: the frames Sequence queued for publishLoop; pubStop
	// ends it (once the queue is empty), pubDone says it has ended
	outC    chan outFrame
	pubStop chan struct{}
	pubDone chan struct{}

	// order sender: the forwarder's context, and done when it has ended
	fwdStop   context.Context
	fwdCancel context.CancelFunc
	fwdDone   chan struct{}
	fwdBatch  []outFrame // the forwarder's scratch

	mu       sync.Mutex
	sub      *nats.Subscription // the other nodes' frames (sender), the stream's (total)
	lastSeq  uint64             // the last stream sequence received (order total)
	dropped  int                // the subscription's drops already counted (order sender)
	lossLog  map[string]time.Time
	closedC  chan struct{}
	stateLog string
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
	o := opts.withDefaults()
	n := &Node{
		o:       o,
		log:     o.Logger,
		subject: "ovbus." + o.Name + "." + string(o.Order),
		ordered: "ovbus." + o.Name + ".ordered",
		stream:  "OVBUS_" + o.Name,
		m:       newMetrics().observers(),
		lossLog: make(map[string]time.Time),
		closedC: make(chan struct{}),
	}
	n.setDetail("connecting")
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.fwdStop, n.fwdCancel = context.WithCancel(context.Background())
	copts := []nats.Option{
		nats.Name("ovbus " + o.NodeName),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// Frames that cannot cross now are counted, not replayed later.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { n.probeSoon() }),
		nats.ReconnectHandler(func(*nats.Conn) { n.probeSoon() }),
		nats.ClosedHandler(func(*nats.Conn) { close(n.closedC) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if !errors.Is(err, nats.ErrSlowConsumer) {
				n.log.Warn("Cluster: NATS error", "error", err)
			}
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
		emb, err := startEmbedded(&o)
		if err != nil {
			return nil, err
		}
		n.emb = emb
		url = "nats://in-process"
		copts = append(copts, nats.InProcessServer(emb.srv), nats.Token(emb.token))
	}
	nc, err := nats.Connect(url, copts...)
	if err != nil {
		n.shutdownServer()
		return nil, fmt.Errorf("cluster: connect to %s: %w", redactURLs(url), err)
	}
	n.nc = nc
	if o.Order == OrderTotal {
		js, err := jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(max(1, o.MaxInflight/16)), // messages, each of one or more frames
			jetstream.WithPublishAsyncTimeout(5*time.Second),
			jetstream.WithPublishAsyncErrHandler(n.publishFailed))
		if err != nil {
			n.close()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		n.js = js
		n.outC = make(chan outFrame, o.MaxInflight)
		n.pubStop, n.pubDone = make(chan struct{}), make(chan struct{})
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
// the cluster metrics, and starts carrying frames. b must have been built
// with Sequencer() in its options.
func (n *Node) Start(b *bus.Server) error {
	if !n.bus.CompareAndSwap(nil, b) {
		return errors.New("cluster: already started")
	}
	if err := n.m.register(b.Metrics()); err != nil {
		return fmt.Errorf("cluster: metrics: %w", err)
	}
	b.AddHealth("cluster", n.health)
	if n.o.Order == OrderSender {
		if err := n.startSender(b); err != nil {
			return err
		}
	}
	if n.o.Order == OrderTotal {
		go n.publishLoop()
	}
	n.wg.Add(1)
	go n.watch()
	return nil
}

// health is the "cluster" line of /health. It never makes /health fail: a
// node whose link is down still serves its own clients, so a load balancer
// should keep sending them.
func (n *Node) health() (string, bool) {
	d := *n.detail.Load()
	if n.up.Load() {
		return "up (" + d + ")", true
	}
	return "down: " + d, true
}

// Up reports whether the link to the cluster is up.
func (n *Node) Up() bool { return n.up.Load() }

func (n *Node) setDetail(s string) { n.detail.Store(&s) }

// setState records the link's state, logging a change once.
func (n *Node) setState(up bool, detail string) {
	n.setDetail(detail)
	was := n.up.Swap(up)
	if up {
		n.m.linkUp.Set(1)
	} else {
		n.m.linkUp.Set(0)
	}
	n.mu.Lock()
	key := strconv.FormatBool(up)
	if !up {
		key += detail
	}
	changed := was != up || (!up && n.stateLog != key)
	n.stateLog = key
	n.mu.Unlock()
	if !changed || n.closing.Load() {
		return
	}
	if was != up {
		n.m.linkChanges.Inc()
	}
	if up {
		n.log.Info("Cluster link up", "cluster", n.o.Name, "node", n.o.NodeName, "order", string(n.o.Order), "state", detail)
	} else if was {
		n.log.Warn("Cluster link down; serving this node's clients alone until it is back", "cluster", n.o.Name, "reason", detail)
	} else {
		n.log.Info("Cluster link not up yet", "cluster", n.o.Name, "reason", detail)
	}
}

// probeSoon is called by the connection's handlers; the watch loop probes
// every probeInterval anyway, this only updates the state at once.
func (n *Node) probeSoon() {
	if !n.nc.IsConnected() {
		n.setState(false, "not connected to NATS")
	}
}

// watch keeps the link's state and, with order "total", the stream and its
// consumer; it ends on Shutdown.
func (n *Node) watch() {
	defer n.wg.Done()
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		n.probe()
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe checks the link once.
func (n *Node) probe() {
	if !n.up.Load() {
		// ask again once the link is up (Options.Lead)
		n.leadDone, n.leadTries, n.leadNext = false, 0, time.Time{}
		n.misses = 0
	}
	if !n.nc.IsConnected() {
		n.setState(false, "not connected to NATS")
		return
	}
	if n.o.External() && !n.checked {
		// Once, at the first connection (New did it when it could connect).
		n.checked = true
		if err := n.checkServer(); err != nil {
			n.startErr = err
			n.log.Error("Cluster: the NATS server cannot carry this cluster", "error", err)
		}
	}
	if n.startErr != nil {
		n.setState(false, n.startErr.Error())
		return
	}
	if n.o.Order == OrderSender {
		n.countSubDrops()
		if n.emb != nil && n.emb.peers() == 0 {
			n.setState(false, "no route to another node")
			return
		}
		n.setState(true, n.upDetail())
		return
	}
	if n.emb != nil && n.o.Replicas > 1 {
		// A node cut off from the majority of the stream's copies cannot
		// have frames stored: say so at once rather than after the stream
		// leader notices (up to 10 s).
		if nodes, need := n.emb.peers()+1, n.o.Replicas/2+1; nodes < need {
			n.setState(false, fmt.Sprintf("%d of the %d nodes the stream needs are reachable", nodes, need))
			return
		}
	}
	// (Frames nats.go drops here show as gaps in the stream's sequence:
	// consume counts them, as "behind".)
	if err := n.ensureStream(); err != nil {
		n.setState(false, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, probeAnswer)
	defer cancel()
	// One stream info request (js.Stream asks the stream's leader for it).
	s, err := n.js.Stream(ctx, n.stream)
	if err != nil {
		if unanswered(err) && n.up.Load() && n.ctx.Err() == nil {
			if n.misses++; n.misses < probeMisses {
				return // still up: see the next probe
			}
		}
		n.misses = 0
		n.setState(false, "stream "+n.stream+": "+shortErr(err))
		return
	}
	n.misses = 0
	d := n.upDetail()
	if info := s.CachedInfo(); info != nil && info.Cluster != nil && info.Cluster.Leader == n.o.NodeName {
		d += ", stream leader"
	}
	n.setState(true, d)
	if n.o.Lead && !n.leadDone {
		n.askLead(ctx, s.CachedInfo())
	}
}

// leadTries bounds the requests for the stream's leadership per link-up
// (Options.Lead), leadRetry spaces them: a handover the stream did not
// complete (its raft election went to another copy) is asked again.
const (
	leadTries = 5
	leadRetry = 2 * time.Second
)

// askLead asks the stream's leader to hand its leadership to this node
// (Options.Lead) after each time the link comes up, until it leads (at
// most leadTries times): a node that restarts takes it back, and two nodes
// with Lead set take turns only when their links change. Frames sent
// during a handover may be counted as "unconfirmed".
func (n *Node) askLead(ctx context.Context, info *jetstream.StreamInfo) {
	if info == nil || info.Cluster == nil || info.Cluster.Leader == "" || time.Now().Before(n.leadNext) {
		return // no leader yet, or a request is on its way: look at the next probe
	}
	if info.Cluster.Leader == n.o.NodeName {
		n.leadDone = true
		if n.leadTries > 0 {
			n.log.Info("Cluster: this node leads the stream (cluster.lead)", "stream", n.stream)
		}
		return
	}
	// A node that has just (re)joined holds an older copy until it has
	// caught up: leading before that would stall the stream.
	member, current := false, false
	for _, r := range info.Cluster.Replicas {
		if r != nil && r.Name == n.o.NodeName {
			member, current = true, r.Current && r.Lag == 0
		}
	}
	if !member {
		// More nodes than copies: the stream's copies are elsewhere.
		n.leadDone = true
		n.log.Warn("Cluster: this node holds no copy of the stream, so it cannot lead it (cluster.lead)",
			"stream", n.stream, "leader", info.Cluster.Leader, "replicas", n.o.Replicas)
		return
	}
	if !current {
		return
	}
	if n.leadTries >= leadTries {
		n.leadDone = true
		n.log.Warn("Cluster: the stream's leadership did not come to this node (cluster.lead); leaving it where it is",
			"stream", n.stream, "leader", info.Cluster.Leader, "requests", n.leadTries)
		return
	}
	n.leadTries++
	n.leadNext = time.Now().Add(leadRetry)
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": n.o.NodeName}})
	m, err := n.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+n.stream, req)
	if err == nil {
		var resp struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err = json.Unmarshal(m.Data, &resp); err == nil && resp.Error != nil {
			err = errors.New(resp.Error.Description)
		}
	}
	if err != nil {
		n.log.Debug("Cluster: asking for the stream's leadership (cluster.lead)", "stream", n.stream,
			"leader", info.Cluster.Leader, "error", shortErr(err))
	}
}

func (n *Node) upDetail() string {
	d := "order " + string(n.o.Order)
	if n.emb != nil {
		d += ", " + strconv.Itoa(n.emb.peers()) + " peers"
	} else {
		d += ", " + n.nc.ConnectedUrlRedacted()
	}
	return d
}

func shortErr(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "nats: ")
	if unanswered(err) {
		return "no answer (no quorum of nodes?)"
	}
	return s
}

// unanswered reports whether a request failed for want of an answer in
// time, rather than with one.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
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

// header returns the NATS header a frame of this node crosses with.
func (n *Node) header(op ws.Opcode) nats.Header {
	h := nats.Header{
		hdrOrigin: {n.o.NodeName},
		hdrSent:   {strconv.FormatInt(time.Now().UnixNano(), 10)},
	}
	if op == ws.OpBinary {
		h[hdrOp] = []string{"binary"}
	}
	return h
}

// fromHeader reads a crossed frame's header: its opcode, origin and when
// its node accepted it.
func fromHeader(h nats.Header) (op ws.Opcode, origin string, sent time.Time) {
	op = ws.OpText
	if v := h.Get(hdrOp); v == "binary" {
		op = ws.OpBinary
	}
	origin = h.Get(hdrOrigin)
	if ns, err := strconv.ParseInt(h.Get(hdrSent), 10, 64); err == nil {
		sent = time.Unix(0, ns)
	}
	return op, origin, sent
}

// deliver publishes the frames of a NATS message that crossed into the
// local log; frames of this node's own clients (order "total") keep the
// origin "".
func (n *Node) deliver(data []byte, h nats.Header) {
	b := n.bus.Load()
	op, origin, sent := fromHeader(h)
	self := origin == n.o.NodeName
	if self {
		origin = ""
	}
	if !sent.IsZero() {
		if self {
			n.m.latSelf.Observe(time.Since(sent).Seconds())
		} else {
			n.m.latPeer.Observe(time.Since(sent).Seconds())
		}
	}
	publish := func(op ws.Opcode, p []byte) {
		n.m.inMsgs.Inc()
		n.m.inBytes.Add(float64(len(p)))
		if b == nil {
			return
		}
		if err := b.Publish(op, p, origin); err != nil && !errors.Is(err, bus.ErrServerClosed) {
			n.lost("in", "publish", 1)
		}
	}
	if v := h.Get(hdrBatch); v != "" {
		k, err := strconv.Atoi(v)
		if err == nil {
			err = splitBatch(data, k, publish)
		}
		if err != nil {
			n.lost("in", "malformed", 1)
		}
		return
	}
	publish(op, data)
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
			}
		}
		select {
		case <-n.js.PublishAsyncComplete():
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("cluster: %d frames still unconfirmed: %w", n.js.PublishAsyncPending(), ctx.Err()))
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
	n.setState(false, "shut down")
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
