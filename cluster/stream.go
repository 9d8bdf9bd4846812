package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Order "total", the receiving side: the stream's leader republishes each
// message once stored, in the stream's order, on core NATS; every node
// subscribes to that (not a consumer of its own: a consumer lives on one
// server, and that server's death would leave this node deaf until a new
// consumer is placed) and puts the frames into its log in that order, its
// own included.
//
// A jump in the stream's sequence (or, when idle, the stream's last
// sequence staying ahead at the probe) is how a node knows it missed
// something. It then fetches the missing messages from the stream's leader
// by sequence and delivers them, in order, before the message that showed
// the jump; when the stream cannot answer, that message and those after it
// wait for the next probe. What the stream no longer holds is counted as
// lost ("behind") and logged. A node starts at the first message stored
// since it started.

// catchUpTimeout bounds one attempt at catching up from the stream (the
// inbox waits meanwhile); fetchWindow is how many of its messages are asked
// for at once; goneWait is how long a message the stream says it does not
// hold is asked for again before it counts as lost (see fetchLocked).
const (
	catchUpTimeout = 3 * time.Second
	fetchWindow    = 32
	goneWait       = 2 * time.Second
)

// ensureStream creates the stream (every node asks for the same; the first
// one creates it, the others find it) and subscribes to its republished
// messages, once, then sets this node's start point (until that succeeds).
// It returns the stream's info.
func (n *Node) ensureStream(ctx context.Context) (*jetstream.StreamInfo, error) {
	n.mu.Lock()
	have := n.sub != nil
	n.mu.Unlock()
	if !have {
		if err := n.makeStream(ctx); err != nil {
			return nil, err
		}
	}
	s, err := n.js.Stream(ctx, n.stream) // one stream info request, answered by its leader
	if err != nil {
		return nil, err
	}
	info := s.CachedInfo()
	if err := n.startPoint(info); err != nil {
		return nil, fmt.Errorf("the frames stored since this node started: %w", err)
	}
	return info, nil
}

// makeStream creates or finds the stream and subscribes to its republished
// messages.
func (n *Node) makeStream(ctx context.Context) error {
	cfg := jetstream.StreamConfig{
		Name:        n.stream,
		Description: "ovbus cluster " + n.o.Name + ": the order every node's clients see",
		Subjects:    []string{n.subj.stream},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.MemoryStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      n.o.StreamMaxAge,
		MaxBytes:    n.o.StreamMaxBytes,
		MaxMsgSize:  int32(n.o.MaxMsgSize + headerRoom),
		Replicas:    n.o.Replicas,
		// A message offered again after a window without answers (outbox.go)
		// is stored once if the first offer was stored after all.
		Duplicates: n.o.StreamMaxAge,
		RePublish:  &jetstream.RePublish{Source: n.subj.stream, Destination: n.subj.ordered},
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
		return err
	}
	n.in.mu.Lock()
	n.streamH = s
	n.in.mu.Unlock()
	sub, err := n.nc.Subscribe(n.subj.ordered, n.consume)
	if err != nil {
		return err
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

// startPoint delivers, once, what the stream stored since this node started
// (before it subscribed, or while it waited for the stream), and from then
// on consume takes the stream's messages as they come. Until it succeeds,
// the probe tries again, and consume drops what it reads: the next attempt
// fetches that too.
func (n *Node) startPoint(info *jetstream.StreamInfo) error {
	n.in.mu.Lock()
	defer n.in.mu.Unlock()
	if n.in.started {
		return nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, catchUpTimeout)
	defer cancel()
	first, err := n.firstSince(ctx, info, n.startedAt)
	if err != nil {
		return err
	}
	if first > 0 {
		n.in.lastSeq = max(n.in.lastSeq, first-1)
		if err := n.fetchLocked(n.in.lastSeq+1, info.State.LastSeq); err != nil {
			return err
		}
	}
	n.in.lastSeq = max(n.in.lastSeq, info.State.LastSeq)
	n.in.started, n.in.created = true, info.Created
	return nil
}

// consume runs for each message the stream republishes, in the stream's
// order, on one goroutine. A message behind a gap the stream cannot fill
// now (it has no leader at the moment) waits, with those after it, until
// it can (heldStream).
func (n *Node) consume(m *nats.Msg) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		n.lost("in", "malformed", 1)
		return
	}
	n.in.mu.Lock()
	defer n.in.mu.Unlock()
	if !n.in.started {
		return // before the start point (ensureStream sets it holding mu)
	}
	if len(n.in.held) > 0 || (seq > n.in.lastSeq+1 && !n.catchUpLocked(seq-1, false)) {
		n.holdStreamLocked(seq, m.Header, m.Data)
		return
	}
	n.applyLocked(seq, m.Header, m.Data, false)
}

// heldStream is a message of the stream waiting for the gap before it.
type heldStream struct {
	seq  uint64
	hdr  nats.Header
	data []byte
}

// holdStreamLocked keeps a message behind a gap the stream could not fill.
// Beyond the pending limits, the gap is given up.
func (n *Node) holdStreamLocked(seq uint64, h nats.Header, data []byte) {
	in := &n.in
	if seq <= in.lastSeq || (len(in.held) > 0 && seq <= in.held[len(in.held)-1].seq) {
		return
	}
	if len(in.held) == 0 {
		in.heldSince = time.Now()
	}
	in.held = append(in.held, heldStream{seq, h, data})
	in.heldBytes += int64(len(data))
	if len(in.held) > n.o.MaxPendingMessages || in.heldBytes > n.o.MaxPendingBytes {
		n.resumeLocked(true)
	}
}

// resumeLocked fills the gap before the held messages and delivers them;
// final (or a gap that waited the stream's retention) counts what the
// stream cannot give as lost.
func (n *Node) resumeLocked(final bool) {
	in := &n.in
	final = final || time.Since(in.heldSince) > n.o.StreamMaxAge
	for len(in.held) > 0 {
		h := in.held[0]
		if h.seq > in.lastSeq+1 && !n.catchUpLocked(h.seq-1, final) {
			return
		}
		in.held[0] = heldStream{}
		in.held = in.held[1:]
		in.heldBytes -= int64(len(h.data))
		n.applyLocked(h.seq, h.hdr, h.data, false)
	}
	in.held, in.heldBytes = nil, 0
}

// applyLocked delivers the stream's message seq, unless this node has it.
// fetched says it came by a catch-up.
func (n *Node) applyLocked(seq uint64, h nats.Header, data []byte, fetched bool) {
	if seq <= n.in.lastSeq {
		return // republished twice (a leader change), or fetched already
	}
	if n.in.started && seq > n.in.lastSeq+1 {
		n.lost("in", "behind", int(seq-n.in.lastSeq-1)) // no longer in the stream
	}
	n.in.lastSeq = seq
	m, err := parseMsg(h, data)
	if err != nil {
		n.lost("in", "malformed", 1)
		return
	}
	if fetched {
		n.m.recovered.WithLabelValues("stream").Add(float64(m.count))
	}
	n.acceptLocked(m, fromStream)
}

// catchUpLocked fetches the stream's messages after the last one this node
// delivered, up to to, and delivers them in order. It reports whether it
// got there: a stream that cannot answer now (no leader) leaves the rest for
// later, unless final, when what is missing is counted as lost; what the
// stream no longer holds is counted as lost at once.
func (n *Node) catchUpLocked(to uint64, final bool) bool {
	from := n.in.lastSeq + 1
	err := n.fetchLocked(from, to)
	if n.in.lastSeq >= to {
		return true
	}
	if err != nil && !final {
		return false
	}
	k := to - n.in.lastSeq
	n.in.lastSeq = to
	n.lost("in", "behind", int(k))
	if err != nil {
		n.log.Warn("Cluster: cannot fetch what this node missed from the stream", "stream", n.stream,
			"from", from, "to", to, "error", shortErr(err))
	}
	return true
}

// fetchLocked delivers the stream's messages from to to, in order. Each is
// asked of the stream's leader (the stream's message-get request, fetchWindow
// at a time): an ephemeral consumer would be placed on any copy of the
// stream, and a copy that lags (this node's own, after a cut) holds only
// what it caught up on. A request the stream cannot answer at the moment
// (its leader changing) is made again, for up to catchUpTimeout; then it
// returns the error (the caller tries again later). So is a message "not
// found" for goneWait: right after a cut heals, the node that led the stream
// on the cut-off side answers for it until it learns of the new leader, from
// its stale copy. Messages the stream no longer holds (older than its
// retention) are counted by applyLocked, from the jump.
func (n *Node) fetchLocked(from, to uint64) error {
	ctx, cancel := context.WithTimeout(n.ctx, catchUpTimeout)
	defer cancel()
	var err error
	var missing time.Time // since when the message at seq is not found
	for seq := from; seq <= to && ctx.Err() == nil; {
		k := int(min(fetchWindow, to-seq+1))
		msgs, errs := make([]*jetstream.RawStreamMsg, k), make([]error, k)
		var wg sync.WaitGroup
		for i := range k {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(ctx, probeAnswer)
				defer cancel()
				msgs[i], errs[i] = n.streamH.GetMsg(rctx, seq+uint64(i))
			})
		}
		wg.Wait()
		done := k
		for i := range k {
			gone := errors.Is(errs[i], jetstream.ErrMsgNotFound)
			if gone && missing.IsZero() {
				missing = time.Now()
			}
			if errs[i] != nil && (!gone || time.Since(missing) < goneWait) {
				done, err = i, errs[i] // ask again from here
				break
			}
			if msgs[i] != nil {
				n.applyLocked(msgs[i].Sequence, msgs[i].Header, msgs[i].Data, true)
				missing = time.Time{}
			}
		}
		seq += uint64(done)
		if done < k {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		} else {
			err = nil
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// firstSince returns the sequence of the first message the stream stored at
// or after t (its timestamps follow its order), or 0 when none.
func (n *Node) firstSince(ctx context.Context, info *jetstream.StreamInfo, t time.Time) (uint64, error) {
	lo, hi := info.State.FirstSeq, info.State.LastSeq
	if hi == 0 || info.State.LastTime.Before(t) {
		return 0, nil
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := n.streamH.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(n.subj.stream))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return hi, nil
		case err != nil:
			return 0, err
		case m.Time.Before(t):
			lo = m.Sequence + 1
		default:
			hi = mid
		}
	}
	return lo, nil
}

// catchUpIdle is the probe's check: messages held behind a gap are tried
// again; the stream's last message ahead of this node's, and at the
// previous probe too (so it is not merely on its way), is fetched. A stream
// made anew (its every copy lost) starts from 1.
func (n *Node) catchUpIdle(info *jetstream.StreamInfo) {
	n.in.mu.Lock()
	defer n.in.mu.Unlock()
	last := info.State.LastSeq
	switch {
	case !n.in.started:
	case !info.Created.Equal(n.in.created):
		n.log.Warn("Cluster: the stream was made anew; taking it from its start", "stream", n.stream, "was_at", n.in.lastSeq)
		n.in.created, n.in.lastSeq = info.Created, 0
		n.in.held, n.in.heldBytes = nil, 0
		if last > 0 {
			n.catchUpLocked(last, true)
		}
	case len(n.in.held) > 0:
		n.resumeLocked(false)
	case last > n.in.lastSeq && n.seenLast > n.in.lastSeq:
		n.catchUpLocked(min(last, n.seenLast), false)
	}
	n.seenLast = last
}
