package cluster

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// The receiving side, in both orders. Every message of frames that reaches
// this node — from the stream (order "total"), directly from its origin, or
// replayed by its origin on request — passes through receive, which puts
// its frames into the bus's log in their origin's numbering (Ovbus-Seq),
// each once:
//
//   - a frame this node already delivered is dropped (it came by two
//     paths, or was sent again);
//   - a frame ahead of a missing one is held until the missing one comes;
//     the origin is asked for it (a replay from its ring, replay.go) and,
//     if nothing fills the gap within gapWait (the origin died with it),
//     the missing frames are counted as lost and the held ones go on;
//   - a frame of an origin's earlier incarnation, arriving after frames of
//     its next one, is dropped.
//
// So each sender's order holds on every client whatever path its frames
// took. With order "total" the stream's messages come in the stream's
// order, and a frame delivered in any other way — directly while the
// stream did not answer, replayed, or held for a missing predecessor — is
// delivered outside that order: such frames are counted (relaxed) and make
// /health say so for relaxLinger.

// source is the path a message came by.
type source uint8

const (
	fromStream source = iota // the stream, in its order (order "total")
	fromDirect               // directly from its origin
	fromReplay               // replayed by its origin on request
)

const (
	// replayWait is how long a request for missing frames waits for its
	// answer before it is asked again.
	replayWait = time.Second
	// streamGapAsk: with order "total", a gap among the stream's messages
	// (an origin's frames stored out of its order after a failed publish)
	// is filled by the stream itself within milliseconds; the origin is
	// asked only when the gap lasts this long.
	streamGapAsk = time.Second
	// gapWait is how long a gap may wait for its frames before they are
	// counted as lost and the frames behind them go on. Only an origin
	// that died with frames in flight leaves a gap this long: a live one
	// answers a replay request in milliseconds.
	gapWait = 5 * time.Second
	// relaxLinger is how long /health keeps saying "relaxed" after a frame
	// was delivered outside the stream's order.
	relaxLinger = time.Second
)

// inbox is the receiving side's state, under mu; mu also serializes the
// frames' way into the bus's log.
type inbox struct {
	mu      sync.Mutex
	origins map[string]*origin

	// order "total": the stream's sequence this node has delivered up to
	started   bool
	lastSeq   uint64
	created   time.Time    // the stream's creation: another one is a new stream
	held      []heldStream // behind a gap the stream could not fill yet
	heldBytes int64
	heldSince time.Time

	// frames is deliverLocked's buffer, kept between messages
	frames []bus.Frame

	// when the last frame was delivered outside the stream's order (Unix
	// ns; read without mu by /health)
	relaxedAt atomic.Int64
}

// origin is what this node knows of another node's (or its own) frames.
type origin struct {
	name     string
	inc      uint64
	next     uint64 // the number of the next frame to deliver; 0 until known
	known    uint64 // the highest number known to exist (held or announced)
	held     []heldMsg
	gapSince time.Time // since when a gap waits (zero: none)
	asked    time.Time // the last replay request (zero: none outstanding)
	hbMark   uint64    // order sender: the number the previous heartbeat announced
}

type heldMsg struct {
	m   *inMsg
	src source
}

func (o *origin) restart(inc uint64) {
	*o = origin{name: o.name, inc: inc, next: 1}
}

func (o *origin) gap() bool {
	return o.next == 0 || len(o.held) > 0 || o.next <= o.known
}

// receive takes one message of frames.
func (n *Node) receive(m *inMsg, src source) {
	n.in.mu.Lock()
	n.acceptLocked(m, src)
	n.in.mu.Unlock()
}

// receiveNATS parses and takes a message read from NATS.
func (n *Node) receiveNATS(msg *nats.Msg, src source) {
	m, err := parseMsg(msg.Header, msg.Data)
	if err != nil {
		n.lost("in", "malformed", 1)
		return
	}
	if m.origin == n.o.NodeName && src != fromStream {
		return // this node's own direct copy: delivered here when sent
	}
	n.receive(m, src)
}

func (n *Node) acceptLocked(m *inMsg, src source) {
	o := n.in.origins[m.origin]
	if o == nil {
		o = &origin{name: m.origin, inc: m.inc}
		n.in.origins[m.origin] = o
		switch {
		case m.origin == n.o.NodeName && m.inc == n.inc:
			o.next = 1 // this process's own frames: every one of them
		case src == fromStream || m.first == 1:
			// The stream's order is the order: this node takes it from
			// its start point (stream.go) on. Otherwise, unless this is
			// the origin's first frame, the frames it sent before are
			// asked for (those sent since this node started: holdLocked).
			o.next = m.first
		}
	}
	switch {
	case m.inc < o.inc:
		return // an earlier incarnation's frame, late: its successor has taken over
	case m.inc > o.inc:
		o.restart(m.inc)
	}
	if o.next != 0 && m.last() < o.next {
		return // already delivered
	}
	if o.next == 0 || m.first > o.next {
		n.holdLocked(o, m, src)
		return
	}
	n.deliverLocked(o, m, src, false)
	n.releaseLocked(o)
}

// holdLocked keeps m until the frames before it come.
func (n *Node) holdLocked(o *origin, m *inMsg, src source) {
	i := 0
	for i < len(o.held) && o.held[i].m.first < m.first {
		i++
	}
	if i < len(o.held) && o.held[i].m.first == m.first {
		return // the same message by another path
	}
	o.held = append(o.held, heldMsg{})
	copy(o.held[i+1:], o.held[i:])
	o.held[i] = heldMsg{m, src}
	o.known = max(o.known, m.last())
	if o.gapSince.IsZero() {
		o.gapSince = time.Now()
	}
	if o.asked.IsZero() && (src != fromStream || o.next == 0) {
		n.askLocked(o)
	}
}

// releaseLocked delivers the held messages the gap no longer holds back.
func (n *Node) releaseLocked(o *origin) {
	for len(o.held) > 0 && o.next != 0 && o.held[0].m.first <= o.next {
		h := o.held[0]
		o.held[0] = heldMsg{}
		o.held = o.held[1:]
		if h.m.last() >= o.next {
			n.deliverLocked(o, h.m, h.src, true)
		}
	}
	if !o.gap() {
		o.gapSince, o.asked = time.Time{}, time.Time{}
	}
}

// deliverLocked puts the frames of m from o.next on into the bus's log.
// late says m waited for a missing predecessor.
func (n *Node) deliverLocked(o *origin, m *inMsg, src source, late bool) {
	skip := 0
	if o.next > m.first {
		skip = int(o.next - m.first)
	}
	o.next = m.last() + 1
	k := m.count - skip
	self := m.origin == n.o.NodeName
	if !m.sent.IsZero() {
		if self {
			n.m.latSelf.Observe(time.Since(m.sent).Seconds())
		} else {
			n.m.latPeer.Observe(time.Since(m.sent).Seconds())
		}
	}
	if src == fromReplay {
		n.m.recovered.WithLabelValues("replay").Add(float64(k))
	}
	if n.o.Order == OrderTotal && (src != fromStream || late) {
		n.m.relaxedFrames.Add(float64(k))
		n.in.relaxedAt.Store(time.Now().UnixNano())
	}
	origin := m.origin
	if self {
		origin = ""
	}
	// The frames go into the log together (one wake of the clients'
	// writers, who then write them at once), as they crossed.
	frames := n.in.frames[:0]
	size := 0
	err := m.each(skip, func(op ws.Opcode, p []byte) {
		frames = append(frames, bus.Frame{Op: op, Payload: p, Origin: origin})
		size += len(p)
	})
	if err != nil {
		n.lost("in", "malformed", k)
		return
	}
	n.m.inMsgs.Add(float64(len(frames)))
	n.m.inBytes.Add(float64(size))
	if b := n.bus.Load(); b != nil {
		if err := b.PublishBatch(frames); err != nil && !errors.Is(err, bus.ErrServerClosed) {
			n.lost("in", "publish", len(frames))
		}
	}
	clear(frames) // holds no payload of m past its delivery
	n.in.frames = frames[:0]
}

// askLocked asks o's node for the frames of the gap: what a message
// waiting in held, or a heartbeat, says exists. At first contact with a
// node (o.next 0) it asks for those its clients sent since this node
// started: what a client of this node could have missed.
func (n *Node) askLocked(o *origin) {
	from, since := o.next, time.Time{}
	if from == 0 {
		from, since = 1, n.startedAt
	}
	to := o.known
	if len(o.held) > 0 {
		to = o.held[0].m.first - 1
	}
	if to < from {
		return
	}
	o.asked = time.Now()
	req := &nats.Msg{Subject: n.subj.replay + o.name, Reply: n.subj.replayed + n.o.NodeName, Header: nats.Header{
		hdrOrigin: {n.o.NodeName},
		hdrInc:    {strconv.FormatUint(o.inc, 10)},
		hdrFrom:   {strconv.FormatUint(from, 10)},
		hdrTo:     {strconv.FormatUint(to, 10)},
	}}
	if !since.IsZero() {
		req.Header[hdrSince] = []string{strconv.FormatInt(since.UnixNano(), 10)}
	}
	select {
	case n.asks <- req:
	default: // asked again at the next tick
	}
}

// askQueue bounds the replay requests waiting for askLoop.
const askQueue = 256

// askLoop publishes the replay requests askLocked makes: never under the
// inbox's lock, since a publish may wait for the connection.
func (n *Node) askLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case req := <-n.asks:
			n.nc.PublishMsg(req) // unanswered, it is asked again (tickInbox)
		}
	}
}

// replayEnd takes the end of a replay: the origin sent what it had of the
// gap, from first on; what lies before first is no longer held there.
func (n *Node) replayEnd(name string, inc, first uint64, evicted bool) {
	n.in.mu.Lock()
	defer n.in.mu.Unlock()
	o := n.in.origins[name]
	if o == nil || o.inc != inc {
		return
	}
	o.asked = time.Time{}
	switch {
	case o.next == 0:
		o.next = first // first contact: from what was sent since this node started
	case first > o.next:
		reason := "gap"
		if evicted {
			reason = "behind"
		}
		n.lost("in", reason, int(first-o.next))
		o.next = first
	}
	n.releaseLocked(o)
}

// tickInbox asks again for what has not come, and gives up a gap that
// waited gapWait. The heartbeat loop calls it; when the inbox is busy (a
// catch-up from the stream), it looks at the next tick.
func (n *Node) tickInbox(now time.Time) {
	if !n.in.mu.TryLock() {
		return
	}
	defer n.in.mu.Unlock()
	for _, o := range n.in.origins {
		if !o.gap() {
			continue
		}
		if o.gapSince.IsZero() {
			o.gapSince = now
		}
		if now.Sub(o.gapSince) >= gapWait {
			n.giveUpLocked(o)
			continue
		}
		first := o.asked.IsZero()
		if first && n.o.Order == OrderTotal && o.next != 0 && now.Sub(o.gapSince) < streamGapAsk {
			continue // the stream fills it
		}
		if first || now.Sub(o.asked) >= replayWait {
			n.askLocked(o)
		}
	}
}

// giveUpLocked counts the frames of o's gap as lost and lets those behind
// it go on.
func (n *Node) giveUpLocked(o *origin) {
	target := o.known + 1
	if len(o.held) > 0 {
		target = o.held[0].m.first
	}
	if o.next != 0 && target > o.next {
		n.lost("in", "gap", int(target-o.next))
	}
	o.next = target
	o.gapSince, o.asked = time.Time{}, time.Time{}
	n.releaseLocked(o)
}

// relaxed reports whether a frame went into the log outside the stream's
// order lately.
func (n *Node) relaxedIn(now time.Time) bool {
	at := n.in.relaxedAt.Load()
	return at != 0 && now.Sub(time.Unix(0, at)) < relaxLinger
}
