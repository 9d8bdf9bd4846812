package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// A new user's first hour: a typo in one mycroft.conf beside a good one, and the tools pointed at
// a bus on a port of mycroft.conf's choosing.

// httpGet returns the status and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: recvTimeout}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// startOnConfigPort starts `ovbus serve` on a port that only the system mycroft.conf names
// (conf is its content with %d for the port; no OVOS_BUS_PORT), trying another port if the one
// chosen was taken meanwhile.
func startOnConfigPort(t *testing.T, sb *sandbox, conf string) *busProc {
	t.Helper()
	for attempt := 0; ; attempt++ {
		sb.port = freePort(t)
		sb.write(sb.systemFile, fmt.Sprintf(conf, sb.port))
		b, err := sb.tryStart()
		if err == nil {
			return b
		}
		if attempt < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		t.Fatal(err)
	}
}

// TestBrokenFileBesideGoodOne: a user file with a stray comma beside a good system file: serve
// starts with the system file's settings, logs the broken file with file:line:col, and /health
// and /metrics count it; --print-config lists it; a reload after the fix clears it.
func TestBrokenFileBesideGoodOne(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	metricsPort := freePort(t)
	user := sb.write(sb.userFile(), "{\n  \"websocket\": {\"route\": \"/typo\",,}\n}\n")
	b := startOnConfigPort(t, sb, `{"websocket": {"port": %d, "route": "/good", "metrics_address": "127.0.0.1:`+strconv.Itoa(metricsPort)+`"}}`)

	at := user + ":2:34"
	b.waitLog(5*time.Second, "ERROR", "Configuration file cannot be used (skipped", "config: "+at+": invalid JSON")
	expectGreeting(t, dialGo(t, "ws://"+b.addr()+"/good", nil))
	if status, body := httpGet(t, "http://"+b.addr()+"/health"); status != 200 ||
		body != "ok\nconfig: 1 file cannot be read or parsed: "+at+" (skipped)" {
		t.Errorf("/health: %d %q", status, body)
	}
	metrics := "http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics"
	_, body := httpGet(t, metrics)
	if !regexp.MustCompile(`(?m)^ovbus_config_files_broken 1$`).MatchString(body) {
		t.Errorf("/metrics lacks ovbus_config_files_broken 1:\n%s", body)
	}
	// Every metric the alert rules name is one this ovbus serve exports.
	rules, err := os.ReadFile("../deploy/prometheus/ovbus-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`expr: .*?(ovbus_[a-z_]+)`).FindAllStringSubmatch(string(rules), -1) {
		name := strings.TrimSuffix(m[1], "_bucket")
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("the alert rules name %s, which ovbus serve does not export", m[1])
		}
	}
	if res := sb.run(runTimeout, "serve", "--print-config"); res.code != 0 || !strings.Contains(res.stdout, "# error: config: "+at+": invalid JSON") {
		t.Errorf("--print-config: exit %d\n%s", res.code, res.output())
	}

	// Fixed and reloaded: every file read.
	sb.write(user, `{"websocket": {"filter": true}}`)
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	b.waitLog(5*time.Second, "Configuration reloaded", "filter")
	if status, body := httpGet(t, "http://"+b.addr()+"/health"); status != 200 || body != "ok\nconfig: every file read" {
		t.Errorf("/health after the fix: %d %q", status, body)
	}
	if _, body := httpGet(t, metrics); !regexp.MustCompile(`(?m)^ovbus_config_files_broken 0$`).MatchString(body) {
		t.Errorf("/metrics after the fix lacks ovbus_config_files_broken 0")
	}
	if code := b.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}

	// Strict mode keeps the exit, naming the file, line and column.
	sb.write(user, "{\n  \"websocket\": {\"route\": \"/typo\",,}\n}\n")
	sb.env["OVOS_BUS_STRICT_CONFIG"] = "true"
	if res := sb.run(runTimeout, "serve"); res.code != 1 || !strings.Contains(res.stderr, at+": invalid JSON") ||
		strings.Contains(res.output(), startedLine) {
		t.Errorf("strict: exit %d\n%s", res.code, res.output())
	}
}

// TestListenSendOnConfiguredPort: with the bus on a port and route that only mycroft.conf names,
// `ovbus listen` and `ovbus send` without --url find it, and say who they are.
func TestListenSendOnConfiguredPort(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	b := startOnConfigPort(t, sb, `{"websocket": {"port": %d, "route": "/bus", "monitor_address": "127.0.0.1:0"}}`)
	url := "ws://" + b.addr() + "/bus"

	listen := exec.Command(ovbusBin, "listen", "--json", "--count", "2", "--reconnect=false")
	listen.Env, listen.Dir = sb.environ(), sb.root
	out, errs := newLines(), newLines()
	listen.Stdout, listen.Stderr = out, errs
	if err := listen.Start(); err != nil {
		t.Fatal(err)
	}
	var listenErr error
	done := make(chan struct{}) // closed when listen has exited (listenErr set)
	go func() {
		listenErr = listen.Wait()
		out.finish()
		errs.finish()
		close(done)
	}()
	t.Cleanup(func() {
		listen.Process.Kill()
		<-done
	})
	if _, _, ok := errs.wait(0, 10*time.Second, func(s string) bool { return strings.Contains(s, "connected to "+url) }); !ok {
		t.Fatalf("listen did not connect to %s:\n%s", url, errs)
	}
	// The monitor's client list shows listen's User-Agent.
	line, _, _ := b.stdout.wait(0, time.Second, func(s string) bool { return strings.Contains(s, startedLine) })
	mon := regexp.MustCompile(`monitor=http://(\S+)/`).FindStringSubmatch(line)
	if mon == nil {
		t.Fatalf("no monitor address in %q", line)
	}
	page := dialGo(t, "ws://"+mon[1]+"/ws", nil)
	page.send(ws.OpText, []byte(`{"t":"hello","token":""}`))
	var agents []string
	for deadline := time.Now().Add(recvTimeout); len(agents) == 0 && time.Now().Before(deadline); {
		f := page.next(recvTimeout)
		var m struct {
			T        string `json:"t"`
			Sessions []struct {
				UserAgent string `json:"user_agent"`
			} `json:"sessions"`
		}
		if f.end || json.Unmarshal(f.data, &m) != nil {
			t.Fatalf("monitor: %v", f)
		}
		for _, s := range m.Sessions {
			agents = append(agents, s.UserAgent)
		}
	}
	if len(agents) != 1 || !strings.HasPrefix(agents[0], "ovbus/") {
		t.Errorf("the bus's clients have User-Agents %q, want listen's ovbus/VERSION", agents)
	}
	page.c.CloseNow()
	res := sb.run(runTimeout, "send", "e2e.from.config", `{"n": 1}`, "--wait", "e2e.from.config.response", "--timeout", "200ms")
	if res.code != 1 || !strings.Contains(res.stderr, "waiting for \"e2e.from.config.response\"") {
		t.Errorf("send (no one answers): exit %d\n%s", res.code, res.output())
	}
	if res := sb.run(runTimeout, "send", "e2e.from.config", `{"n": 2}`); res.code != 0 {
		t.Errorf("send: exit %d\n%s", res.code, res.output())
	}
	select {
	case <-done:
		if listenErr != nil {
			t.Fatalf("listen: %v\n%s", listenErr, errs)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("listen did not print 2 messages:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"connected"`) || !strings.Contains(lines[1], `"e2e.from.config"`) ||
		!strings.Contains(lines[1], `"n":1`) {
		t.Errorf("listen printed %q", lines)
	}
	if code := b.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}
