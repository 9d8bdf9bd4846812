package peers

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The peers are checked from the outside with gorilla/websocket as the
// client: the greeting, the relay (sender included, text as text, binary as
// binary, one order for all), echo up to 16 MiB and 404 off the route.

func serve(t *testing.T, lib string, mode Mode) string {
	t.Helper()
	h, err := Handler(lib, mode, Options{Logf: testLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Mux("/core", h))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/core"
}

// testLogf returns a Logf that logs to t while the test runs and is silent
// after: httptest.Server.Close does not wait for hijacked connections.
func testLogf(t *testing.T) func(string, ...any) {
	var mu sync.Mutex
	done := false
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Logf(format, args...)
		}
	}
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hangAfter bounds a read: it finds a peer that hangs, and asserts nothing about speed. The echo
// of 16 MiB took 11 s under -race on a loaded 2-core machine (make stress), so a tighter bound
// failed healthy peers.
const hangAfter = time.Minute

func read(t *testing.T, c *websocket.Conn) (int, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(hangAfter))
	mt, p, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return mt, p
}

type msg struct {
	typ  int
	data string
}

// checkFanout connects three clients and has two of them send k messages
// each at the same time, one in text and one in binary (text too when
// binaryAsText, the Tornado bus's behaviour). Every client must see the
// greeting first, then all 2k messages, each sender's in the order sent and
// every client in the same order.
func checkFanout(t *testing.T, url string, k int, binaryAsText bool) {
	const clients = 3
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		conns[i] = dial(t, url)
		mt, p := read(t, conns[i])
		if mt != websocket.TextMessage || string(p) != Greeting {
			t.Fatalf("client %d: first frame %d %q, want the text greeting", i, mt, p)
		}
	}

	var wg sync.WaitGroup
	send := func(c *websocket.Conn, typ int, prefix string) {
		defer wg.Done()
		for i := range k {
			body := fmt.Sprintf(`{"type":"bench.%s","data":{"seq":%d},"context":{}}`, prefix, i)
			if err := c.WriteMessage(typ, []byte(body)); err != nil {
				t.Errorf("send %s %d: %v", prefix, i, err)
				return
			}
		}
	}
	wg.Add(2)
	go send(conns[0], websocket.TextMessage, "a")
	go send(conns[1], websocket.BinaryMessage, "b")

	got := make([][]msg, clients)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(hangAfter))
			for range 2 * k {
				mt, p, err := c.ReadMessage()
				if err != nil {
					t.Errorf("client %d after %d messages: %v", i, len(got[i]), err)
					return
				}
				got[i] = append(got[i], msg{mt, string(p)})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range got {
		next := map[string]int{}
		for j, m := range got[i] {
			var prefix string
			var seq int
			if _, err := fmt.Sscanf(m.data, `{"type":"bench.%1s","data":{"seq":%d}`, &prefix, &seq); err != nil {
				t.Fatalf("client %d message %d: unexpected %q", i, j, m.data)
			}
			if seq != next[prefix] {
				t.Fatalf("client %d message %d: %s seq %d, want %d (per-sender order)", i, j, prefix, seq, next[prefix])
			}
			next[prefix]++
			want := websocket.TextMessage
			if prefix == "b" && !binaryAsText {
				want = websocket.BinaryMessage
			}
			if m.typ != want {
				t.Fatalf("client %d message %d (%s): type %d, want %d", i, j, prefix, m.typ, want)
			}
		}
		if i > 0 {
			for j := range got[i] {
				if got[i][j] != got[0][j] {
					t.Fatalf("client %d and client 0 differ at message %d: %q vs %q (one total order)",
						i, j, got[i][j].data, got[0][j].data)
				}
			}
		}
	}

	// A client that leaves does not disturb the others.
	conns[2].Close()
	if err := conns[0].WriteMessage(websocket.TextMessage, []byte("after")); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, p := read(t, conns[i]); string(p) != "after" {
			t.Fatalf("client %d: got %q after a client left, want %q", i, p, "after")
		}
	}
}

func checkEcho(t *testing.T, url string) {
	c := dial(t, url)
	big := make([]byte, 16<<20)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(big)
	tests := []struct {
		name string
		typ  int
		data []byte
	}{
		{"text", websocket.TextMessage, []byte(`{"type":"ping","data":{},"context":{}}`)},
		{"empty text", websocket.TextMessage, nil},
		{"binary", websocket.BinaryMessage, []byte{0, 1, 2, 0xff, 0xfe}},
		{"64 KiB text", websocket.TextMessage, bytes.Repeat([]byte("ovbus "), 64<<10/6)},
		{"16 MiB binary", websocket.BinaryMessage, big},
	}
	for _, tt := range tests {
		// Write while reading: a streaming echo (coder) answers before the
		// whole message is in, and a big message fills both directions.
		werr := make(chan error, 1)
		go func() { werr <- c.WriteMessage(tt.typ, tt.data) }()
		mt, p := read(t, c)
		if err := <-werr; err != nil {
			t.Fatalf("%s: write: %v", tt.name, err)
		}
		if mt != tt.typ || !bytes.Equal(p, tt.data) {
			t.Fatalf("%s: got type %d, %d bytes; want type %d, %d bytes", tt.name, mt, len(p), tt.typ, len(tt.data))
		}
	}
	// Pipelined: many in flight, echoed in order.
	const n = 500
	go func() {
		for i := range n {
			c.WriteMessage(websocket.TextMessage, []byte(strconv.Itoa(i)))
		}
	}()
	for i := range n {
		if _, p := read(t, c); string(p) != strconv.Itoa(i) {
			t.Fatalf("pipelined echo %d: got %q", i, p)
		}
	}
}

func check404(t *testing.T, url string) {
	u := "http" + strings.TrimPrefix(strings.TrimSuffix(url, "/core"), "ws") + "/elsewhere"
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET %s: %d, want 404", u, resp.StatusCode)
	}
}

func TestGoPeers(t *testing.T) {
	for _, lib := range Libraries() {
		t.Run(lib, func(t *testing.T) {
			t.Run("fanout", func(t *testing.T) {
				url := serve(t, lib, ModeFanout)
				checkFanout(t, url, 300, false)
				check404(t, url)
			})
			t.Run("echo", func(t *testing.T) { checkEcho(t, serve(t, lib, ModeEcho)) })
		})
	}
}

func TestHandlerErrors(t *testing.T) {
	if _, err := Handler("nope", ModeEcho, Options{}); err == nil {
		t.Error("unknown library accepted")
	}
	if _, err := Handler("gorilla", "relay", Options{}); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestSlowClientDropped: a fan-out client that never reads is dropped once
// its bounded queue is full (gorilla, coder, gobwas), and the others carry on.
func TestSlowClientDropped(t *testing.T) {
	for _, lib := range []string{"gorilla", "coder", "gobwas"} {
		t.Run(lib, func(t *testing.T) {
			h, _ := Handler(lib, ModeFanout, Options{Queue: 16})
			srv := httptest.NewServer(Mux("/core", h))
			defer srv.Close()
			url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/core"
			// The slow client's receive buffer is small (set before connect,
			// so that TCP's window follows it), so the server's writes to it
			// stall and its queue fills.
			nd := net.Dialer{Control: func(network, address string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
				})
				if err != nil {
					return err
				}
				return serr
			}}
			d := websocket.Dialer{NetDial: nd.Dial}
			slow, _, err := d.Dial(url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer slow.Close()
			fast := dial(t, url)
			read(t, fast)
			// The fast client sends in lockstep, reading its own copy of each
			// message before sending the next, so only the slow one lags.
			payload := bytes.Repeat([]byte("x"), 32<<10)
			const n = 400 // 12.5 MiB: more than the socket buffers hold
			for i := range n {
				if err := fast.WriteMessage(websocket.TextMessage, payload); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				if _, p := read(t, fast); len(p) != len(payload) {
					t.Fatalf("fast client message %d: %d bytes", i, len(p))
				}
			}
			// The slow client now reads: greeting, some messages, then the end.
			slow.SetReadDeadline(time.Now().Add(10 * time.Second))
			got := 0
			var err0 error
			start := time.Now()
			for {
				if _, _, err := slow.ReadMessage(); err != nil {
					err0 = fmt.Errorf("%w after %v", err, time.Since(start))
					break
				}
				got++
			}
			t.Logf("slow client: %d messages, then %v", got, err0)
			if got >= n+1 {
				t.Errorf("slow client got all %d messages; want it dropped", got)
			}
		})
	}
}

// peerOut is where run-peer.sh builds the Go peer, once for all tests.
var peerOut string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ovbus-peers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	peerOut = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runPeer starts a peer with run-peer.sh and stops it at the end of the test.
func runPeer(t *testing.T, name string, mode Mode) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command("./run-peer.sh", name, string(mode), strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "PEER_OUT="+peerOut, "PEER_LOG="+t.TempDir()+"/peer.log")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run-peer.sh %s %s: %v\n%s", name, mode, err, stderr.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("run-peer.sh printed %q, want a pid", out)
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGTERM)
		for range 50 {
			if syscall.Kill(pid, 0) != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	})
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || !strings.Contains(string(b), ")") {
		t.Fatalf("pid %d is not running: %v", pid, err)
	}
	return fmt.Sprintf("ws://127.0.0.1:%d/core", port)
}

// TestExternalPeers starts every peer through run-peer.sh, as bench/run.sh
// will: the Go binary, the Tornado reference on /usr/bin/python3, Node's ws
// and uWebSockets.js.
func TestExternalPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Run("go", func(t *testing.T) {
		if _, err := exec.LookPath("go"); err != nil {
			t.Skip("no go on PATH")
		}
		checkFanout(t, runPeer(t, "gws", ModeFanout), 100, false)
		checkEcho(t, runPeer(t, "gobwas", ModeEcho))
	})
	t.Run("tornado", func(t *testing.T) {
		if err := exec.Command("/usr/bin/python3", "-c", "import tornado").Run(); err != nil {
			t.Skip("/usr/bin/python3 has no tornado (apt-get install python3-tornado)")
		}
		checkFanout(t, runPeer(t, "tornado", ModeFanout), 100, true)
	})
	t.Run("node", func(t *testing.T) {
		if _, err := exec.LookPath("node"); err != nil {
			t.Skip("no node")
		}
		if _, err := os.Stat("node/node_modules/ws"); err != nil {
			t.Skip("node/node_modules missing: cd node && npm ci")
		}
		checkFanout(t, runPeer(t, "node", ModeFanout), 100, false)
		checkEcho(t, runPeer(t, "node", ModeEcho))
	})
	t.Run("uws", func(t *testing.T) {
		if _, err := exec.LookPath("node"); err != nil {
			t.Skip("no node")
		}
		if _, err := os.Stat("node/node_modules/uwebsockets"); err != nil {
			t.Skip("node/node_modules/uwebsockets missing: cd node && npm ci")
		}
		url := runPeer(t, "uws", ModeFanout)
		checkFanout(t, url, 100, false)
		check404(t, url)
		checkEcho(t, runPeer(t, "uws", ModeEcho))
	})
}
