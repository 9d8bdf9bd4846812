package cluster

import (
	"context"
	"errors"

	"github.com/ovbus/ovbus/bus"
)

// Order "sender": the bus appends its clients' frames to its log itself; a
// follower of the log numbers those with origin "" (this node's own), keeps
// them in the ring (replay.go) and publishes them directly on core NATS; a
// subscription puts the other nodes' frames into the log in their origin's
// numbering (inbox.go). A frame crosses once: a node never forwards a frame
// that has an origin, and NATS does not echo a node's own messages back to
// it (NoEcho). What a node misses — while cut off, frozen, or over its
// pending limits — it asks its origin for, from the gap in the numbers or
// the origin's heartbeat (peers.go); so nothing is lost across a short cut
// either, within the ring's retention.

// forwardBatch is how many frames the forwarder takes from the log at once.
const forwardBatch = 256

// forward publishes this node's frames to the cluster until the bus shuts
// down and its log has been read to the end.
func (n *Node) forward(b *bus.Server) {
	defer close(n.fwdDone)
	fo := bus.FollowOptions{Name: "cluster", MaxMessages: n.o.MaxPendingMessages, MaxBytes: n.o.MaxPendingBytes}
	f := b.Follow(fo)
	defer func() { f.Close() }()
	buf := make([]bus.Frame, 0, forwardBatch)
	var last uint64
	for {
		frames, err := f.Next(n.fwdCtx(), buf[:0])
		if len(frames) > 0 {
			last = frames[len(frames)-1].Seq
		}
		n.publishCore(frames)
		switch {
		case err == nil:
		case errors.Is(err, bus.ErrLagged):
			// NATS could not take our frames as fast as our clients sent
			// them: start again at the newest, counting what was skipped
			// (an upper bound: other nodes' frames among them were not
			// ours to send). The frames sent keep consecutive numbers, so
			// no node waits for the skipped ones.
			f.Close()
			f = b.Follow(fo)
			skipped := 0
			frames, err := f.Next(n.fwdCtx(), buf[:0])
			if len(frames) > 0 && last != 0 && frames[0].Seq > last+1 {
				skipped = int(frames[0].Seq - last - 1)
			}
			n.lost("out", "lagged", max(skipped, 1))
			if len(frames) > 0 {
				last = frames[len(frames)-1].Seq
			}
			n.publishCore(frames)
			if err != nil && !errors.Is(err, bus.ErrLagged) {
				n.nc.Flush()
				return
			}
		default: // the bus shut down and its log is read, or Shutdown gave up
			n.nc.Flush()
			return
		}
	}
}

// publishCore sends the frames of this node's clients (origin "") among
// frames to the others, in batches (batch.go).
func (n *Node) publishCore(frames []bus.Frame) {
	batch := n.fwdBatch[:0]
	size := 0
	for _, fr := range frames {
		if fr.Origin != "" {
			continue
		}
		if !fits(len(batch), size, len(fr.Payload)) {
			n.sendCore(batch)
			batch, size = batch[:0], 0
		}
		batch, size = append(batch, outFrame{fr.Op, fr.Payload}), size+len(fr.Payload)
	}
	if len(batch) > 0 {
		n.sendCore(batch)
	}
	clear(batch)
	n.fwdBatch = batch[:0]
}

// sendCore numbers a batch, keeps it for replays and publishes it. A
// publish that fails (the connection is down) is not retried here: the
// other nodes see the gap, or the heartbeat, and ask for the frames.
func (n *Node) sendCore(batch []outFrame) {
	m := n.newOutMsg(n.fwdSeq+1, batch)
	n.fwdSeq = m.last()
	n.ring.add(m)
	n.lastSent.Store(n.fwdSeq)
	n.nc.PublishMsg(m.msg(n.subj.direct))
	for _, f := range batch {
		n.m.outMsgs.Inc()
		n.m.outBytes.Add(float64(len(f.payload)))
	}
}

// fwdCtx is the forwarder's context: it ends when Shutdown gives up waiting.
func (n *Node) fwdCtx() context.Context { return n.fwdStop }

// waitForwarder waits (bounded by ctx) until the forwarder has sent what the
// bus's log held when the bus shut down.
func (n *Node) waitForwarder(ctx context.Context) {
	if n.fwdDone == nil {
		return
	}
	select {
	case <-n.fwdDone:
	case <-ctx.Done():
		n.fwdCancel()
		<-n.fwdDone
	}
}
