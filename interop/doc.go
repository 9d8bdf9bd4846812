// Package interop holds the interoperability tests of package ws against
// real third-party WebSocket peers: Python's websockets, autobahn and
// websocket-client, Node's ws, and headless Chromium (through chromedp);
// and, since Chromium is here, the browser tests of the bus monitor's page
// (package monitor, monitor_test.go).
//
// It is a separate module so that the heavy test-only dependencies stay out
// of the main module. Install the peers with `make deps`
// (scripts/install-test-deps.sh), then run
//
//	cd interop && go test -race ./...
package interop
