package cluster

import (
	"encoding/json"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ovbus/ovbus/ws"
)

// Order "total", the sending side. Sequence queues each frame the bus
// accepted; publishLoop numbers the frames, packs what is queued into one
// message (batch.go) and hands it to the stream, which stores it, gives it
// its place in the one order and republishes it to every node (stream.go).
// The messages the stream has not confirmed yet stay in pending, in order.
//
// Nothing is ever re-sent behind its successors by a client library's
// retry: this is the only publisher (core NATS with a reply subject, not
// nats.go's JetStream publisher), and whatever it sends again it sends
// again in order, from the oldest unconfirmed message on; every receiver
// drops what it already has and holds what comes ahead of a gap (inbox.go).
//
// When the stream does not answer (it refuses: no leader, or no route to
// it; or it leaves the oldest message unconfirmed for stallAfter) the node
// relaxes, as the package doc describes: every unconfirmed message, and
// every new one, goes to this node's clients at once and directly to the
// other nodes, which deliver it in its origin's order; the oldest is
// offered to the stream again every retryInterval, and once the stream
// takes it the rest follows in order (draining). Receivers drop the copies
// they already have.

const (
	// stallWait is how long Sequence waits for room among the frames
	// queued before it gives up on crossing that frame: a sender faster
	// than the stream is slowed down to its pace (its reads wait, TCP
	// pushes back), rather than its frames reaching only its own node.
	stallWait = time.Second
	// stallAfter: a message the stream has not confirmed this long means
	// the stream does not answer (its leader is frozen or cut off).
	// Confirmations take about a millisecond on a LAN and tens of
	// milliseconds on a loaded machine; a false alarm costs a short
	// window of per-sender order, never a frame.
	stallAfter = 500 * time.Millisecond
	// retryInterval is how often, while relaxed, the oldest unconfirmed
	// message is offered to the stream again.
	retryInterval = 200 * time.Millisecond
	// answerRate: a large message takes time to reach the stream and be
	// stored (and copied to its replicas), so its answer is awaited its
	// size at this rate longer (answerWait), and it is offered again no
	// more often than its size at this rate. Offered every retryInterval, a 20 MiB frame
	// filled the node's NATS connection so that its heartbeats came too
	// late and its peers counted it gone.
	answerRate = 8 << 20 // bytes per second
	// refusedGrace: a refusal (no responders) is first taken for a
	// leadership handing over — the stream has no leader for tens of
	// milliseconds then. For this long new frames wait and the oldest
	// unconfirmed message is offered again every refusedRetry; if the
	// stream takes it, the rest follows in order and nothing relaxes.
	refusedGrace = 250 * time.Millisecond
	refusedRetry = 50 * time.Millisecond
	// startWait is how long a starting node holds its clients' frames
	// for the stream to be there (every node of a new cluster up, R3)
	// before it relaxes and delivers them.
	startWait = 10 * time.Second
	// outTick paces publishLoop's checks.
	outTick = 50 * time.Millisecond
)

// outbox is order total's sending state.
type outbox struct {
	mu      sync.Mutex
	pending []*outMsg // not yet confirmed by the stream, in order
	frames  int       // in pending
	bytes   int64
	failed  string // a refusal from the stream since publishLoop last looked
	ready   bool   // the stream answered a probe once: frames may go (probe)
	// answered says the stream answered the latest probe (probe)
	answered bool
	relaxed  bool // frames go directly, each sender's order kept
	reason   string
	retrying bool // refused: offering the oldest message again (refusedGrace)

	// publishLoop only
	retrySince   time.Time // when retrying began
	retryFirst   uint64    // the oldest message offered again while retrying
	draining     bool      // relaxed, and the stream took the oldest message again
	since        time.Time
	windowFrames int
	lastTry      time.Time
	seq          uint64 // the number of the last frame numbered

	kick chan struct{} // an answer came: publishLoop looks
}

// Sequence is the bus's Sequencer: it runs on the sender's reader goroutine
// for every frame that passed the bus's rules and queues it for
// publishLoop. A frame that finds MaxInflight frames queued waits up to
// stallWait for room, then goes to this node's clients only and is counted
// ("backpressure").
func (n *Node) Sequence(op ws.Opcode, payload []byte) {
	f := outFrame{op, payload}
	select {
	case n.outC <- f:
		return
	default:
	}
	t := time.NewTimer(stallWait)
	defer t.Stop()
	select {
	case n.outC <- f:
	case <-t.C:
		n.lost("out", "backpressure", 1)
		if b := n.bus.Load(); b != nil {
			b.Publish(op, payload, "")
		}
	}
}

// maxUnconfirmed bounds the messages handed to the stream and not yet
// confirmed (each of one or more frames).
func (n *Node) maxUnconfirmed() int { return max(1, n.o.MaxInflight/16) }

// publishLoop sends what Sequence queued, until Shutdown has stopped it,
// the queue is empty and the stream confirmed everything (or Shutdown gave
// up waiting).
func (n *Node) publishLoop() {
	defer close(n.pubDone)
	tick := time.NewTicker(outTick)
	defer tick.Stop()
	batch := make([]outFrame, 0, maxBatchFrames)
	stop := n.pubStop
	for {
		n.stepOut(time.Now())
		if stop == nil && len(n.outC) == 0 && n.outEmpty() {
			return
		}
		var in chan outFrame
		if n.mayTake() {
			in = n.outC
		}
		select {
		case f := <-in:
			batch, size := append(batch[:0], f), len(f.payload)
		more:
			for {
				select {
				case f := <-n.outC:
					if !fits(len(batch), size, len(f.payload)) {
						n.sendBatch(batch)
						batch, size = batch[:0], 0
					}
					batch, size = append(batch, f), size+len(f.payload)
				default:
					break more
				}
			}
			n.sendBatch(batch)
			clear(batch)
		case <-n.out.kick:
		case <-tick.C:
		case <-stop:
			stop = nil
		case <-n.pubAbort:
			return
		}
	}
}

// mayTake reports whether publishLoop takes more frames now: not before the
// stream answered once (or startWait passed), and, unless relaxed, not
// beyond maxUnconfirmed messages in flight.
func (n *Node) mayTake() bool {
	o := &n.out
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.relaxed && !o.draining:
		return true
	case !o.ready && !o.relaxed, o.retrying:
		return false
	}
	return len(o.pending) < n.maxUnconfirmed()
}

func (n *Node) outEmpty() bool {
	n.out.mu.Lock()
	defer n.out.mu.Unlock()
	return len(n.out.pending) == 0
}

// sendBatch numbers frames, keeps them for replays and sends them: to the
// stream, or directly while relaxed.
func (n *Node) sendBatch(frames []outFrame) {
	o := &n.out
	m := n.newOutMsg(o.seq+1, frames)
	o.seq = m.last()
	n.lastSent.Store(o.seq)
	n.ring.add(m)
	for _, f := range frames {
		n.m.outMsgs.Inc()
		n.m.outBytes.Add(float64(len(f.payload)))
	}
	o.mu.Lock()
	o.pending = append(o.pending, m)
	o.frames += m.count
	o.bytes += int64(len(m.data))
	direct := o.relaxed && !o.draining
	o.mu.Unlock()
	if direct {
		n.sendDirect(m)
	} else {
		n.publishStream(m)
	}
}

// publishStream hands m to the stream; its answer comes to onAck.
func (n *Node) publishStream(m *outMsg) {
	o := &n.out
	o.mu.Lock()
	m.published = time.Now()
	o.mu.Unlock()
	msg := m.msg(n.subj.stream)
	msg.Reply = n.ackPrefix + "." + strconv.FormatUint(m.first, 10)
	if err := n.nc.PublishMsg(msg); err != nil {
		o.mu.Lock()
		if o.failed == "" {
			o.failed = shortErr(err)
		}
		o.mu.Unlock()
	}
}

// sendDirect delivers m to this node's clients and sends it to the other
// nodes directly.
func (n *Node) sendDirect(m *outMsg) {
	o := &n.out
	o.mu.Lock()
	if m.direct {
		o.mu.Unlock()
		return
	}
	m.direct = true
	o.windowFrames += m.count
	o.mu.Unlock()
	n.receive(n.inFromOut(m), fromDirect)
	n.nc.PublishMsg(m.msg(n.subj.direct)) // a node that misses it gets it from the stream later
}

// onAck takes the stream's answer to one message: a confirmation, or a
// refusal (no responders: nobody leads the stream, or this node has no
// route to its leader; an error of the stream).
func (n *Node) onAck(msg *nats.Msg) {
	id, err := strconv.ParseUint(msg.Subject[len(n.ackPrefix)+1:], 10, 64)
	if err != nil {
		return
	}
	refusal := ""
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		refusal = "nobody answers for the stream (no leader, or no route to it)"
	} else {
		var a struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &a); err != nil {
			refusal = "unreadable answer from the stream"
		} else if a.Error != nil {
			refusal = "the stream: " + a.Error.Description
		}
	}
	o := &n.out
	o.mu.Lock()
	i := sort.Search(len(o.pending), func(i int) bool { return o.pending[i].first >= id })
	if i < len(o.pending) && o.pending[i].first == id && !o.pending[i].acked {
		if refusal == "" {
			o.pending[i].acked = true
		} else if o.failed == "" {
			o.failed = refusal
		}
	}
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// stepOut moves the sending state on: it drops what the stream confirmed,
// relaxes when the stream does not answer, offers the stream the oldest
// message again while relaxed, and goes back to the stream's order once it
// took everything.
func (n *Node) stepOut(now time.Time) {
	o := &n.out
	o.mu.Lock()
	popped := 0
	for len(o.pending) > 0 && o.pending[0].acked {
		n.popLocked("")
		popped++
	}
	failed := o.failed
	o.failed = ""
	var front *outMsg
	if len(o.pending) > 0 {
		front = o.pending[0]
	}
	stalled := front != nil && !front.published.IsZero() && now.Sub(front.published) > stallAfter+answerWait(front)
	ready, answered := o.ready, o.answered
	o.mu.Unlock()

	switch {
	case o.retrying:
		switch {
		case front == nil || front.first > o.retryFirst:
			// The stream took the message again: the rest follows.
			o.mu.Lock()
			o.retrying = false
			o.mu.Unlock()
			n.republish()
		case now.Sub(o.retrySince) >= refusedGrace:
			o.mu.Lock()
			reason := o.reason
			o.mu.Unlock()
			n.relax(reason)
		case now.Sub(o.lastTry) >= refusedRetry:
			o.lastTry = now
			n.publishStream(front)
		}
	case !o.relaxed:
		switch {
		case failed != "" && front != nil:
			o.mu.Lock()
			o.retrying, o.reason = true, failed
			o.mu.Unlock()
			o.retrySince, o.retryFirst, o.lastTry = now, front.first, now
		case failed != "":
			n.relax(failed)
		case stalled:
			n.relax("no answer from the stream within " + stallAfter.String())
		case !ready && now.Sub(n.startedAt) > startWait:
			n.relax("the stream is not there yet")
		}
	case o.draining:
		switch {
		case failed != "" || stalled:
			o.mu.Lock()
			o.draining = false
			o.mu.Unlock()
			n.sendAllDirect()
		case front == nil:
			n.unrelax(now)
		}
	default:
		n.dropOld(now)
		if popped > 0 || (front == nil && ready && answered) {
			n.drain(now)
		} else if front != nil && now.Sub(o.lastTry) >= max(retryInterval, answerWait(front)) {
			o.lastTry = now
			n.publishStream(front)
		}
	}
}

// answerWait is the time m takes to cross at answerRate.
func answerWait(m *outMsg) time.Duration {
	return time.Duration(int64(len(m.data)) * int64(time.Second) / answerRate)
}

// relax opens a window of per-sender order: see outbox.
func (n *Node) relax(reason string) {
	o := &n.out
	o.mu.Lock()
	o.relaxed, o.draining, o.retrying, o.reason = true, false, false, reason
	o.since, o.windowFrames, o.lastTry = time.Now(), 0, time.Now()
	o.mu.Unlock()
	n.m.relaxedWindows.Inc()
	n.log.Warn("Cluster: the stream does not answer; frames cross directly, each sender's order kept, until it does",
		"cluster", n.o.Name, "reason", reason)
	n.sendAllDirect()
}

// sendAllDirect sends every unconfirmed message directly, in order.
func (n *Node) sendAllDirect() {
	n.out.mu.Lock()
	msgs := append([]*outMsg(nil), n.out.pending...)
	n.out.mu.Unlock()
	for _, m := range msgs {
		n.sendDirect(m)
	}
}

// drain: the stream answers again. Everything unconfirmed goes to it, in
// order; new frames follow it there.
func (n *Node) drain(now time.Time) {
	o := &n.out
	o.mu.Lock()
	o.draining = true
	o.mu.Unlock()
	if n.republish() == 0 {
		n.unrelax(now)
	}
}

// republish offers every unconfirmed message to the stream again, in
// order, and returns how many.
func (n *Node) republish() int {
	o := &n.out
	o.mu.Lock()
	var msgs []*outMsg
	for _, m := range o.pending {
		if !m.acked {
			msgs = append(msgs, m)
		}
	}
	o.mu.Unlock()
	for _, m := range msgs {
		n.publishStream(m)
	}
	return len(msgs)
}

// unrelax closes the window: the stream holds every frame again.
func (n *Node) unrelax(now time.Time) {
	o := &n.out
	o.mu.Lock()
	o.relaxed, o.draining, o.reason = false, false, ""
	o.mu.Unlock()
	n.log.Info("Cluster: the stream answers again; one order for every client",
		"cluster", n.o.Name, "relaxed_for", now.Sub(o.since).Round(time.Millisecond).String(), "direct_frames", o.windowFrames)
}

// dropOld gives up keeping, for the stream, frames older than the stream
// would keep, or beyond MaxInflight frames or StreamMaxBytes while the
// stream does not answer. They reached this node's clients and the nodes
// that got them directly; counted as "unstored".
func (n *Node) dropOld(now time.Time) {
	o := &n.out
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.pending) > 1 && (o.frames > n.o.MaxInflight || o.bytes > n.o.StreamMaxBytes || now.Sub(o.pending[0].sent) > n.o.StreamMaxAge) {
		n.popLocked("unstored")
	}
}

// popLocked removes the oldest pending message, counting its frames as lost
// for reason unless reason is "".
func (n *Node) popLocked(reason string) {
	o := &n.out
	m := o.pending[0]
	o.pending[0] = nil
	o.pending = o.pending[1:]
	o.frames -= m.count
	o.bytes -= int64(len(m.data))
	if reason != "" {
		n.lost("out", reason, m.count)
	}
}

// outState reports, for /health, whether frames go directly and why.
func (n *Node) outState() (relaxed bool, reason string) {
	n.out.mu.Lock()
	defer n.out.mu.Unlock()
	return n.out.relaxed, n.out.reason
}
