// Command peer serves the fan-out (OVOS bus) or echo workload on another Go
// WebSocket library, for side-by-side benchmarks with ovbus.
//
//	go run ./cmd/peer -lib gorilla -mode fanout -addr 127.0.0.1:8181 -route /core
//
// It prints "listening on ADDR" to stderr once the port accepts and runs until
// SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ovbus/ovbus/bench/peers"
)

func main() {
	lib := flag.String("lib", "gorilla", "library: "+strings.Join(peers.Libraries(), ", "))
	mode := flag.String("mode", "fanout", "workload: fanout or echo")
	addr := flag.String("addr", "127.0.0.1:8181", "listen address")
	route := flag.String("route", "/core", "WebSocket path; other paths get 404")
	maxSize := flag.Int64("max", peers.DefaultMaxMessageSize, "largest message accepted, bytes")
	queue := flag.Int("queue", peers.DefaultQueue, "fan-out: messages queued per client before it is dropped (gorilla, coder, gobwas)")
	verbose := flag.Bool("v", false, "log unexpected connection errors")
	flag.Parse()

	opts := peers.Options{MaxMessageSize: *maxSize, Queue: *queue}
	if *verbose {
		opts.Logf = log.Printf
	}
	h, err := peers.Handler(*lib, peers.Mode(*mode), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "peer %s %s listening on %s%s\n", *lib, *mode, ln.Addr(), *route)

	srv := &http.Server{Handler: peers.Mux(*route, h)}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		os.Exit(0) // like the OVOS bus: drop the connections
	}()
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
