// Command clusterfloor measures the floor under the cluster's cross-node
// latency: what JetStream alone costs on the path order "total" takes
// (publish to an R3 memory stream, stored on a quorum, republished in the
// stream's order to every node), with nothing of ovbus around it; and, with
// -ovbus, the same measurements through three ovbus nodes, by the same
// code, interleaved in one run, so that both see the same machine.
//
// The floor is three nats-servers (this program run again with -server,
// each an embedded nats-server configured as ovbus configures its own),
// routed on loopback, one stream as order "total" makes it, its leader on
// the sender's server (as websocket.cluster.lead would put it). Its
// messages are what the nodes send (cluster.BenchMsg: the same headers and
// batch format), cut by the same rule (cluster.BatchFits). The driver talks
// to every server, and to every ovbus node, over one loopback TCP
// connection per client, so the two paths differ by what ovbus adds: the
// WebSocket framing, the bus, the node. Every receiver looks at every frame
// in place, a floor receiver in its NATS message, an ovbus one with
// ws.Conn.NextMessage, so neither pays a copy per frame the other does not.
//
//	lone   one frame at a time, -gap apart: the latency from the sender to
//	       a client on each of the two other nodes (ovbus: WebSocket clients;
//	       floor: NATS clients on the other servers' client ports).
//	burst  5×200 as `ovbus bench` runs it: five subscribers round-robin over
//	       the three nodes, the sender on the first sends 200 frames back to
//	       back; the span from the first frame sent to the last one received.
//	       (The floor's sender hands its 200 frames to a batcher as the
//	       node's Sequence does, which publishes what is queued.)
//
// With -failover it measures JetStream's own failover instead (no ovbus):
// publishing to the stream from one server while another receives, the
// stream's leader is killed (SIGKILL), and the time until a publish is
// confirmed again and the longest silence at the receiver are taken; then
// the same for a lease kept on a KV bucket by compare-and-set (its cost per
// renewal, and how long after its leader's death a renewal succeeds again):
// the floor under any sequencer built on JetStream's primitives.
//
//	go run ./bench/cmd/clusterfloor [-ovbus ws://a/core,ws://b/core,ws://c/core] [-repeat 5] [-lone 200] [-gap 20ms] [-bursts 5] [-json FILE]
//	go run ./bench/cmd/clusterfloor -failover [-repeat 3]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	var (
		srvName   = flag.String("server", "", "run one floor server (internal)")
		cport     = flag.Int("client-port", 0, "")
		rport     = flag.Int("route-port", 0, "")
		routes    = flag.String("routes", "", "")
		dir       = flag.String("dir", "", "")
		ovbusURLs = flag.String("ovbus", "", "the three ovbus nodes' URLs, comma-separated (the sender's first)")
		repeat    = flag.Int("repeat", 5, "rounds (latency) or kills of each kind (-failover)")
		lone      = flag.Int("lone", 200, "lone frames per target per round")
		gap       = flag.Duration("gap", 20*time.Millisecond, "pause between lone frames")
		bursts    = flag.Int("bursts", 5, "5×200 bursts per target per round")
		size      = flag.Int("size", 256, "frame size in bytes")
		failover  = flag.Bool("failover", false, "measure JetStream's failover instead")
		jsonOut   = flag.String("json", "", "also write the results as JSON to this file")
	)
	flag.Parse()
	if *srvName != "" {
		if err := runServer(*srvName, *cport, *rport, *routes, *dir); err != nil {
			fmt.Fprintln(os.Stderr, "clusterfloor:", err)
			os.Exit(1)
		}
		return
	}
	tmp, err := os.MkdirTemp("", "clusterfloor-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	fs, err := startServers(tmp)
	if err != nil {
		fail(err)
	}
	defer stopServers(fs)
	var res any
	if *failover {
		res, err = runFailover(fs, *repeat)
	} else {
		var urls []string
		if *ovbusURLs != "" {
			urls = strings.Split(*ovbusURLs, ",")
			if len(urls) != 3 {
				fail(fmt.Errorf("-ovbus wants three URLs, got %d", len(urls)))
			}
		}
		res, err = runLatency(fs, urls, latencyConfig{repeat: *repeat, lone: *lone, gap: *gap, bursts: *bursts, size: *size})
	}
	if err != nil {
		fail(err)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "clusterfloor:", err)
	os.Exit(1)
}

// within runs f with a context bounded by d.
func within(d time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return f(ctx)
}

// untilAnswered calls f (each call bounded by 2 s) until it succeeds, for
// up to a minute: the first requests to a new cluster may go unanswered
// while its servers elect a meta leader.
func untilAnswered(f func(ctx context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := within(2*time.Second, f)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
