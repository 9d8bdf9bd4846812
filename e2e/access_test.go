package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ovosClient is testdata/ovos_client.py: Debian's websocket-client driven
// exactly as ovos-bus-client drives it, from a mycroft.conf of its own.
type ovosClient struct {
	t      *testing.T
	label  string
	stdin  io.WriteCloser
	events chan string
}

// startOvosClient writes conf as the client's mycroft.conf and starts the
// client, connecting from source ("" for the default address).
func startOvosClient(t *testing.T, label, conf, source string) *ovosClient {
	t.Helper()
	needPython(t)
	path := filepath.Join(t.TempDir(), "mycroft.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	if source != "" {
		env = []string{"OVBUS_TEST_SOURCE_ADDRESS=" + source}
	}
	c := &ovosClient{t: t, label: label}
	// A short first retry, doubling as ovos-bus-client's 5 s does.
	c.stdin, c.events = runScript(t, env, func(stderr string) {
		if stderr != "" {
			t.Logf("%s stderr:\n%s", label, stderr)
		}
	}, "ovos_client.py", path, "0.2")
	return c
}

// runScript runs testdata/name with Debian's Python (and env added) until
// the test ends, and returns its stdin and its stdout's lines; failed is
// called with its stderr when the test failed.
func runScript(t *testing.T, env []string, failed func(stderr string), name string, args ...string) (io.WriteCloser, chan string) {
	t.Helper()
	needPython(t)
	cmd := exec.Command(python, append([]string{"-u", script(t, name)}, args...)...)
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "NO_PROXY=*", "no_proxy=*"), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 100000)
	go readAllLines(stdout, events)
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			failed(stderr.String())
		}
	})
	return stdin, events
}

// getMetrics returns the page the bus's metrics_address serves.
func getMetrics(t *testing.T, addr string) string {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	return string(body)
}

// metricValue reads a sample of the bus's /metrics at addr: name with its
// labels as the exposition writes them, e.g. `ovbus_closes_total{reason="x"}`
// (0 when absent).
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(getMetrics(t, addr), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s: %v", name, err)
			}
			return f
		}
	}
	return 0
}

// wait returns the next event starting with prefix; the events before it
// go to skipped. It fails the test after timeout or when the client ends.
func (c *ovosClient) wait(prefix string, timeout time.Duration, skipped func(string)) string {
	c.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.t.Fatalf("%s ended while waiting for %s", c.label, prefix)
			}
			if strings.HasPrefix(ev, prefix) {
				return ev
			}
			if skipped != nil {
				skipped(ev)
			}
		case <-timer.C:
			c.t.Fatalf("%s: no %s within %v", c.label, prefix, timeout)
		}
	}
}

func (c *ovosClient) command(cmd string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		c.t.Fatalf("%s: %v", c.label, err)
	}
}

// waitMessage waits for a message whose JSON contains sub.
func (c *ovosClient) waitMessage(sub string) string {
	c.t.Helper()
	for {
		ev := c.wait("MSG ", recvTimeout, nil)
		if strings.Contains(ev, sub) {
			return ev
		}
	}
}

// clientConf is the mycroft.conf of a client of the bus on port with route.
func clientConf(port int, route string) string {
	b, _ := json.Marshal(map[string]any{"websocket": map[string]any{"host": "127.0.0.1", "port": port, "route": route, "ssl": false}})
	return string(b)
}

// TestAccessWithTheStockClient: a hub's bus with a satellite set, a token
// in the route, and 127.0.0.2 standing for another machine. The stock
// client, configured by its mycroft.conf alone: on loopback it is trusted;
// from "elsewhere" it is refused (401) and keeps retrying as the real
// client does, and accepted with the token in its route, with the
// satellite's permissions; flooding, it is closed with 1008 while a
// healthy client's messages all arrive. The token is never in the bus's
// output or metrics.
func TestAccessWithTheStockClient(t *testing.T) {
	t.Parallel()
	const secret = "kitchen-4f1c0b7e9a2d3c5e8f6a1b0c"
	sb := newSandbox(t)
	maddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sb.env["OVOS_BUS_METRICS_ADDRESS"] = maddr
	sb.usePort()
	sb.write(sb.systemFile, `{"websocket": {"auth": {
  "permissions": {"satellite": {"emit": ["ovos.session.sync", "recognizer_loop:utterance", "e2e.flood"],
                                "rate": 20, "burst": 20}},
  "networks": {"127.0.0.2": "refuse"},
  "tokens": {"`+secret+`": {"name": "kitchen", "permissions": "satellite"}}}}}`)
	b := sb.start()
	port := b.port // start moves to another port when the one chosen was taken meanwhile

	local := startOvosClient(t, "loopback client", clientConf(port, "/core"), "")
	local.wait("OPEN 1", recvTimeout, nil)
	local.waitMessage(`"ovos.session.sync"`) // its own: it is in the fan-out

	// From 127.0.0.2, without a token: refused, and retried.
	stranger := startOvosClient(t, "client from 127.0.0.2", clientConf(port, "/core"), "127.0.0.2")
	noEntry := func(ev string) {
		if strings.HasPrefix(ev, "OPEN") {
			t.Fatal("the client from 127.0.0.2 got in without a token")
		}
	}
	for range 2 {
		if ev := stranger.wait("ERROR", recvTimeout, noEntry); ev != "ERROR WebSocketBadStatusException 401" {
			t.Fatalf("the client from 127.0.0.2: %q, want a 401 refusal", ev)
		}
		stranger.wait("RETRY", recvTimeout, noEntry)
	}

	// From 127.0.0.2, with the token in its route.
	satellite := startOvosClient(t, "satellite", clientConf(port, "/core/"+secret), "127.0.0.2")
	satellite.wait("OPEN 1", recvTimeout, nil)
	satellite.waitMessage(`"ovos.session.sync"`)
	// Its permissions are the satellite set's: speak is not relayed, and it
	// alone is told; an utterance is.
	satellite.command(`SEND {"type": "speak", "data": {}, "context": {}}`)
	satellite.waitMessage(`"ovos.bus.error"`)
	satellite.command(`SEND {"type": "recognizer_loop:utterance", "data": {"utterances": ["hi"]}, "context": {}}`)
	if ev := local.waitMessage(`"recognizer_loop:utterance"`); strings.Contains(ev, `"speak"`) {
		t.Errorf("the loopback client got %s", ev)
	}

	// The satellite floods; the loopback client sends 50 messages beside it
	// and gets every one of them.
	satellite.command(`FLOOD 2000 {"type": "e2e.flood", "data": {}, "context": {}}`)
	const n = 50
	for i := range n {
		local.command(fmt.Sprintf(`SEND {"type": "e2e.healthy", "data": {"i": %d}, "context": {}}`, i))
	}
	floods := 0
	for i := range n {
		want := fmt.Sprintf(`{"type": "e2e.healthy", "data": {"i": %d}`, i)
		local.wait("MSG "+want, recvTimeout, func(ev string) {
			if strings.Contains(ev, `"e2e.flood"`) {
				floods++
			} else if strings.Contains(ev, `"e2e.healthy"`) {
				t.Fatalf("the loopback client got %s while waiting for %d", ev, i)
			}
		})
	}
	if ev := satellite.wait("CLOSE", recvTimeout, nil); ev != "CLOSE 1008 message rate limit" {
		t.Errorf("the flooding satellite: %q, want CLOSE 1008 message rate limit", ev)
	}
	satellite.wait("GAVEUP", recvTimeout, nil) // websocket-client does not retry after a close frame
	if floods > 20+20*30 {
		t.Errorf("%d frames of the flood relayed", floods)
	}

	metrics := getMetrics(t, maddr)
	for _, want := range []string{`ovbus_closes_total{reason="rate_limited"} 1`, `ovbus_clients{identity="loopback"} 1`, `ovbus_auth_refused_total{cause="address"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "ovbus_c", "ovbus_auth"))
		}
	}
	if refused := sampleValue(metrics, `ovbus_auth_refused_total{cause="address"}`); refused < 2 {
		t.Errorf("%v refusals counted, want at least the 2 seen", refused)
	}
	for what, out := range map[string]string{"stdout": b.stdout.String(), "stderr": b.stderr.String(), "/metrics": metrics} {
		if strings.Contains(out, secret) {
			t.Errorf("the bus's %s shows the token", what)
		}
	}
}

// TestDefaultRefusesOtherMachines: with no auth configured at all, a bus
// bound to every interface serves its own machine over loopback and
// refuses a client that reaches it at the machine's network address (the
// address is another machine's, as far as the bus can tell).
func TestDefaultRefusesOtherMachines(t *testing.T) {
	t.Parallel()
	addr := nonLoopbackAddr(t)
	sb := newSandbox(t)
	sb.usePort()
	sb.env["OVOS_BUS_HOST"] = "0.0.0.0"
	if addr.To4() == nil {
		sb.env["OVOS_BUS_HOST"] = "::"
	}
	port := sb.start().port // start moves to another port when the one chosen was taken meanwhile

	local := startOvosClient(t, "loopback client", clientConf(port, "/core"), "")
	local.wait("OPEN 1", recvTimeout, nil)

	conf, _ := json.Marshal(map[string]any{"websocket": map[string]any{"host": addr.String(), "port": port}})
	if addr.To4() == nil {
		conf, _ = json.Marshal(map[string]any{"websocket": map[string]any{"host": "[" + addr.String() + "]", "port": port}})
	}
	other := startOvosClient(t, "client at "+addr.String(), string(conf), "")
	if ev := other.wait("ERROR", recvTimeout, func(ev string) {
		if strings.HasPrefix(ev, "OPEN") {
			t.Fatalf("a client from %s got in by default", addr)
		}
	}); ev != "ERROR WebSocketBadStatusException 401" {
		t.Fatalf("the client at %s: %q, want a 401 refusal", addr, ev)
	}
}

// nonLoopbackAddr returns an address of this machine that is not loopback,
// or skips the test when it has none.
func nonLoopbackAddr(t *testing.T) net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP
		}
		v6 = ipn.IP
	}
	if v6 == nil {
		t.Skip("this machine has no address but loopback: nothing to connect from that the bus would not trust")
	}
	return v6
}

// grepLines returns the lines of s that start with one of prefixes.
func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// sampleValue reads one sample of a metrics page, 0 when absent.
func sampleValue(page, sample string) float64 {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
