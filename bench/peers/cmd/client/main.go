// Command client is an independent benchmark client for the OVOS bus and its
// peers. Its WebSocket side is gobwas/ws (frames read with ws.ReadHeader from
// a bufio.Reader, written with ws.WriteFrame), not ovbus's ws package, so a
// figure it agrees on with `ovbus bench` does not depend on our client's
// costs, which differ with the way each server writes.
//
//	client fanout [-clients 100] [-messages 2000] [-repeat 3] NAME=URL[@PID] ...
//	client steady [-preset steady | -clients 20 -rate 2000 -binary-share 0.01] [-duration 30s] [-repeat 3] [-json FILE] NAME=URL[@PID] ...
//	client idle   [-n 5000,19000] [-settle 5s] NAME=URL@PID ...
//
// fanout is the upstream OVOS benchmark (docs/protocol.md §10), measured the
// way `ovbus bench` does, so the two can be compared run for run: M
// subscribers connect and take their greeting, then one sender; warm-up
// messages go until every subscriber has the last one; then the sender sends
// N messages back to back without reading. The clock starts just before the
// first timed send and stops at the last delivery of any subscriber;
// deliveries/s is the distinct timed messages received ÷ that time. The
// targets run interleaved (A B … A B …). CPU is read over the same phase:
// this process's from getrusage, the server's (PID given, or found from the
// URL's port) from /proc/PID/task/*/schedstat.
//
// steady is `ovbus bench --steady` (steady.go): N clients that all send, each
// on its own schedule at a share of a total rate, and all receive, with
// latency from each frame's scheduled send time; it reports exact
// percentiles (and p99 and p99.9 from when the sender began to write each
// frame: without the senders' lateness, the bus's share), lost, reordered and
// duplicated frames, and the server's CPU
// time per frame and per delivery, as a markdown table (and -json).
//
// idle opens idle connections to each target, one target at a time, and
// reports the server's resident memory per connection: (RSS with n
// connections − RSS before) ÷ n, each RSS read from /proc/PID/status after the
// settle time, and the same over the connections added since the previous
// level. The levels are cumulative on one server process (5 000, then 14 000
// more for 19 000). RLIMIT_NOFILE is raised to its hard limit first.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "fanout":
		err = fanoutMain(os.Args[2:])
	case "idle":
		err = idleMain(os.Args[2:])
	case "steady":
		err = steadyMain(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: client fanout|steady|idle [flags] NAME=URL[@PID] ...  (client fanout -h for the flags)")
	os.Exit(2)
}

// target is one server to measure.
type target struct {
	name, url string
	pid       int // 0: look it up from the URL's port
}

// parseTargets reads NAME=URL[@PID] arguments.
func parseTargets(fs *flag.FlagSet) ([]target, error) {
	var ts []target
	for _, a := range fs.Args() {
		name, url, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("target %q: want NAME=URL[@PID]", a)
		}
		t := target{name: name, url: url}
		if u, p, ok := strings.Cut(url, "@"); ok {
			pid, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("target %q: bad pid %q", a, p)
			}
			t.url, t.pid = u, pid
		}
		if t.pid == 0 {
			t.pid = listeningPID(t.url)
		}
		ts = append(ts, t)
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("no target: give NAME=URL[@PID] arguments")
	}
	return ts, nil
}
