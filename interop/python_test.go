package interop

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

func pyPeer(script string) []string {
	return []string{pythonBin(), "-u", filepath.Join("py", script)}
}

// TestWebsocketsServer: Python's websockets as echo server, the Go client
// runs the scenario.
func TestWebsocketsServer(t *testing.T) {
	requirePython(t, "websockets", "python3-websockets")
	for _, deflate := range []bool{false, true} {
		t.Run(onOff(deflate), func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, "websockets server", append(pyPeer("websockets_peer.py"), "server", "--deflate", onOff(deflate))...)
			base := p.waitReady()
			runGoClient(t, p, base, clientExpect{Deflate: deflate, PeerCompresses: deflate, PeerFragments: true})
		})
	}
}

// TestWebsocketsClient: Python's websockets as client of the Go echo server.
func TestWebsocketsClient(t *testing.T) {
	requirePython(t, "websockets", "python3-websockets")
	for _, tc := range []struct {
		name, peerDeflate string
		opts              ws.AcceptOptions
	}{
		{"off", "off", ws.AcceptOptions{EnableCompression: true}},
		{"on", "on", ws.AcceptOptions{EnableCompression: true}},
		{"on-takeover", "on", ws.AcceptOptions{EnableCompression: true, AllowClientContextTakeover: true}},
		{"w10", "w10", ws.AcceptOptions{EnableCompression: true}},
		// The server compresses against a context of its own (RFC 7692
		// context takeover), with a 32 KiB window and with the peer's 10 bits
		// (where it keeps none).
		{"on-context", "on", ws.AcceptOptions{EnableCompression: true, Compression: ws.CompressionOptions{Context: 8192}}},
		{"w10-context", "w10", ws.AcceptOptions{EnableCompression: true, Compression: ws.CompressionOptions{Context: 8192}}},
		{"server-off", "on", ws.AcceptOptions{}},
		{"upgradeconn", "on", ws.AcceptOptions{EnableCompression: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := startEchoServer
			if tc.name == "upgradeconn" {
				start = startRawEchoServer
			}
			srv := start(t, tc.opts)
			deflate := tc.peerDeflate != "off" && tc.opts.EnableCompression
			p := startPeer(t, "websockets client", clientArgs(pyPeer("websockets_peer.py"), srv.URL, tc.peerDeflate, deflate)...)
			p.waitPass(scenarioTimeout)
			checkServerScenario(t, srv.collect(t, 2), serverExpect{Deflate: deflate, PeerCompresses: true, PeerFragments: true, CloseReason: "websockets bye"})
		})
	}
}

// clientArgs is the command line of a peer in client mode.
func clientArgs(argv []string, url, peerDeflate string, negotiated bool) []string {
	argv = append(argv, "client", "--url", url, "--deflate", peerDeflate)
	if peerDeflate != "off" && !negotiated {
		argv = append(argv, "--server-refuses-deflate")
	}
	return argv
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// TestAutobahnServer: Autobahn|Python (asyncio) as echo server, the Go client
// runs the scenario.
func TestAutobahnServer(t *testing.T) {
	requirePython(t, "autobahn.asyncio.websocket", "python3-autobahn")
	for _, deflate := range []string{"off", "on", "w10"} {
		t.Run(deflate, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, "autobahn server", append(pyPeer("autobahn_peer.py"), "server", "--deflate", deflate)...)
			base := p.waitReady()
			on := deflate != "off"
			runGoClient(t, p, base, clientExpect{Deflate: on, PeerCompresses: on, PeerFragments: true})
		})
	}
}

// TestAutobahnClient: Autobahn|Python (asyncio) as client of the Go echo
// server.
func TestAutobahnClient(t *testing.T) {
	requirePython(t, "autobahn.asyncio.websocket", "python3-autobahn")
	for _, tc := range []struct {
		name, peerDeflate string
		opts              ws.AcceptOptions
	}{
		{"off", "off", ws.AcceptOptions{EnableCompression: true}},
		{"on", "on", ws.AcceptOptions{EnableCompression: true}},
		{"w10", "w10", ws.AcceptOptions{EnableCompression: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startEchoServer(t, tc.opts)
			deflate := tc.peerDeflate != "off" && tc.opts.EnableCompression
			p := startPeer(t, "autobahn client", clientArgs(pyPeer("autobahn_peer.py"), srv.URL, tc.peerDeflate, deflate)...)
			p.waitPass(scenarioTimeout)
			checkServerScenario(t, srv.collect(t, 2), serverExpect{Deflate: deflate, PeerCompresses: true, PeerFragments: true, CloseReason: "autobahn bye"})
		})
	}
}

// TestWebsocketClient: websocket-client as client of the Go echo server
// (which offers deflate; websocket-client does not ask for it).
func TestWebsocketClient(t *testing.T) {
	requirePython(t, "websocket", "python3-websocket")
	srv := startEchoServer(t, ws.AcceptOptions{EnableCompression: true})
	p := startPeer(t, "websocket-client", clientArgs(pyPeer("websocket_client_peer.py"), srv.URL, "off", false)...)
	p.waitPass(scenarioTimeout)
	res := srv.collect(t, 2)
	a, b := res["/a"], res["/b"]
	if a == nil || b == nil {
		t.Fatalf("connections seen by the Go server: %v, want /a and /b", keys(res))
	}
	if a.Wire == nil || b.Wire == nil {
		t.Fatalf("handshake failed: /a %v, /b %v", a.ReadErr, b.ReadErr)
	}
	var ce *ws.CloseError
	if !errors.As(a.ReadErr, &ce) || ce.Code != 4001 || ce.Reason != "websocket-client bye" {
		t.Errorf("/a: read loop ended with %v, want the peer's close 4001 \"websocket-client bye\"", a.ReadErr)
	}
	in, out := a.Wire.in.stats(), a.Wire.out.stats()
	if in.Continuations < 2 || out.Continuations < 2 {
		t.Errorf("/a: continuation frames: from the peer %d, from the server %d; want fragmented messages both ways", in.Continuations, out.Continuations)
	}
	pongs := 0
	for _, f := range a.Wire.out.snapshot() {
		if f.Op == ws.OpPong && string(f.Payload) == "ping from websocket-client" {
			pongs++
		}
	}
	if pongs != 1 {
		t.Errorf("/a: the server sent %d pongs with the ping's payload, want 1", pongs)
	}
	if !b.ServerClose || b.CloseErr != nil || b.Wire.in.stats().Close == nil {
		t.Errorf("/b: server close: done=%v err=%v, peer's answer %v", b.ServerClose, b.CloseErr, b.Wire.in.stats().Close)
	}
}
