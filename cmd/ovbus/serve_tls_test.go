package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveOnce runs serve with args until it has started, then stops it with SIGTERM; it returns
// the log.
func serveOnce(t *testing.T, args ...string) string {
	t.Helper()
	sigs := make(chan os.Signal, 1)
	serveSignals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	t.Cleanup(func() { serveSignals = defaultServeSignals })
	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() { code <- runServe(args, &stdout, &stderr) }()
	waitFor(t, &stdout, `Message bus service started!`)
	sigs <- syscall.SIGTERM
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d: %s", c, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	return stdout.String()
}

// serve says when it creates the self-signed certificate and where, and which one it serves.
func TestServeLogsTheCertificate(t *testing.T) {
	dir := isolateConfig(t)
	writeUserConfig(t, dir, `{"websocket": {"port": 0, "ssl": true}}`)
	cert := filepath.Join(dir, "data", "OpenVoiceOS", "ovos-messagebus", "certs", "ovos-messagebus.crt")
	out := serveOnce(t)
	if !strings.Contains(out, "Created a self-signed TLS certificate") || !strings.Contains(out, cert) {
		t.Errorf("first start:\n%s", out)
	}
	if _, err := os.Stat(cert); err != nil {
		t.Error(err)
	}
	out = serveOnce(t)
	if strings.Contains(out, "Created") || !strings.Contains(out, "Serving the self-signed TLS certificate") || !strings.Contains(out, cert) {
		t.Errorf("second start:\n%s", out)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "Message bus stopped") {
		t.Errorf("the last line is not the stopped line:\n%s", out)
	}
}
