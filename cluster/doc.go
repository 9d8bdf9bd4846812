// Package cluster runs several ovbus nodes as one bus over NATS, so that a
// client on any node behaves as on a single bus (docs/protocol.md §3): every
// frame reaches every client on every node, the sender included, byte for
// byte, binary frames as binary frames.
//
// It plugs into package bus only through the bus's public API: a
// bus.Sequencer (order "total"), a bus.Follower of the log (order
// "sender"), Server.Publish with an origin, Server.AddHealth and
// Server.Metrics. Package bus knows nothing of NATS; a program that embeds
// the bus without clustering compiles none of it.
//
//	node, err := cluster.New(cluster.Options{Name: "home", Listen: "0.0.0.0:6222",
//		Routes: []string{"nats://pi-kitchen.local:6222", "nats://pi-hall.local:6222"},
//		MaxMsgSize: busOpts.MaxMsgSize})
//	busOpts.Sequencer = node.Sequencer()
//	srv, err := bus.New(busOpts)
//	srv.Start()
//	node.Start(srv)
//	...
//	srv.Shutdown(ctx)
//	node.Shutdown(ctx) // what the bus accepted still crosses
//
// # NATS
//
// With Options.NATSURL the node connects to an existing NATS server or
// cluster (nats.go; user and password, token or creds file, TLS). With
// Options.Listen and Routes it runs nats-server inside the process
// (server.NewServer): the nodes route to each other and form a NATS
// cluster, with JetStream for order "total", and nothing else to install.
// The node talks to its embedded server in-process; the embedded server also
// has a client port on 127.0.0.1 with a random port and a random token
// (nats-server starts routing only once a client port listens). Without
// Options.RouteToken the route port takes any node that reaches it: keep it
// on a trusted network, or give every node the same RouteToken (the
// embedded server's cluster authorization: a node without it is refused,
// and each refusal is logged as "authentication error"). The routes carry
// no compression (s2 costs CPU per message and, on a LAN, saves nothing).
//
// A frame crosses NATS once, as the data of one NATS message, unchanged. Its
// headers carry the rest: Ovbus-Origin (the node whose client sent it),
// Ovbus-Op ("binary" for a binary frame) and Ovbus-Sent (when the origin
// accepted it, for the latency histogram). Frames that are already queued
// when a message goes out (a burst) share one message, with Ovbus-Batch
// giving their number and each frame's length and opcode before its
// unchanged bytes; a frame alone never waits for company (batch.go). A node
// never forwards a frame that came from another node, so nothing loops or
// doubles.
//
// # Order "total" (the default)
//
// One JetStream stream (memory storage, bounded by StreamMaxAge and
// StreamMaxBytes, Replicas copies) is the sequencer. The bus hands every
// frame that passed its rules to Node.Sequence instead of appending it to
// its log; Sequence queues it (at most MaxInflight), and one publisher
// hands what is queued to the stream, asynchronously. The stream's leader republishes each frame once
// stored, in the stream's order, on core NATS; every node subscribes and
// publishes what it reads into its log, its own frames included. So every
// client on every node sees the stream's order, and each sender's frames in
// the order sent. The cost: a frame reaches even its own node's clients only
// after a round trip to the stream's leader and a quorum of its copies.
// A frame sent on the leader's node skips the route to the leader:
// Options.Lead asks for the leadership for the node whose clients send the
// most (once its link is up and its copy current, again after each time it
// comes back). Across a network that saves a round trip per frame; with
// three nodes on one machine the gain was within the noise.
//
// # Order "sender"
//
// Core NATS, no stream. The bus appends its clients' frames to its log
// itself; a follower of the log publishes those of this node's clients, and
// a subscription publishes the other nodes' frames into the log with their
// node as origin. A node's own clients see its frames at once, as on a
// single bus. What it keeps: each sender's frames reach every client in the
// order sent; on one node, all clients see that node's one log order. What
// it does not promise:
//
//   - one order for everyone: two frames sent at about the same time by
//     clients of different nodes may reach the clients of node A in one
//     order and those of node B in the other (each node puts its own
//     clients' frames first);
//   - causal order across nodes: a reply sent on node B to a frame from
//     node A may reach the clients of node C before that frame, since the
//     two travel on different NATS connections (with an external NATS of
//     one server it is rare, with a mesh of routes it can happen);
//   - anything across a broken link: frames sent while the link is down do
//     not reach the other nodes later.
//
// # Faults
//
// The link's state is logged once per change, shown as the "cluster" line
// of GET /health ("up (order total, 2 peers)", "up (order total, 2 peers,
// stream leader)" on the stream leader's node, "down: …") and in the metric
// ovbus_cluster_link_up. /health stays 200 either way: a node whose link is
// down still serves its own clients, so a load balancer should keep sending
// them.
//
//   - NATS unreachable at start, or lost: the node serves its own clients as
//     a bus of its own and reconnects by itself (nats.go retries every second;
//     the embedded server re-dials its routes). With order "total", frames
//     are appended to the local log at once while the link is down (counted
//     in ovbus_cluster_dropped_total{direction="out",reason="link_down"}):
//     this node's clients get them, the others never do. With order
//     "sender", they stay local too (reason "link_down"). Nothing is queued
//     for later: a stale "speak" replayed minutes later helps nobody.
//   - A stream that answers late (its leader busy for a moment, say storing
//     a 20 MiB frame on a loaded machine) is not a lost link: the link goes
//     down only after three probes in a row got no answer within two
//     seconds each (about 6 s); meanwhile frames still go to the stream,
//     whose confirmations come late. A definite answer (an error, no route
//     to the others, the connection lost) takes it down at the next probe.
//   - A reachable external server that cannot carry the cluster is an error
//     at start: no JetStream with order "total" (enable JetStream or choose
//     "sender"), a max_payload smaller than max_msg_size (both numbers are
//     named). Found out only after a late connection, it is logged and the
//     link stays down.
//   - A partition, order "total": the side with a majority of the stream's
//     copies carries on, in one order among its nodes (after electing a new
//     stream leader, a few seconds, when the leader was on the other side;
//     meanwhile its frames go to their own node's clients only, reason
//     "no_stream" or "unconfirmed"). A node on the minority side knows at
//     once, by its route count, and serves its own clients alone: its
//     clients' frames reach only them (reason "link_down") and never the
//     others, not even after the heal. After the heal it receives the
//     stream again from the next frame on (its copy of the stream catches
//     up by itself); what the majority sequenced meanwhile is not replayed
//     to its clients but counted once as lost (reason "behind", from the
//     jump in the stream's sequence). Nothing arrives twice: a frame
//     delivered locally during the cut never entered the stream. A frame
//     sent just before the cut whose stream confirmation never came is
//     counted as "unconfirmed": it may have reached every node or none
//     (when it was stored, every node on the majority side has it).
//   - A partition, order "sender": each side goes on with the nodes it can
//     reach; frames do not cross the cut and are not replayed after it. A
//     node with no route left says so (reason "link_down"); a node that
//     still has some routes cannot tell which frames an unreachable node
//     missed, so those are not counted. A node that rejoins gets the
//     others' frames again from the moment its routes are back.
//   - A node that dies costs only its own clients, which reconnect to
//     another node (client.New takes several URLs); the others carry on.
//     When it held the stream's leadership, frames stay local for the few
//     seconds the others take to elect a new leader. Restarted, it rejoins.
//   - A node that falls behind is bounded like a slow client: what it
//     received and has not put into its log is limited by nats.go's pending
//     limits (MaxPendingMessages, MaxPendingBytes; beyond them reason
//     "slow" with order "sender", and a gap in the stream's sequence,
//     reason "behind", with order "total"), the stream by its age and bytes, the frames in flight to the
//     stream by MaxInflight (a sender beyond it waits up to a second, then
//     reason "backpressure", delivered locally), and order "sender"'s follower of the log like a client
//     (cut when behind: reason "lagged", an upper bound). Every loss is
//     counted and logged, at most once every 10 seconds per reason.
//   - Shutdown drains: after the bus's Shutdown, Node.Shutdown waits
//     (bounded by its context) until the stream confirmed what was published
//     (order "total") or the follower sent what the log held (order
//     "sender"), then drains the connection. The embedded server steps down
//     from the leaderships it holds, so the others go on at once.
//
// # Metrics
//
// Registered on the bus's registry (Server.Metrics):
// ovbus_cluster_sent_messages_total and _bytes_total (to the cluster),
// ovbus_cluster_received_messages_total and _bytes_total (from it; order
// "total" counts this node's own frames back from the stream too),
// ovbus_cluster_dropped_total{direction,reason}, ovbus_cluster_link_up,
// ovbus_cluster_link_changes_total and the histogram
// ovbus_cluster_relay_latency_seconds{origin="peer"|"self"}: from the
// moment the origin node accepted a frame to the moment this node put it
// into its log (clocks of different machines included for "peer").
package cluster
