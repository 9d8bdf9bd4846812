package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
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

// serving is `ovbus serve` running in a test, driven by signals.
type serving struct {
	sigs           chan os.Signal
	code           chan int
	stdout, stderr lockedBuffer
}

func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	s := &serving{sigs: make(chan os.Signal, 1), code: make(chan int, 1)}
	serveSignals = func() (<-chan os.Signal, func()) { return s.sigs, func() {} }
	t.Cleanup(func() { serveSignals = defaultServeSignals })
	go func() { s.code <- runServe(args, &s.stdout, &s.stderr) }()
	return s
}

// TestServeSkipsBrokenFile: a file that cannot be parsed beside a good one: serve starts with the
// good one, logs the broken one with file:line:col, and /health and /metrics say so. A reload
// that fixes it clears them; a reload that breaks the good one keeps its previous version.
func TestServeSkipsBrokenFile(t *testing.T) {
	dir := isolateConfig(t)
	system := filepath.Join(dir, "system.conf")
	writeFile := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(system, `{"websocket": {"port": 0, "route": "/sys", "metrics_address": "127.0.0.1:0"}}`)
	user := filepath.Join(dir, "config", "mycroft", "mycroft.conf")
	writeUserConfig(t, dir, "{\n  \"websocket\": {\"route\": \"/user\",,}\n}\n")
	s := startServe(t)
	m := waitFor(t, &s.stdout, `Message bus service started! url=(ws://(\S+)/sys) metrics=(http://\S+)`)
	busURL, health, metrics := m[1], "http://"+m[2]+"/health", m[3]
	wantLog := "ERROR - Configuration file cannot be used (skipped, the bus runs without it; --strict-config or " +
		"OVOS_BUS_STRICT_CONFIG=true to refuse it instead): config: " + user + ":2:34: invalid JSON: invalid character ','"
	if !strings.Contains(s.stdout.String(), wantLog) {
		t.Errorf("the log lacks %q:\n%s", wantLog, s.stdout.String())
	}
	c, _, err := ws.Dial(t.Context(), busURL, nil)
	if err != nil {
		t.Fatalf("the system file's route: %v", err)
	}
	c.CloseNow()
	checkHealth := func(want string) {
		t.Helper()
		if status, body := get(t, health); status != 200 || body != "ok\nconfig: "+want {
			t.Errorf("/health: %d %q, want 200 %q", status, body, "ok\nconfig: "+want)
		}
	}
	checkGauge := func(want string) {
		t.Helper()
		_, body := get(t, metrics)
		if !regexp.MustCompile(`(?m)^ovbus_config_files_broken ` + want + `$`).MatchString(body) {
			t.Errorf("/metrics: no ovbus_config_files_broken %s in\n%s", want, body)
		}
	}
	checkHealth("1 file cannot be read or parsed: " + user + ":2:34 (skipped)")
	checkGauge("1")

	// Fixed, and reloaded: every file read.
	writeUserConfig(t, dir, `{"websocket": {"filter": true}}`)
	s.sigs <- syscall.SIGHUP
	waitFor(t, &s.stdout, `Configuration reloaded changed=\[filter\]`)
	checkHealth("every file read")
	checkGauge("0")

	// The system file broken mid-edit: its previous version stays in force.
	writeFile(system, `{"websocket": {"port": 0, "route": "/other"`)
	s.sigs <- syscall.SIGHUP
	waitFor(t, &s.stdout, `(?s)ERROR - Configuration file cannot be used \(the bus keeps the version it read before;.*`+
		regexp.QuoteMeta(system)+`:1:44: invalid JSON: unexpected end of file.*Configuration reloaded: nothing changed`)
	checkHealth("1 file cannot be read or parsed: " + system + ":1:44 (previous version kept)")
	checkGauge("1")
	stopServe(t, s.sigs, s.code, &s.stderr)
}

// TestServeStrictReload: with --strict-config a reload that finds a broken file fails, naming it,
// and the running configuration stays.
func TestServeStrictReload(t *testing.T) {
	dir := isolateConfig(t)
	writeUserConfig(t, dir, `{"websocket": {"port": 0}}`)
	s := startServe(t, "--strict-config")
	waitFor(t, &s.stdout, `Message bus service started!`)
	writeUserConfig(t, dir, `{"websocket": {"port": 0, "filter": tru}}`)
	s.sigs <- syscall.SIGHUP
	waitFor(t, &s.stdout, `ERROR - Reload failed; the running configuration stays error="config: \S+mycroft.conf:1:31: invalid JSON`)
	stopServe(t, s.sigs, s.code, &s.stderr) // exit 0: the failed reload did not stop the bus
}
