package interop

import (
	"path/filepath"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

func nodePeer(t *testing.T) []string {
	return []string{requireNode(t), filepath.Join("node", "ws_peer.js")}
}

// TestNodeServer: Node's ws as echo server, the Go client runs the scenario.
func TestNodeServer(t *testing.T) {
	requireNode(t)
	for _, deflate := range []string{"off", "on", "w10"} {
		t.Run(deflate, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, "node ws server", append(nodePeer(t), "server", "--deflate", deflate)...)
			base := p.waitReady()
			on := deflate != "off"
			runGoClient(t, p, base, clientExpect{Deflate: on, PeerCompresses: on, PeerFragments: true, EmptyClose: true})
		})
	}
}

// TestNodeClient: Node's ws as client of the Go echo server.
func TestNodeClient(t *testing.T) {
	requireNode(t)
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startEchoServer(t, tc.opts)
			deflate := tc.peerDeflate != "off" && tc.opts.EnableCompression
			p := startPeer(t, "node ws client", clientArgs(nodePeer(t), srv.URL, tc.peerDeflate, deflate)...)
			p.waitPass(scenarioTimeout)
			checkServerScenario(t, srv.collect(t, 3), serverExpect{Deflate: deflate, PeerCompresses: true, PeerFragments: true, CloseReason: "node bye", EmptyClose: true})
		})
	}
}
