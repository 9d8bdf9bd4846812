package main

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// A wss:// bus whose certificate is not trusted: the error says how to trust it, and --ca and
// --insecure both connect.
func TestWSSUntrustedCertificateSaysHowToTrustIt(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.ReadMessage(r.Context())
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := "wss" + strings.TrimPrefix(srv.URL, "https") + "/core"

	var out, errb lockedBuffer
	if code := listenCmd(context.Background(), []string{"--url", url, "--reconnect=false"}, &out, &errb); code != exitConn {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if got := errb.String(); !strings.Contains(got, "--ca FILE") || !strings.Contains(got, "--insecure") {
		t.Errorf("stderr %q", got)
	}

	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, trust := range [][]string{{"--ca", ca}, {"--insecure"}} {
		l := startListen(t, append([]string{"--url", url, "--reconnect=false"}, trust...)...)
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(l.err.String(), "connected to "+url) {
			if time.Now().After(deadline) {
				t.Fatalf("%v: stderr %q", trust, l.err.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		l.stop(t)
	}
}

// A bus that accepts the TCP connection but never answers the upgrade: send says how long it
// waited, in the words of --timeout.
func TestSendConnectTimeoutSaysHowLong(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	t.Cleanup(func() {
		l.Close()
		for c := range accepted { // held open, unanswered, until the end
			c.Close()
		}
	})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	r := send(t, "", "x", "--url", "ws://"+l.Addr().String()+"/core", "--timeout", "500ms")
	if r.code != exitConn || !strings.Contains(r.stderr, "timed out after 500ms") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
