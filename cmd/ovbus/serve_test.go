package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// isolateConfig points every configuration path at a temporary directory
// and returns it; the user's mycroft.conf is dir/config/mycroft/mycroft.conf.
func isolateConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"HOME":                     dir,
		"XDG_CONFIG_HOME":          filepath.Join(dir, "config"),
		"XDG_CONFIG_DIRS":          filepath.Join(dir, "xdg"),
		"XDG_STATE_HOME":           filepath.Join(dir, "state"),
		"XDG_DATA_HOME":            filepath.Join(dir, "data"),
		"MYCROFT_SYSTEM_CONFIG":    filepath.Join(dir, "system.conf"),
		"OVOS_DISTRIBUTION_CONFIG": filepath.Join(dir, "distribution.conf"),
		"MYCROFT_WEB_CACHE":        filepath.Join(dir, "web_cache.json"),
	} {
		t.Setenv(k, v)
	}
	for _, k := range []string{"OVOS_DEFAULT_CONFIG", "OVOS_CONFIG_BASE_FOLDER", "OVOS_CONFIG_FILENAME", "OVOS_BUS_CONFIG_FILE",
		"OVOS_BUS_HOST", "OVOS_BUS_PORT", "OVOS_BUS_ROUTE", "OVOS_BUS_MAX_MSG_SIZE", "OVOS_BUS_USE_SSL", "OVOS_BUS_LOG_LEVEL",
		"OVOS_BUS_STRICT_CONFIG"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	return dir
}

func writeUserConfig(t *testing.T, dir, text string) {
	t.Helper()
	p := filepath.Join(dir, "config", "mycroft", "mycroft.conf")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls buf until re matches, and returns the submatches.
func waitFor(t *testing.T, buf *lockedBuffer, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(buf.String()); m != nil {
			return m
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q in:\n%s", re, buf.String())
	return nil
}

func TestServeLifecycle(t *testing.T) {
	dir := isolateConfig(t)
	writeUserConfig(t, dir, "// the user's file\n{\"websocket\": {\"port\": 0}}\n")
	sigs := make(chan os.Signal, 1)
	serveSignals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	t.Cleanup(func() { serveSignals = defaultServeSignals })

	// systemd's notification socket (Type=notify units).
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "notify"))

	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() { code <- runServe(nil, &stdout, &stderr) }()
	url := waitFor(t, &stdout, `Message bus service started! url=(ws://\S+)`)[1]

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := ws.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, b, err := c.ReadMessage(ctx); err != nil || !strings.Contains(string(b), `"connected"`) {
		t.Fatalf("greeting: %q %v", b, err)
	}

	// SIGHUP: the changed file is applied live, the port change needs a restart.
	writeUserConfig(t, dir, `{"websocket": {"port": 1, "filter": true}, "logging": {"log_level": "DEBUG"}}`)
	sigs <- syscall.SIGHUP
	waitFor(t, &stdout, `Configuration reloaded changed="\[filter log_level\]" needs_restart=\[port\]`)
	if err := c.WriteMessage(ctx, ws.OpText, []byte(`{"type":"hello","context":{"source":"test"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.ReadMessage(ctx); err != nil || !strings.Contains(string(b), "hello") {
		t.Fatalf("echo: %q %v", b, err)
	}
	waitFor(t, &stdout, `DEBUG - hello source: test destination: \[\]\nSESSION: None`)

	// SIGTERM: the client sees the connection drop, without a close frame.
	stopServe(t, sigs, code, &stderr)
	_, _, err = c.ReadMessage(ctx)
	var ce *ws.CloseError
	if err == nil || (errors.As(err, &ce) && ce.Code != ws.StatusAbnormalClosure) {
		t.Fatalf("after shutdown the client read %v, want a dropped connection", err)
	}
	var states []string
	notify.SetReadDeadline(time.Now().Add(time.Second))
	for {
		b := make([]byte, 64)
		n, err := notify.Read(b)
		if err != nil {
			break
		}
		states = append(states, string(b[:n]))
	}
	if got := strings.Join(states, ","); got != "READY=1,RELOADING=1,READY=1,STOPPING=1" {
		t.Errorf("sd_notify states %s", got)
	}
	out := stdout.String()
	order := []string{"Starting message bus service...", "Loading message bus configs", "Message bus service started!", "Message bus is shutting down...", "Message bus stopped"}
	last := -1
	for _, line := range order {
		i := strings.Index(out, line)
		if i < last {
			t.Fatalf("%q missing or out of order in:\n%s", line, out)
		}
		last = i
	}
	logFile, err := os.ReadFile(filepath.Join(dir, "state", "mycroft", "bus.log"))
	if err != nil || !strings.Contains(string(logFile), "Message bus is shutting down...") {
		t.Fatalf("log file: %v\n%s", err, logFile)
	}
}

func TestServeBindFailure(t *testing.T) {
	isolateConfig(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	var stdout, stderr lockedBuffer
	code := runServe([]string{"--port", strconv.Itoa(port)}, &stdout, &stderr)
	if code == 0 {
		t.Fatal("exit code 0 on a failed bind")
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if !strings.Contains(stderr.String(), addr) || !strings.Contains(stderr.String(), "address already in use") {
		t.Fatalf("stderr lacks the address and the reason: %s", stderr.String())
	}
	if strings.Contains(stdout.String(), "started!") {
		t.Fatalf("logged started although the bind failed:\n%s", stdout.String())
	}
}

func TestServePrintConfigAndBadConfig(t *testing.T) {
	dir := isolateConfig(t)
	var stdout, stderr lockedBuffer
	if code := runServe([]string{"--print-config", "--port", "9999"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !regexp.MustCompile(`port\s+9999\s+# flag --port`).MatchString(stdout.String()) {
		t.Fatalf("print-config:\n%s", stdout.String())
	}
	// In strict mode a file that cannot be parsed stops the start (serve_files_test.go has the
	// default, lenient mode); a bad value does in both modes.
	writeUserConfig(t, dir, "{\"websocket\": {\"port\": 8181,,}}\n")
	stdout, stderr = lockedBuffer{}, lockedBuffer{}
	if code := runServe([]string{"--strict-config"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d with a broken config and --strict-config", code)
	}
	if !strings.Contains(stderr.String(), "mycroft.conf:1:29: invalid JSON") {
		t.Fatalf("the error does not name the file, line and column: %s", stderr.String())
	}
	writeUserConfig(t, dir, "{\"websocket\": {\"port\": \"eighty\"}}\n")
	stdout, stderr = lockedBuffer{}, lockedBuffer{}
	if code := runServe(nil, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), `mycroft.conf:1:16: websocket.port: expected an integer 0-65535, got "eighty"`) {
		t.Fatalf("bad value: exit %d, stderr %s", code, stderr.String())
	}
	if code := runServe([]string{"extra"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d for an extra argument", code)
	}
}
