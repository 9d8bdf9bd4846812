// Package cluster runs several ovbus nodes as one bus over NATS, so that a
// client on any node behaves as on a single bus (docs/protocol.md §3): every
// frame reaches every client on every node, the sender included, byte for
// byte, binary frames as binary frames.
//
// It plugs into package bus only through the bus's public API: a
// bus.Sequencer (order "total"), a bus.Follower of the log (order
// "sender"), Server.PublishBatch and Server.Publish with an origin,
// Server.AddHealth and Server.Metrics. Package bus knows nothing of NATS; a program that embeds
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
// Options.Listen and Routes it runs nats-server inside the process: the
// nodes route to each other and form a NATS cluster, with JetStream for
// order "total", and nothing else to install. The node talks to its
// embedded server over a loopback client port with a random token (not
// in-process: node.go says why). Without Options.RouteToken the route port
// takes any node that reaches it: keep it on a trusted network, or give
// every node the same RouteToken (a node without it is refused, logged as
// "authentication error" once a minute). The routes carry no compression:
// s2 costs CPU per message and saves nothing on a LAN.
//
// A frame crosses NATS as the data of a NATS message, unchanged; frames
// already queued when a message goes out (a burst) share one message, each
// frame's length and opcode before its unchanged bytes; a frame alone never
// waits for company (batch.go). The headers say whose frames they are:
// Ovbus-Origin (the node whose client sent them), Ovbus-Inc (that node's
// incarnation: when its process started) and Ovbus-Seq (the number of the
// first frame; every node numbers its clients' frames 1, 2, 3… per
// incarnation), with Ovbus-Sent (when the origin accepted them, for the
// latency histogram), Ovbus-Op and Ovbus-Batch. A node never forwards a
// frame that came from another node, so nothing loops.
//
// Every node puts each origin's frames into its log in that origin's
// numbering, each once, whatever path they took (inbox.go): a frame it
// already has is dropped, one that comes ahead of a missing one waits for
// it, and the missing one is asked of its origin, which keeps its recent
// messages (for StreamMaxAge, at most StreamMaxBytes) and sends them again
// (replay.go). So each sender's order holds on every client by
// construction, through every fault: a frame is delivered in its place or
// counted as lost, never behind its successors. Heartbeats (every 250 ms,
// peers.go) say which nodes a node hears, the last frame each sent, and
// which peers each hears.
//
// # Order "total" (the default)
//
// One JetStream stream (memory storage, bounded by StreamMaxAge and
// StreamMaxBytes, Replicas copies) is the sequencer. The bus hands every
// frame that passed its rules to Node.Sequence instead of appending it to
// its log; Sequence queues it (at most MaxInflight), and one publisher
// numbers what is queued and hands it to the stream (outbox.go): core NATS
// with a reply subject, pipelined, never retried by a library behind the
// frames that follow. The stream's leader republishes each stored message,
// in the stream's order, on core NATS; every node puts what it reads into
// its log, its own frames included (stream.go). So every client on every
// node sees one sequence. The cost: a frame reaches even its own node's
// clients only after a round trip to the stream's leader and a quorum of
// its copies. Options.Lead asks for the leadership for the node whose
// clients send the most (once its link is up and its copy current, again
// each time it comes back or loses it, and again after a pause when the
// leadership did not come to it), saving that node's frames the route to
// the leader.
//
// When the stream does not answer (nobody leads it while the others elect
// a new leader, which nats-server's raft takes seconds to do; this node has
// no route to its leader; or the leader leaves a message unconfirmed for
// 500 ms, plus its size at 8 MiB/s), the node does not go deaf: it relaxes. After a refusal it first
// offers the oldest unconfirmed message again for 250 ms (a leadership
// handed over on purpose has no leader for tens of milliseconds); then
// every unconfirmed message, and every new one, is delivered to this
// node's clients at once and sent directly to the other nodes, which
// deliver it in its origin's order, as order "sender" does. Meanwhile the
// oldest unconfirmed message is offered to the stream every 200 ms (a
// large one every time its size takes at 8 MiB/s); once
// the stream takes it, the rest follows in order and new frames go to the
// stream again. The stream so ends up holding every frame, and every node
// drops the copies it already has. During such a window each sender's
// order holds but two frames of different senders may reach the clients of
// two nodes in different orders: the window is logged when it opens and
// closes, shown in /health ("relaxed"), in ovbus_cluster_order_relaxed and
// ovbus_cluster_relaxed_windows_total, and every frame delivered outside
// the stream's order is counted in ovbus_cluster_relaxed_frames_total. A
// sequencer of our own on a lease kept in a KV bucket would not fail over
// faster: the bucket is a stream too, with the same election.
//
// A node that missed messages of the stream (cut off, frozen, its NATS
// connection lost, or over its pending limits) sees the jump in the
// stream's sequence (or, when idle, the stream's last sequence ahead of
// its own at two probes in a row) and fetches what it missed from the
// leader by sequence, in order, before it goes on; while the stream has no
// leader, the messages behind the gap wait and the node tries again at its
// next probes. What the stream no longer holds is counted once as lost
// ("behind") and logged. A node that starts delivers what the stream
// stored since its process started (trying until it got it): its clients
// get what the others sent while it came up, not what was sent before.
//
// When the route between two nodes is cut while both reach the others (a
// partial link), a frame cannot reach a node that has no route to the
// stream's leader: a node that hears every node and the leader then asks
// for the leadership, and a node with Options.Lead does not ask for it
// while it is cut off from a node the others hear.
//
// # Order "sender"
//
// Core NATS, no stream. The bus appends its clients' frames to its log
// itself; a follower of the log numbers those of this node's clients, keeps
// them in the node's ring and publishes them; a subscription puts the other
// nodes' frames into the log with their node as origin. A node's own
// clients see its frames at once, as on a single bus. What it keeps: each
// sender's frames reach every client in the order sent, each once, also
// across a cut, a freeze or a restart of another node (what a node missed
// it asks of the origin, from the gap in the numbers or the origin's
// heartbeat; what a node meets for the first time, it asks for the frames
// sent since it started); on one node, all clients see that node's one log
// order. What it does not promise:
//
//   - one order for everyone: two frames sent at about the same time by
//     clients of different nodes may reach the clients of node A in one
//     order and those of node B in the other (each node puts its own
//     clients' frames first);
//   - causal order across nodes: a reply sent on node B to a frame from
//     node A may reach the clients of node C before that frame, since the
//     two travel on different NATS connections (with an external NATS of
//     one server it is rare, with a mesh of routes it can happen);
//   - frames older than the ring's retention (StreamMaxAge, StreamMaxBytes)
//     after a cut: they are counted as lost ("behind").
//
// # Faults
//
// The link's state is logged once per change and shown as the "cluster"
// line of GET /health: "starting, 0 of 2 peers (…)" until the node can
// deliver its clients' frames to the cluster, then "up, 2 of 2 peers (order
// total, stream leader)", "relaxed, …" (order total, see above) or "down: …"
// (K: the peers whose heartbeats it hears; N: the routes configured, or the
// most peers ever heard at once); the metrics ovbus_cluster_link_up and
// ovbus_cluster_peers say the same. /health stays 200 in every state: a node
// whose link is down still serves its own clients, so a load balancer
// should keep sending them.
//
//   - Start-up: with order "total" a starting node holds its clients'
//     frames (at most MaxInflight; a sender beyond it waits, as below) until
//     the stream answers — with Replicas 3 that is once every node of a new
//     cluster is up — and at most 10 s, after which it relaxes and delivers
//     them. With order "sender" its own clients get them at once and the
//     other nodes ask for them when they hear of it (frames accepted since
//     they started). Either way a node that starts first loses nothing.
//   - NATS unreachable, or lost: the node serves its own clients, reconnects
//     by itself (nats.go retries every second; the embedded server re-dials
//     its routes) and, once back, gets what it missed (above) while the
//     others get what its clients sent meanwhile (order total: offered to
//     the stream again; order sender: replayed on request), within the
//     retention.
//   - A node that dies costs only its own clients, which reconnect to
//     another node (client.New takes several URLs), and the frames it had
//     not sent yet; the others carry on without a pause (order total: the
//     frames cross directly until the stream has a leader again). Restarted,
//     it rejoins.
//   - A partition: the side with a majority of the stream's copies carries
//     on in one order (after electing a leader when the leader was on the
//     other side; meanwhile its frames cross directly); a node on the
//     minority side serves its own clients, relaxed, and keeps their frames
//     for the stream (within MaxInflight, StreamMaxBytes and StreamMaxAge).
//     After the heal each side gets what the other's clients sent
//     meanwhile: the minority node fetches what the majority sequenced, and
//     offers its own frames to the stream, whose place in it is after the
//     heal. With order "sender" each side asks the other for what it
//     missed.
//   - A node frozen (SIGSTOP, a stalled VM) holds up nothing but its own
//     clients: with order "total", when it leads the stream the others relax
//     after 500 ms and elect another leader. Thawed, it gets what it missed.
//     (Its raft copy of the stream, when it led the stream while frozen or
//     cut off, catches up only with the new leader's next snapshot, a minute
//     or two later; frames do not wait for it.)
//   - A reachable external server that cannot carry the cluster is an error
//     at start: no JetStream with order "total" (enable JetStream or choose
//     "sender"), a max_payload smaller than max_msg_size (both numbers are
//     named). Found out only after a late connection, it is logged and the
//     link stays down.
//   - On a 32-bit system (a Raspberry Pi on a 32-bit OS) order "total"
//     with NATS inside ovbus is a configuration error: nats-server's
//     clustered JetStream stops the process there (an unaligned 64-bit
//     atomic operation, nats-server v2.15). Order "sender", or an external
//     NATS on a 64-bit machine, works (clusterconf.TotalInside).
//   - A node that falls behind is bounded like a slow client: what it
//     received and has not put into its log is limited by nats.go's pending
//     limits (MaxPendingMessages, MaxPendingBytes; beyond them the gap is
//     asked for again), the frames on their way to the stream by
//     MaxInflight (a sender beyond it waits up to a second, then the frame
//     reaches only this node's clients: "backpressure"), what is kept for a
//     stream that does not answer by MaxInflight, StreamMaxBytes and
//     StreamMaxAge ("unstored": the frame reached the nodes that got it
//     directly), and order "sender"'s follower of the log like a client
//     (cut when behind: "lagged", an upper bound). Every loss is counted
//     (ovbus_cluster_dropped_total) and logged, at most once every 10
//     seconds per reason; frames recovered after a gap are counted in
//     ovbus_cluster_recovered_frames_total.
//   - Repeated link errors — a peer refusing this node's route token, a
//     peer away — are logged as the bus's other warnings are: nats-server's
//     at most once a minute per kind, then one line saying how many were left
//     out (bus.RateLimitWarnings).
//   - Shutdown drains: after the bus's Shutdown, Node.Shutdown waits
//     (bounded by its context) until the stream confirmed what this node
//     sent (order "total") or the follower sent what the log held (order
//     "sender"), then drains the connection. The embedded server steps down
//     from the leaderships it holds, so the others go on at once.
//
// # Metrics
//
// Registered on the bus's registry (Server.Metrics):
// ovbus_cluster_sent_messages_total and _bytes_total (to the cluster),
// ovbus_cluster_received_messages_total and _bytes_total (from it; order
// "total" counts this node's own frames back from the stream too),
// ovbus_cluster_dropped_total{direction,reason},
// ovbus_cluster_recovered_frames_total{how="stream"|"replay"},
// ovbus_cluster_link_up, ovbus_cluster_link_changes_total,
// ovbus_cluster_peers, ovbus_cluster_order_relaxed,
// ovbus_cluster_relaxed_windows_total, ovbus_cluster_relaxed_frames_total and
// the histogram ovbus_cluster_relay_latency_seconds{origin="peer"|"self"}:
// from the moment the origin node accepted a frame to the moment this node
// put it into its log (clocks of different machines included for "peer").
package cluster
