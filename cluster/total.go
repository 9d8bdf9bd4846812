package cluster

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovbus/ovbus/ws"
)

// Order "total": the stream is the sequencer. Sequence publishes each frame
// the bus accepted to it; every node consumes the stream in order and
// publishes what it reads into its log, its own frames included, so every
// client on every node sees the stream's order.

// stallWait is how long Sequence waits for room among the frames in flight
// before it gives up on crossing that frame: a sender faster than the
// stream is slowed down to its pace (its reads wait, TCP pushes back),
// rather than its frames reaching only its own node.
const stallWait = time.Second

// Sequence is the bus's Sequencer: it runs on the sender's reader goroutine
// for every frame that passed the bus's rules. With the link up it hands
// the frame to the stream (asynchronously; MaxInflight bound it). With the
// link down, or with MaxInflight frames already in flight, the frame goes
// into this node's log at once, for this node's clients only, and is counted
// as dropped ("link_down", "backpressure"): a node cut off from the others
// keeps working as a bus of its own.
func (n *Node) Sequence(op ws.Opcode, payload []byte) {
	if !n.up.Load() || n.closing.Load() {
		n.localOnly(op, payload, "link_down")
		return
	}
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
		n.localOnly(op, payload, "backpressure")
	}
}

// publishLoop takes the frames Sequence queued and publishes them to the
// stream, as many as are queued at once in one message (see batchMsg), until
// Shutdown has stopped it and the queue is empty.
func (n *Node) publishLoop() {
	defer close(n.pubDone)
	batch := make([]outFrame, 0, maxBatchFrames)
	for {
		var f outFrame
		select {
		case f = <-n.outC:
		case <-n.pubStop:
			select {
			case f = <-n.outC:
			default:
				return
			}
		}
		batch, size := append(batch[:0], f), len(f.payload)
	more:
		for {
			select {
			case f := <-n.outC:
				if !fits(len(batch), size, len(f.payload)) {
					n.publishBatch(batch)
					batch, size = batch[:0], 0
				}
				batch, size = append(batch, f), size+len(f.payload)
			default:
				break more
			}
		}
		n.publishBatch(batch)
	}
}

// publishBatch hands one batch to the stream; when that fails at once (the
// link went down), its frames go to this node's clients only.
func (n *Node) publishBatch(batch []outFrame) {
	if n.up.Load() {
		m := n.batchMsg(n.subject, batch)
		if _, err := n.js.PublishMsgAsync(m, jetstream.WithStallWait(stallWait)); err == nil {
			for _, f := range batch {
				n.m.outMsgs.Inc()
				n.m.outBytes.Add(float64(len(f.payload)))
			}
			return
		} else if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			n.probeSoon()
		}
	}
	for _, f := range batch {
		n.localOnly(f.op, f.payload, "link_down")
	}
}

// localOnly delivers a frame that cannot cross to this node's clients.
func (n *Node) localOnly(op ws.Opcode, payload []byte, reason string) {
	n.lost("out", reason, 1)
	if b := n.bus.Load(); b != nil {
		b.Publish(op, payload, "")
	}
}

// publishFailed is called for a frame the stream did not confirm. With no
// stream to answer it was not stored: it goes to this node's clients, late.
// After a timeout it may or may not have been stored (and then reaches every
// node, this one included, once the link is back); it is counted either way.
func (n *Node) publishFailed(_ jetstream.JetStream, m *nats.Msg, err error) {
	frames := []outFrame{}
	if v := m.Header.Get(hdrBatch); v != "" {
		k, _ := strconv.Atoi(v)
		splitBatch(m.Data, k, func(op ws.Opcode, p []byte) { frames = append(frames, outFrame{op, p}) })
	} else {
		op, _, _ := fromHeader(m.Header)
		frames = append(frames, outFrame{op, m.Data})
	}
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		for _, f := range frames {
			n.localOnly(f.op, f.payload, "no_stream")
		}
		return
	}
	n.lost("out", "unconfirmed", len(frames))
}

// ensureStream creates the stream (every node asks for the same; the first
// one creates it, the others find it) and subscribes to its republished
// messages, once.
//
// The stream republishes each frame, once stored, on core NATS (the stream
// leader does, in the stream's order): every node subscribes to that rather
// than running a consumer of its own. A consumer lives on one server, which
// may be another node: that node's death would leave this one deaf until a
// new consumer is placed (seconds, more when the cluster also elects a new
// meta leader); the republished messages come from whichever node leads
// the stream, and are pushed at once.
func (n *Node) ensureStream() error {
	n.mu.Lock()
	have := n.sub != nil
	n.mu.Unlock()
	if have {
		return nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, 3*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{
		Name:        n.stream,
		Description: "ovbus cluster " + n.o.Name + ": the order every node's clients see",
		Subjects:    []string{n.subject},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.MemoryStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      n.o.StreamMaxAge,
		MaxBytes:    n.o.StreamMaxBytes,
		MaxMsgSize:  int32(n.o.MaxMsgSize + headerRoom),
		Replicas:    n.o.Replicas,
		Duplicates:  min(n.o.StreamMaxAge, 10*time.Second),
		RePublish:   &jetstream.RePublish{Source: n.subject, Destination: n.ordered},
	}
	// The first node creates the stream; the others use it as it is (two
	// nodes updating it to their own settings would undo each other).
	s, err := n.js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		if s, err = n.js.Stream(ctx, n.stream); err == nil {
			if have := s.CachedInfo().Config; have.Replicas != cfg.Replicas || have.MaxBytes != cfg.MaxBytes || have.MaxAge != cfg.MaxAge {
				n.log.Warn("Cluster: the stream exists with other settings than this node's; using it as it is",
					"stream", n.stream, "replicas", have.Replicas, "max_bytes", have.MaxBytes, "max_age", have.MaxAge,
					"this_node_replicas", cfg.Replicas)
			}
		}
	}
	if err != nil {
		return errors.New("stream " + n.stream + ": " + shortErr(err))
	}
	sub, err := n.nc.Subscribe(n.ordered, n.consume)
	if err != nil {
		return errors.New("subscribe: " + shortErr(err))
	}
	if err := sub.SetPendingLimits(n.o.MaxPendingMessages, int(n.o.MaxPendingBytes)); err != nil {
		sub.Unsubscribe()
		return err
	}
	n.mu.Lock()
	n.sub = sub
	n.mu.Unlock()
	return nil
}

// consume runs for each frame the stream republishes, in the stream's
// order, on one goroutine. A jump in the stream's sequence means frames
// this node did not get (it was cut off, or fell behind and nats.go dropped
// them): they are counted as lost.
func (n *Node) consume(m *nats.Msg) {
	if seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64); err == nil {
		n.mu.Lock()
		last := n.lastSeq
		n.lastSeq = seq
		n.mu.Unlock()
		if last != 0 && seq > last+1 {
			n.lost("in", "behind", int(seq-last-1))
		}
	}
	n.deliver(m.Data, m.Header)
}
