package cluster

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Heartbeats. Every node publishes one every hbInterval on
// ovbus.<cluster>.<order>.hb: its name and incarnation, the number of the
// last frame it sent (Ovbus-Seq), the peers it hears (Ovbus-Heard,
// comma-separated) and, with order "total", the stream leader it sees
// (Ovbus-Leader). They tell each node
//
//   - which peers it hears: "K of N peers" in /health (N: the routes
//     configured, or the most peers ever heard at once);
//   - with order "sender", that a peer sent frames it did not get (a cut,
//     a pending limit): it asks for them (replay.go);
//   - with order "total", that a peer cannot hear the stream's leader (a
//     partial link: the route between the two is cut while both reach the
//     others; a frame reaches a node only over a direct route from the
//     server that has it): a node that hears every peer and the leader then
//     asks for the leadership, so that every node reaches the leader again;
//     and a node with cluster.lead does not take the leadership while a
//     peer that the others hear does not hear it, or it does not hear that
//     peer (link.go).
const (
	hbInterval  = 250 * time.Millisecond
	peerTimeout = 4 * hbInterval // a peer not heard this long is not counted

	hdrState  = "Ovbus-State"
	hdrLeader = "Ovbus-Leader"
	hdrHeard  = "Ovbus-Heard"
)

// peers is what the heartbeats say, under a lock of its own: a catch-up
// from the stream holds the inbox's for a while, and the heartbeats must
// go on meanwhile.
type peers struct {
	mu  sync.Mutex
	m   map[string]*peer
	max int // the most peers heard at once
}

// peer is what the heartbeats say of another node.
type peer struct {
	heard  time.Time
	leader string   // the stream leader it sees
	hears  []string // the peers it hears
}

// heartbeats publishes this node's heartbeat, moves the inbox's gaps on and
// updates the link's state, every hbInterval until Shutdown.
func (n *Node) heartbeats() {
	defer n.wg.Done()
	t := time.NewTicker(hbInterval)
	defer t.Stop()
	for {
		now := time.Now()
		n.sendHeartbeat()
		n.tickInbox(now)
		n.updateState(now)
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) sendHeartbeat() {
	if !n.nc.IsConnected() {
		return
	}
	h := nats.Header{
		hdrOrigin: {n.o.NodeName},
		hdrInc:    {n.incStr},
		hdrSeq:    {strconv.FormatUint(n.lastSent.Load(), 10)},
		hdrState:  {n.stateWord.Load().(string)},
	}
	if l := n.leaderName(); l != "" {
		h[hdrLeader] = []string{l}
	}
	if u := n.hearing(time.Now()); len(u) > 0 {
		h[hdrHeard] = []string{strings.Join(u, ",")}
	}
	n.nc.PublishMsg(&nats.Msg{Subject: n.subj.hb, Header: h})
}

// heard takes a peer's heartbeat.
func (n *Node) heard(msg *nats.Msg) {
	h := msg.Header
	name := h.Get(hdrOrigin)
	inc, err1 := strconv.ParseUint(h.Get(hdrInc), 10, 64)
	last, err2 := strconv.ParseUint(h.Get(hdrSeq), 10, 64)
	if name == "" || name == n.o.NodeName || err1 != nil || err2 != nil {
		return
	}
	now := time.Now()
	n.peer.mu.Lock()
	p := n.peer.m[name]
	if p == nil {
		p = &peer{}
		n.peer.m[name] = p
	}
	p.heard, p.leader, p.hears = now, h.Get(hdrLeader), nil
	if v := h.Get(hdrHeard); v != "" {
		p.hears = strings.Split(v, ",")
	}
	k := 0
	for _, q := range n.peer.m {
		if now.Sub(q.heard) < peerTimeout {
			k++
		}
	}
	n.peer.max = max(n.peer.max, k)
	n.peer.mu.Unlock()
	if n.o.Order == OrderSender {
		n.in.mu.Lock()
		n.announcedLocked(name, inc, last, now)
		n.in.mu.Unlock()
	}
}

// announcedLocked takes what a heartbeat of order "sender" says the peer
// sent: frames this node lacks are asked for. (The heartbeats and the
// frames come on different subscriptions, read on different goroutines: a
// gap counts only once the previous heartbeat's number is still missing.)
func (n *Node) announcedLocked(name string, inc, last uint64, now time.Time) {
	o := n.in.origins[name]
	switch {
	case o == nil:
		o = &origin{name: name, inc: inc, next: 1}
		n.in.origins[name] = o
		if last > 0 {
			// First contact: what it sent since this node started.
			o.next, o.known, o.gapSince = 0, last, now
			n.askLocked(o)
		}
	case inc < o.inc:
	case inc > o.inc:
		o.restart(inc)
		if last > 0 {
			o.known, o.gapSince = last, now
			n.askLocked(o)
		}
	default:
		mark := o.hbMark
		if mark != 0 && o.next != 0 && o.next <= mark && mark > o.known {
			o.known = mark
			if o.gapSince.IsZero() {
				o.gapSince = now
			}
			if o.asked.IsZero() {
				n.askLocked(o)
			}
		}
	}
	o.hbMark = last
}

// peerCount returns how many peers were heard lately (k) and how many
// there are (of): the routes configured, or the most ever heard at once.
func (n *Node) peerCount(now time.Time) (k, of int) {
	n.peer.mu.Lock()
	defer n.peer.mu.Unlock()
	for _, p := range n.peer.m {
		if now.Sub(p.heard) < peerTimeout {
			k++
		}
	}
	return k, max(len(n.o.Routes), n.peer.max)
}

// hearing returns the peers this node hears.
func (n *Node) hearing(now time.Time) []string {
	n.peer.mu.Lock()
	defer n.peer.mu.Unlock()
	var out []string
	for name, p := range n.peer.m {
		if now.Sub(p.heard) < peerTimeout {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// leaderName is the stream leader this node saw last ("" when unknown),
// from its own probe or, when it cannot ask the leader, from its peers.
func (n *Node) leaderName() string {
	if l := n.leader.Load(); l != nil && *l != "" {
		return *l
	}
	n.peer.mu.Lock()
	defer n.peer.mu.Unlock()
	now := time.Now()
	for _, p := range n.peer.m {
		if p.leader != "" && now.Sub(p.heard) < peerTimeout {
			return p.leader
		}
	}
	return ""
}

// notHearing reports whether a peer this node hears does not hear name.
func (n *Node) notHearing(name string, now time.Time) bool {
	n.peer.mu.Lock()
	defer n.peer.mu.Unlock()
	for pn, p := range n.peer.m {
		if pn != name && now.Sub(p.heard) < peerTimeout && !slices.Contains(p.hears, name) {
			return true
		}
	}
	return false
}

// cutOff reports whether this node is cut off from part of the cluster: a
// peer it hears does not hear it, or a peer it does not hear is heard by
// another (so it is alive, and cut off from this node only).
func (n *Node) cutOff(now time.Time) bool {
	if n.notHearing(n.o.NodeName, now) {
		return true
	}
	n.peer.mu.Lock()
	defer n.peer.mu.Unlock()
	for _, p := range n.peer.m {
		if now.Sub(p.heard) >= peerTimeout {
			continue
		}
		for _, x := range p.hears {
			if q := n.peer.m[x]; x != n.o.NodeName && (q == nil || now.Sub(q.heard) >= peerTimeout) {
				return true
			}
		}
	}
	return false
}

// hears reports whether this node heard the named peer within two
// heartbeats.
func (n *Node) hears(name string, now time.Time) bool {
	n.peer.mu.Lock()
	defer n.peer.mu.Unlock()
	p := n.peer.m[name]
	return p != nil && now.Sub(p.heard) <= 2*hbInterval
}
