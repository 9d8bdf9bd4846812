// Package interop holds the interoperability tests of package ws against
// real third-party WebSocket peers: Python's websockets, autobahn and
// websocket-client, Node's ws, and headless Chromium (through chromedp).
//
// It is a separate module so that the heavy test-only dependencies stay out
// of the main module. Install the peers with `make deps`
// (scripts/install-test-deps.sh), then run
//
//	cd interop && go test -race ./...
package interop
