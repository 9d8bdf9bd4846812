package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestSignalDropsConnections: SIGTERM and SIGINT end the bus with exit code
// 0, and clients see their connection drop without a close frame (docs/protocol.md §8):
// that is what makes OVOS's Python client reconnect.
func TestSignalDropsConnections(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			b := startDefault(t)
			g, py := dialGo(t, b.url(), nil), dialPy(t, b.url(), "")
			raw := dialRaw(t, b.addr(), "/core", 0)
			connectAll(t, g, py)
			start := time.Now()
			if code := b.stop(sig, 15*time.Second); code != 0 {
				t.Errorf("exit code after %v = %d, want 0", sig, code)
			}
			t.Logf("exited %v after %v", sig, time.Since(start).Round(time.Millisecond))
			b.waitLog(time.Second, "Message bus is shutting down...")
			expectDropped(t, g, 5*time.Second)
			expectDropped(t, py, 5*time.Second)
			f := g.next(time.Second)
			t.Logf("our client saw: %v", f)
			// At the frame level: the stream ends with no close frame.
			frames, err := raw.drain(t, 5*time.Second)
			for _, f := range frames {
				if f.op == ws.OpClose {
					t.Fatalf("a raw client received a close frame %x", f.data)
				}
			}
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				t.Fatal("a raw client is still connected after the bus exited")
			}
			t.Logf("raw client: %d frames, then %v", len(frames), err)
		})
	}
}

// TestShutdownCloseFrames: with close_frames_on_shutdown the clients get a
// 1001 close frame instead, after which websocket-client (as ovos-bus-client
// drives it) does not reconnect: why it is off by default.
func TestShutdownCloseFrames(t *testing.T) {
	t.Parallel()
	needPython(t)
	sb := newSandbox(t)
	sb.write(sb.systemFile, `{"websocket": {"close_frames_on_shutdown": true}}`)
	sb.usePort()
	b := sb.start()
	g, py := dialGo(t, b.url(), nil), dialPy(t, b.url(), "")
	connectAll(t, g, py)
	rc := startReconnect(t, b.url())
	rc.waitFor(t, "SYNCED 1", recvTimeout)

	if code := b.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	expectClosed(t, g, 1001, 5*time.Second)
	expectClosed(t, py, 1001, 5*time.Second)
	rc.waitFor(t, "CLOSE 1001", 5*time.Second)
	rc.waitFor(t, "GAVEUP", 5*time.Second)
}

// TestRestartReconnect: a websocket-client WebSocketApp, reconnecting as
// ovos-bus-client does, finds the bus again after it was stopped and
// started on the same port, and messages flow both ways again.
func TestRestartReconnect(t *testing.T) {
	t.Parallel()
	needPython(t)
	sb := newSandbox(t)
	sb.usePort()
	b := sb.start()
	rc := startReconnect(t, b.url())
	rc.waitFor(t, "SYNCED 1", recvTimeout)

	ping := func(id int) {
		t.Helper()
		g := dialGo(t, b.url(), nil)
		connectAll(t, g)
		msg := fmt.Appendf(nil, `{"type":"e2e.ping","data":{"id":%d},"context":{}}`, id)
		g.send(ws.OpText, msg)
		rc.waitFor(t, "MSG "+base64.StdEncoding.EncodeToString(msg), recvTimeout)
		// The Python client answers; our client sees the answer.
		deadline := time.Now().Add(recvTimeout)
		for {
			f := g.next(time.Until(deadline))
			if f.end {
				t.Fatalf("connection ended: %v", f)
			}
			if bytes.Contains(f.data, []byte(`"e2e.pong"`)) {
				if !jsonEqual(f.data, fmt.Appendf(nil, `{"type":"e2e.pong","data":{"n":%d,"id":%d},"context":{}}`, id, id)) {
					t.Fatalf("pong = %s, want it from connection %d", f.data, id)
				}
				break
			}
		}
		g.c.CloseNow()
	}
	ping(1)

	port := b.port
	if code := b.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("exit code = %d, want 0", code)
	}
	rc.waitFor(t, "ERROR", 5*time.Second)
	time.Sleep(500 * time.Millisecond) // a failed reconnection or two

	sb.port = port
	b = sb.start()
	if b.port != port {
		t.Fatalf("restarted on port %d, want %d", b.port, port)
	}
	rc.waitFor(t, "SYNCED 2", 15*time.Second)
	ping(2)
	if rc.seen("GAVEUP") {
		t.Fatal("the Python client gave up")
	}
}

// reconnectClient is testdata/reconnect.py.
type reconnectClient struct {
	events chan string
	log    []string
}

func startReconnect(t *testing.T, url string) *reconnectClient {
	t.Helper()
	rc := &reconnectClient{}
	_, rc.events = runScript(t, nil, func(stderr string) {
		t.Logf("reconnect.py events:\n%s\nstderr:\n%s", strings.Join(rc.log, "\n"), stderr)
	}, "reconnect.py", url, "0.2")
	return rc
}

// waitFor waits for an event line starting with prefix.
func (rc *reconnectClient) waitFor(t *testing.T, prefix string, timeout time.Duration) {
	t.Helper()
	for _, l := range rc.log {
		if strings.HasPrefix(l, prefix) {
			return
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-rc.events:
			if !ok {
				t.Fatalf("reconnect.py exited before %q; events:\n%s", prefix, strings.Join(rc.log, "\n"))
			}
			rc.log = append(rc.log, ev)
			if strings.HasPrefix(ev, prefix) {
				return
			}
		case <-timer.C:
			t.Fatalf("reconnect.py: no %q within %v; events:\n%s", prefix, timeout, strings.Join(rc.log, "\n"))
		}
	}
}

// seen reports whether an event starting with prefix arrived so far.
func (rc *reconnectClient) seen(prefix string) bool {
	for {
		select {
		case ev, ok := <-rc.events:
			if !ok {
				goto done
			}
			rc.log = append(rc.log, ev)
			continue
		default:
		}
		break
	}
done:
	for _, l := range rc.log {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// TestLogFile: the lifecycle lines of docs/protocol.md §7 go to stdout and to the
// rotating file $XDG_STATE_HOME/mycroft/bus.log.
func TestLogFile(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.usePort()
	b := sb.start()
	if code := b.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("exit code = %d", code)
	}
	file, err := os.ReadFile(filepath.Join(sb.stateHome, "mycroft", "bus.log"))
	if err != nil {
		t.Fatalf("the log file: %v", err)
	}
	lifecycle := []string{"Starting message bus service...", "Loading message bus configs", startedLine, "Message bus is shutting down..."}
	for name, text := range map[string]string{"stdout": b.stdout.String(), "log file": string(file)} {
		last := -1
		for _, l := range lifecycle {
			i := strings.Index(text, l)
			if i < 0 || i < last {
				t.Errorf("%s: %q missing or out of order:\n%s", name, l, text)
				break
			}
			last = i
		}
	}
}

// TestReload: SIGHUP re-reads the configuration, applies filter and the log
// level live and says that a new route needs a restart.
func TestReload(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.write(sb.userFile(), `{"websocket": {"filter": false}}`)
	sb.usePort()
	b := sb.start()
	g := dialGo(t, b.url(), nil)
	connectAll(t, g)

	sb.write(sb.userFile(), `{"websocket": {"filter": true, "route": "/new"}, "logging": {"log_level": "DEBUG"}}`)
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line := b.waitLog(10*time.Second, "Configuration reloaded")
	changed, restart, _ := strings.Cut(line, "needs_restart")
	for _, want := range []string{"filter", "log_level"} {
		if !strings.Contains(changed, want) {
			t.Errorf("the reload line does not list %s as changed: %s", want, line)
		}
	}
	if !strings.Contains(restart, "route") {
		t.Errorf("the reload line does not say the route needs a restart: %s", line)
	}
	msg := []byte(`{"type":"e2e.reloaded","data":{},"context":{"source":"x"}}`)
	g.send(ws.OpText, msg)
	expectFrame(t, g, ws.OpText, msg)
	b.waitLog(5*time.Second, "e2e.reloaded source: x destination: []")
	// Still on the old route.
	expectGreeting(t, dialGo(t, b.url(), nil))

	// A file broken on reload is reported and keeps the version read before: nothing changes.
	sb.write(sb.userFile(), "{broken")
	b.cmd.Process.Signal(syscall.SIGHUP)
	b.waitLog(10*time.Second, "ERROR", "the bus keeps the version it read before", sb.userFile()+":1:2: invalid JSON")
	b.waitLog(10*time.Second, "Configuration reloaded changed=[] needs_restart=[route]")
	again := []byte(`{"type":"e2e.still.filtered","data":{},"context":{"source":"x"}}`)
	g.send(ws.OpText, again)
	expectFrame(t, g, ws.OpText, again)
	b.waitLog(5*time.Second, "e2e.still.filtered source: x destination: []")
}
