package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The link's state, shown as the "cluster" line of GET /health:
//
//	starting, 1 of 2 peers (order total: waiting for the stream)
//	up, 2 of 2 peers (order total, stream leader, 3 of 3 copies)
//	relaxed, 2 of 2 peers (order total: <why>; each sender's order kept)
//	down: no other node heard (order sender, 0 of 2 peers)
//
// "starting" until the node can deliver its clients' frames to the cluster
// (order total: the stream answered; order sender: every peer heard, or
// startWait passed); "relaxed" while frames cross outside the stream's
// order (outbox.go); "down" when no other node is heard or the stream does
// not answer. /health stays 200 in every state (package doc, "Faults").

// probeInterval is how often the link is checked. probeAnswer is how long a
// probe waits for the stream's answer, and probeMisses how many probes in a
// row must go unanswered before the stream counts as not answering in
// /health: a stream leader busy for a moment (storing a large frame on a
// loaded machine) is not a lost quorum. (Frames do not wait for the probe:
// the outbox relaxes by itself when the stream does not confirm them.)
const (
	probeInterval = 500 * time.Millisecond
	probeAnswer   = 2 * time.Second
	probeMisses   = 3
)

// health is the "cluster" line of /health. It never makes /health fail.
func (n *Node) health() (string, bool) {
	return *n.detail.Load(), true
}

// Up reports whether frames of this node's clients cross to the cluster
// (the link is up, or relaxed).
func (n *Node) Up() bool { return n.up.Load() }

func (n *Node) setDetail(s string) { n.detail.Store(&s) }

func (n *Node) setProbeErr(s string) { n.probeErr.Store(&s) }

// updateState works out the link's state from the probe's findings, the
// peers heard and the outbox, and records it.
func (n *Node) updateState(now time.Time) {
	k, of := n.peerCount(now)
	peers := strconv.Itoa(k) + " of " + strconv.Itoa(of) + " peers"
	order := "order " + string(n.o.Order)
	perr := *n.probeErr.Load()
	var word, why string
	switch {
	case !n.nc.IsConnected():
		word, why = "down", "not connected to NATS"
	case n.startErr != nil:
		word, why = "down", n.startErr.Error()
	case n.o.Order == OrderTotal && !n.outReady() && !n.outRelaxed():
		word, why = "starting", "waiting for the stream"
		if perr != "" {
			why += ": " + perr
		}
	case n.o.Order == OrderSender && n.stateWord.Load() == "starting" && k < of && now.Sub(n.startedAt) < startWait:
		word, why = "starting", "waiting for the other nodes"
	case of > 0 && k == 0:
		word, why = "down", "no other node heard"
	case n.o.Order == OrderTotal && (n.outRelaxed() || n.relaxedIn(now)):
		word = "relaxed"
		why = "frames came directly from a node the stream did not answer"
		if r, reason := n.outState(); r {
			why = reason
		}
		why += "; each sender's order kept"
	case n.o.Order == OrderTotal && perr != "":
		word, why = "down", perr
	default:
		word = "up"
	}
	var line string
	switch word {
	case "down":
		line = "down: " + why + " (" + order + ", " + peers + ")"
	case "up":
		line = "up, " + peers + " (" + order
		if n.o.Order == OrderTotal {
			if n.leaderName() == n.o.NodeName {
				line += ", stream leader"
			}
			if c := n.copies.Load(); c != nil {
				line += ", " + *c
			}
		}
		line += ")"
	default:
		line = word + ", " + peers + " (" + order + ": " + why + ")"
	}
	n.m.peers.Set(float64(k))
	n.setState(word, line)
}

// outReady and outRelaxed read the outbox (order total).
func (n *Node) outReady() bool {
	n.out.mu.Lock()
	defer n.out.mu.Unlock()
	return n.out.ready
}

func (n *Node) outRelaxed() bool {
	r, _ := n.outState()
	return r
}

// setState records the link's state, logging a change of its word once.
func (n *Node) setState(word, line string) {
	n.setDetail(line)
	up := word == "up" || word == "relaxed"
	was := n.up.Swap(up)
	n.m.linkUp.Set(b2f(up))
	n.m.relaxed.Set(b2f(word == "relaxed"))
	prev := n.stateWord.Swap(word).(string)
	n.mu.Lock()
	key := word
	if word == "down" {
		key = line
	}
	changed := n.stateLog != key
	n.stateLog = key
	n.mu.Unlock()
	if !changed || n.closing.Load() {
		return
	}
	if was != up {
		n.m.linkChanges.Inc()
	}
	switch word {
	case "up":
		n.log.Info("Cluster link up", "cluster", n.o.Name, "node", n.o.NodeName, "state", line)
	case "relaxed":
		n.log.Info("Cluster: frames cross outside the stream's order for a while", "cluster", n.o.Name, "state", line)
	case "down":
		if prev == "starting" {
			n.log.Info("Cluster link not up yet", "cluster", n.o.Name, "state", line)
		} else {
			n.log.Warn("Cluster link down; serving this node's clients alone until it is back", "cluster", n.o.Name, "state", line)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// probeSoon is called by the connection's handlers; the heartbeat loop
// updates the state anyway, this only does it at once.
func (n *Node) probeSoon() {
	if !n.closing.Load() && n.bus.Load() != nil {
		n.updateState(time.Now())
	}
}

// watch probes the link and, with order "total", the stream; it ends on
// Shutdown.
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
		n.leadDone, n.leadTries, n.leadNext, n.leadAgain = false, 0, time.Time{}, time.Time{}
	}
	if !n.nc.IsConnected() {
		n.setProbeErr("not connected to NATS")
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
	if n.startErr != nil || n.o.Order == OrderSender {
		n.setProbeErr("")
		return
	}
	if n.emb != nil && n.o.Replicas > 1 {
		// A node cut off from the majority of the stream's copies cannot
		// have frames stored: say so at once.
		if nodes, need := n.emb.peers()+1, n.o.Replicas/2+1; nodes < need {
			n.streamLost(fmt.Sprintf("%d of the %d nodes the stream needs are reachable", nodes, need))
			return
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, probeAnswer)
	defer cancel()
	info, err := n.ensureStream(ctx)
	if err != nil {
		if unanswered(err) && *n.probeErr.Load() == "" && n.ctx.Err() == nil {
			if n.misses++; n.misses < probeMisses {
				return // as it was: see the next probe
			}
		}
		n.misses = 0
		n.streamLost("stream " + n.stream + ": " + shortErr(err))
		return
	}
	n.misses = 0
	leader := ""
	if info.Cluster != nil {
		leader = info.Cluster.Leader
	}
	n.leader.Store(&leader)
	n.copies.Store(copiesCurrent(info))
	if leader == n.o.NodeName {
		n.led = true
	} else if leader != "" && n.led {
		// It lost the leadership (a freeze, a partition): ask again.
		n.led, n.leadDone, n.leadTries, n.leadNext, n.leadAgain = false, false, 0, time.Time{}, time.Time{}
	}
	n.out.mu.Lock()
	n.out.ready, n.out.answered = true, true
	n.out.mu.Unlock()
	n.setProbeErr("")
	n.catchUpIdle(info)
	if n.o.Lead && n.leadDone && !n.leadAgain.IsZero() && time.Now().After(n.leadAgain) {
		n.leadDone, n.leadTries, n.leadAgain = false, 0, time.Time{} // gave up a while ago: ask again
	}
	if n.o.Lead && !n.leadDone && n.up.Load() {
		n.askLead(ctx, info)
	}
	n.moveLead(ctx, info)
}

// copiesCurrent says how many of the stream's copies are current ("3 of 3
// copies"), as its leader sees them: a copy that is behind (its node just
// restarted, or came back) cannot stand in for another yet.
func copiesCurrent(info *jetstream.StreamInfo) *string {
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil
	}
	k := 1 // the leader's
	for _, r := range info.Cluster.Replicas {
		if r != nil && !r.Offline && (r.Current || r.Lag <= leadMaxLag) {
			k++
		}
	}
	s := strconv.Itoa(k) + " of " + strconv.Itoa(info.Config.Replicas) + " copies"
	return &s
}

// streamLost records that the stream did not answer the probe.
func (n *Node) streamLost(why string) {
	empty := ""
	n.leader.Store(&empty)
	n.out.mu.Lock()
	n.out.answered = false
	n.out.mu.Unlock()
	n.setProbeErr(why)
}

// leadTries bounds the requests for the stream's leadership in a row
// (Options.Lead), leadRetry spaces them: a handover the stream did not
// complete (its raft election went to another copy) is asked again. A node
// that gave up asks again after leadPause: its copy may not have been able
// to lead yet (a restarted node's catch-up can fail and start over), and
// the wish to lead stands; two nodes with Lead set (a misconfiguration)
// then swap the leadership at most once per leadPause.
// moveRetry spaces the requests for a peer that cannot reach the leader.
const (
	leadTries = 5
	leadRetry = 2 * time.Second
	leadPause = 30 * time.Second
	moveRetry = 5 * time.Second
	// leadMaxLag: a copy this few entries behind the leader counts as
	// current (under traffic the leader's view of a follower lags by what
	// is on its way).
	leadMaxLag = 16
)

// askLead asks the stream's leader to hand its leadership to this node
// (Options.Lead) after each time the link comes up or it loses the
// leadership, until it leads (leadTries requests in a row, then again after
// leadPause): a node that restarts takes it back. Frames sent
// during a handover may wait for it, or cross directly for a moment.
func (n *Node) askLead(ctx context.Context, info *jetstream.StreamInfo) {
	if info.Cluster == nil || info.Cluster.Leader == "" || time.Now().Before(n.leadNext) {
		return // no leader yet, or a request is on its way: look at the next probe
	}
	if info.Cluster.Leader == n.o.NodeName {
		n.leadDone, n.leadAgain = true, time.Time{}
		if n.leadTries > 0 {
			n.log.Info("Cluster: this node leads the stream (cluster.lead)", "stream", n.stream)
		}
		return
	}
	if n.cutOff(time.Now()) {
		// Leading, it would leave a peer it cannot reach without the stream.
		n.log.Debug("Cluster: this node is cut off from a peer; not asking for the leadership (cluster.lead)", "stream", n.stream)
		return
	}
	if n.leadTries >= leadTries {
		n.leadDone, n.leadAgain = true, time.Now().Add(leadPause)
		n.log.Warn("Cluster: the stream's leadership did not come to this node (cluster.lead); leaving it where it is for now",
			"stream", n.stream, "leader", info.Cluster.Leader, "requests", n.leadTries, "ask_again_in", leadPause)
		return
	}
	member, current, lag := n.replica(info)
	if !member {
		// More nodes than copies (the stream's copies are elsewhere), or
		// the leader does not know this node again yet (just restarted).
		n.leadTries++
		n.leadNext = time.Now().Add(leadRetry)
		n.log.Debug("Cluster: this node holds no copy of the stream, as its leader sees it (cluster.lead)",
			"stream", n.stream, "leader", info.Cluster.Leader, "replicas", n.o.Replicas)
		return
	}
	if !current {
		n.log.Debug("Cluster: this node's copy of the stream is behind; asking for the leadership later (cluster.lead)", "stream", n.stream, "lag", lag)
		return
	}
	n.leadTries++
	n.leadNext = time.Now().Add(leadRetry)
	if err := n.requestLead(ctx); err != nil {
		n.log.Debug("Cluster: asking for the stream's leadership (cluster.lead)", "stream", n.stream,
			"leader", info.Cluster.Leader, "error", shortErr(err))
	}
}

// moveLead takes the leadership for a peer that cannot reach the leader (a
// partial link: the route between the two is cut while both reach the
// others): a frame reaches a node only over a direct route from the
// stream's leader, so the leader must be a node every node reaches. A node
// that hears every peer and holds a current copy asks for it.
func (n *Node) moveLead(ctx context.Context, info *jetstream.StreamInfo) {
	now := time.Now()
	if info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == n.o.NodeName || now.Before(n.moveNext) {
		return
	}
	if !n.notHearing(info.Cluster.Leader, now) || !n.hears(info.Cluster.Leader, now) {
		return // (a leader this node does not hear either is frozen or gone, not cut off from one peer)
	}
	if k, of := n.peerCount(now); k < of {
		return // this node does not reach every peer either
	}
	if _, current, _ := n.replica(info); !current {
		return
	}
	n.moveNext = now.Add(moveRetry)
	n.log.Info("Cluster: a node cannot reach the stream's leader; asking for the leadership, since this node reaches every node",
		"stream", n.stream, "leader", info.Cluster.Leader)
	if err := n.requestLead(ctx); err != nil {
		n.log.Debug("Cluster: asking for the stream's leadership", "stream", n.stream, "error", shortErr(err))
	}
}

// replica reports whether this node holds a copy of the stream, and
// whether that copy is current (under traffic a current copy still lags
// by the messages on their way).
func (n *Node) replica(info *jetstream.StreamInfo) (member, current bool, lag uint64) {
	for _, r := range info.Cluster.Replicas {
		if r != nil && r.Name == n.o.NodeName {
			return true, r.Current || r.Lag <= leadMaxLag, r.Lag
		}
	}
	return false, false, 0
}

// requestLead asks the stream's leader to step down in favour of this node.
func (n *Node) requestLead(ctx context.Context) error {
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": n.o.NodeName}})
	m, err := n.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+n.stream, req)
	if err != nil {
		return err
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return errors.New(resp.Error.Description)
	}
	return nil
}

func shortErr(err error) string {
	if unanswered(err) {
		return "no answer (no quorum of nodes?)"
	}
	return strings.TrimPrefix(err.Error(), "nats: ")
}

// unanswered reports whether a request failed for want of an answer in
// time, rather than with one.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
