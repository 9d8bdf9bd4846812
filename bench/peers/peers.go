// Package peers holds the comparison servers of the ovbus benchmarks: the
// same two workloads ovbus serves, written on other Go WebSocket libraries the
// way each library's own documentation and examples recommend.
//
//   - Fan-out (ModeFanout) is the OVOS message bus: on connect the server sends
//     Greeting as a text frame, then relays every message a client sends, text
//     as text and binary as binary, unchanged to every connected client, the
//     sender included, in one order that every client sees.
//   - Echo (ModeEcho) sends every message back to its sender as received.
//
// The non-Go peers (Tornado, the OVOS bus's own design; Node's ws; and
// uWebSockets.js, uWS's C++ server with its C++ publish/subscribe, driven from
// Node) live beside this package as scripts; run-peer.sh starts any of them.
package peers

import (
	"fmt"
	"net/http"
	"slices"
)

// Greeting is the text frame the OVOS bus sends to every new client.
const Greeting = `{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`

// Mode selects the workload a peer serves.
type Mode string

const (
	ModeFanout Mode = "fanout"
	ModeEcho   Mode = "echo"
)

// Options configure a peer. The zero value means the defaults.
type Options struct {
	// MaxMessageSize is the largest message accepted, in bytes; 0 means
	// DefaultMaxMessageSize.
	MaxMessageSize int64
	// Queue is the number of messages a fan-out client may have waiting to be
	// written before it is dropped as too slow, for the peers whose library
	// pattern keeps one bounded queue per client (gorilla, coder, gobwas); 0
	// means DefaultQueue. gws queues without a bound, as its Broadcaster does.
	Queue int
	// Logf, when not nil, receives one line per unexpected error.
	Logf func(format string, args ...any)
}

const (
	// DefaultMaxMessageSize accepts 16 MiB echo messages and the OVOS bus's
	// 25 MiB max_msg_size.
	DefaultMaxMessageSize = 32 << 20
	// DefaultQueue holds a whole upstream benchmark run (at most 2000
	// messages plus warm-up) for a client that does not read meanwhile.
	DefaultQueue = 4096
)

func (o Options) withDefaults() Options {
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

type constructor func(Mode, Options) http.Handler

var libraries = map[string]constructor{
	"gorilla": newGorilla,
	"gws":     newGWS,
	"gobwas":  newGobwas,
	"coder":   newCoder,
}

// Libraries lists the Go libraries Handler knows, sorted.
func Libraries() []string {
	names := make([]string, 0, len(libraries))
	for n := range libraries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Handler returns the WebSocket handler of library lib for mode. Mount it on
// the bus route (the OVOS default is /core); it upgrades every request it gets.
func Handler(lib string, mode Mode, opts Options) (http.Handler, error) {
	c, ok := libraries[lib]
	if !ok {
		return nil, fmt.Errorf("peers: unknown library %q (have %v)", lib, Libraries())
	}
	if mode != ModeFanout && mode != ModeEcho {
		return nil, fmt.Errorf("peers: unknown mode %q (have fanout, echo)", mode)
	}
	return c(mode, opts.withDefaults()), nil
}

// Mux serves h on route only; every other path gets 404, as on the OVOS bus.
func Mux(route string, h http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(route, h)
	return mux
}
