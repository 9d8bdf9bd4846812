package main

import (
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopServe sends SIGTERM to a running serve and checks that it exits 0.
func stopServe(t *testing.T, sigs chan<- os.Signal, code <-chan int, stderr *lockedBuffer) {
	t.Helper()
	sigs <- syscall.SIGTERM
	select {
	case got := <-code:
		if got != 0 {
			t.Fatalf("exit code %d, stderr %s", got, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// TestServeMonitor: --monitor-address serves the page beside the bus; a
// non-loopback address needs --monitor-allow-remote.
func TestServeMonitor(t *testing.T) {
	isolateConfig(t)
	sigs := make(chan os.Signal, 1)
	serveSignals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	t.Cleanup(func() { serveSignals = defaultServeSignals })

	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- runServe([]string{"--port", "0", "--monitor-address", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	url := waitFor(t, &stdout, `Message bus service started! .*monitor=(http://\S+)`)[1]
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "<title>ovbus monitor</title>") {
		t.Errorf("GET %s: %s\n%s", url, resp.Status, body)
	}
	stopServe(t, sigs, code, &stderr)

	stdout, stderr = lockedBuffer{}, lockedBuffer{}
	if got := runServe([]string{"--port", "0", "--monitor-address", "0.0.0.0:0"}, &stdout, &stderr); got != 1 ||
		!strings.Contains(stderr.String(), "monitor_allow_remote") {
		t.Errorf("a non-loopback monitor address: exit %d, stderr %s", got, stderr.String())
	}
}
