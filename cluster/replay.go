package cluster

import (
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Replays. Every node keeps the messages of its own clients' frames for a
// while (its ring, bounded by StreamMaxAge and StreamMaxBytes: the same
// retention as the stream's) and sends them again to a node that asks: one
// that saw a gap in the node's numbering (a message missing after a cut, or
// dropped over a pending limit), heard a heartbeat announcing frames it did
// not get, or meets the node for the first time (then only frames accepted
// since the asking node started). That is how order "sender", which has no
// stream, loses nothing across a short cut, and how a frame sent directly
// while the stream did not answer reaches a node that missed it.
//
// A request goes to ovbus.<cluster>.<order>.replay.<origin> with the
// headers below (Ovbus-Origin names the asking node); the answer goes to
// its Reply subject: the messages, as first sent, then one message with
// Ovbus-End (the number of the first frame sent, or To+1 when none was) and,
// when frames of the range were no longer held, Ovbus-Evicted.
const (
	hdrFrom    = "Ovbus-From"
	hdrTo      = "Ovbus-To"
	hdrSince   = "Ovbus-Since" // Unix ns: only frames accepted since then
	hdrEnd     = "Ovbus-End"
	hdrEvicted = "Ovbus-Evicted"
)

// ring holds this node's recent messages, in their numbering.
type ring struct {
	mu       sync.Mutex
	msgs     []*outMsg
	bytes    int64
	maxBytes int64
	maxAge   time.Duration
	// the newest evicted message: what a request from before it missed
	evictedLast uint64
	evictedSent time.Time
}

func (r *ring) add(m *outMsg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	r.bytes += int64(len(m.data))
	r.evictLocked(m.sent)
}

func (r *ring) evictLocked(now time.Time) {
	k := 0
	for k < len(r.msgs)-1 && (r.bytes > r.maxBytes || now.Sub(r.msgs[k].sent) > r.maxAge) {
		m := r.msgs[k]
		r.bytes -= int64(len(m.data))
		r.evictedLast, r.evictedSent = m.last(), m.sent
		r.msgs[k] = nil
		k++
	}
	if k > 0 {
		r.msgs = append(r.msgs[:0], r.msgs[k:]...)
	}
}

// get returns the held messages with frames in [from, to] accepted since
// since, the number of the first frame they start at (to+1 when none), and
// whether frames of the range accepted since since are no longer held.
func (r *ring) get(from, to uint64, since time.Time) (out []*outMsg, first uint64, evicted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evictLocked(time.Now())
	i := sort.Search(len(r.msgs), func(i int) bool { return r.msgs[i].last() >= from })
	for ; i < len(r.msgs) && r.msgs[i].first <= to; i++ {
		if m := r.msgs[i]; !m.sent.Before(since) {
			out = append(out, m)
		}
	}
	first = to + 1
	if len(out) > 0 {
		first = max(out[0].first, from)
	}
	evicted = from <= r.evictedLast && !r.evictedSent.Before(since)
	return out, first, evicted
}

// serveReplay answers a request for this node's frames.
func (n *Node) serveReplay(req *nats.Msg) {
	if req.Reply == "" {
		return
	}
	h := req.Header
	inc, err1 := strconv.ParseUint(h.Get(hdrInc), 10, 64)
	from, err2 := strconv.ParseUint(h.Get(hdrFrom), 10, 64)
	to, err3 := strconv.ParseUint(h.Get(hdrTo), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || to < from {
		return
	}
	var since time.Time
	if ns, err := strconv.ParseInt(h.Get(hdrSince), 10, 64); err == nil {
		since = time.Unix(0, ns)
	}
	var msgs []*outMsg
	first, evicted := to+1, true // an earlier incarnation's frames are gone
	if inc == n.inc {
		msgs, first, evicted = n.ring.get(from, to, since)
	}
	for _, m := range msgs {
		n.nc.PublishMsg(m.msg(req.Reply))
	}
	end := nats.Header{
		hdrOrigin: {n.o.NodeName},
		hdrInc:    {h.Get(hdrInc)},
		hdrEnd:    {strconv.FormatUint(first, 10)},
	}
	if evicted {
		end[hdrEvicted] = []string{"1"}
	}
	n.nc.PublishMsg(&nats.Msg{Subject: req.Reply, Header: end})
}

// replayed takes a message of a replay this node asked for.
func (n *Node) replayed(msg *nats.Msg) {
	if v := msg.Header.Get(hdrEnd); v != "" {
		inc, err1 := strconv.ParseUint(msg.Header.Get(hdrInc), 10, 64)
		first, err2 := strconv.ParseUint(v, 10, 64)
		if err1 == nil && err2 == nil {
			n.replayEnd(msg.Header.Get(hdrOrigin), inc, first, msg.Header.Get(hdrEvicted) != "")
		}
		return
	}
	n.receiveNATS(msg, fromReplay)
}
