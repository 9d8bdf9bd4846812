package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/ovbus/ovbus/bus"
)

// Order "sender": the bus appends its clients' frames to its log itself; a
// follower of the log publishes those with origin "" (this node's own) on
// core NATS, and a subscription publishes the other nodes' frames into the
// log with their node as origin. A frame crosses once: a node never
// forwards a frame that has an origin, and NATS does not echo a node's own
// messages back to it (NoEcho).

// forwardBatch is how many frames the forwarder takes from the log at once.
const forwardBatch = 256

func (n *Node) startSender(b *bus.Server) error {
	sub, err := n.nc.Subscribe(n.subject, func(m *nats.Msg) {
		if m.Header.Get(hdrOrigin) == n.o.NodeName {
			return // never ours (NoEcho), but a frame must not loop
		}
		n.deliver(m.Data, m.Header)
	})
	if err != nil {
		return fmt.Errorf("cluster: subscribe: %w", err)
	}
	if err := sub.SetPendingLimits(n.o.MaxPendingMessages, int(n.o.MaxPendingBytes)); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("cluster: %w", err)
	}
	n.mu.Lock()
	n.sub = sub
	n.mu.Unlock()
	n.fwdDone = make(chan struct{})
	go n.forward(b)
	return nil
}

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
			// The link (or NATS) could not take our frames as fast as our
			// clients sent them: start again at the newest, counting what
			// was skipped (an upper bound: other nodes' frames among them
			// were not ours to send).
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
// frames to the others, in batches (see batchMsg).
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

func (n *Node) sendCore(batch []outFrame) {
	if !n.up.Load() {
		n.lost("out", "link_down", len(batch))
		return
	}
	if err := n.nc.PublishMsg(n.batchMsg(n.subject, batch)); err != nil {
		n.lost("out", "link_down", len(batch))
		n.probeSoon()
		return
	}
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

// countSubDrops counts what nats.go dropped because this node could not
// take the others' frames fast enough (the subscription's pending limits).
func (n *Node) countSubDrops() {
	n.mu.Lock()
	sub := n.sub
	n.mu.Unlock()
	if sub == nil {
		return
	}
	d, err := sub.Dropped()
	if err != nil {
		return
	}
	n.mu.Lock()
	k := d - n.dropped
	n.dropped = d
	n.mu.Unlock()
	n.lost("in", "slow", k)
}
