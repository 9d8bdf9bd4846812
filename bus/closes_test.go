package bus

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// What a bus under attack writes and counts: every close a client causes
// and every failed TLS handshake is counted by reason; the log says a few
// lines per kind and window, and how many it left out.

// TestProtocolErrorStorm: thousands of clients that each send a frame the
// bus must refuse (unmasked: 1002), read the close frame and reset. Every
// close is counted; the log writes warnLimit lines per window, then one
// summary line that accounts for every close it left out.
func TestProtocolErrorStorm(t *testing.T) {
	n := 2000
	if raceEnabled || testing.Short() {
		n = 600
	}
	logs := &syncBuffer{}
	s, _ := testServer(t, Options{Logger: slog.New(NewLogHandler(logs, slog.LevelInfo))})
	start := time.Now()
	storm := leaveWay{"a protocol error, then a reset", func(nc *net.TCPConn, br *bufio.Reader) error {
		if err := greeted(br); err != nil {
			return err
		}
		if _, err := nc.Write([]byte{0x81, 0x02, 'h', 'i'}); err != nil { // unmasked: RFC 6455 §5.1
			return err
		}
		var h [4]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return err
		}
		if ws.Opcode(h[0]&15) != ws.OpClose || ws.StatusCode(int(h[2])<<8|int(h[3])) != ws.StatusProtocolError {
			return fmt.Errorf("want a 1002 close frame, got % x", h)
		}
		return nc.SetLinger(0)
	}}
	churn(t, s, storm, n)
	elapsed := time.Since(start)
	if got := metricValue(t, s, "ovbus_closes_total", reasonProtocolError); got != float64(n) {
		t.Fatalf("closes_total{reason=protocol_error} = %v, want %d", got, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Shutdown(ctx) // flushes the summaries of the windows not over yet

	written, suppressed := 0, 0
	summary := regexp.MustCompile(`suppressed (\d+) more closes reason=protocol_error`)
	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(line, "Closing client") && strings.Contains(line, "reason=protocol_error"):
			written++
		case summary.MatchString(line):
			k, _ := strconv.Atoi(summary.FindStringSubmatch(line)[1])
			suppressed += k
		}
	}
	windows := int(elapsed/warnWindow) + 1
	if written > warnLimit*windows {
		t.Fatalf("%d close lines for %d closes in %d windows of the rate limit, want at most %d",
			written, n, windows, warnLimit*windows)
	}
	if written+suppressed != n {
		t.Fatalf("%d close lines and %d summarised, want %d in all:\n%s", written, suppressed, n, logs.String())
	}
}

// TestTLSHandshakeFailuresCounted: each way a TLS handshake fails is
// counted by cause beside the other refused handshakes, and logged.
func TestTLSHandshakeFailuresCounted(t *testing.T) {
	cert, pool := selfSigned(t)
	logs := &syncBuffer{}
	// The silent client's case runs against a server of its own with a
	// short handshake timeout; the others get one no loaded machine hits,
	// so that a slow handshake is never counted as a timeout instead.
	newServer := func(timeout time.Duration) (*Server, string) {
		s, _ := testServer(t, Options{
			TLSConfig:        &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			HandshakeTimeout: timeout,
			Logger:           slog.New(NewLogHandler(logs, slog.LevelInfo)),
		})
		return s, s.Addr().String()
	}
	quick, quickAddr := newServer(300 * time.Millisecond)
	s, addr := newServer(30 * time.Second)
	dialTCP := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Each case ends when the server has given up on the connection.
	serverGone := func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, c)
	}
	cases := []struct {
		reason string
		s      *Server
		run    func()
	}{
		{rejectTLSTimeout, quick, func() { serverGone(dialTCP(quickAddr)) }}, // says nothing
		{rejectTLSAborted, s, func() { dialTCP(addr).Close() }},
		{rejectTLSNotTLS, s, func() {
			c := dialTCP(addr)
			fmt.Fprintf(c, "GET /core HTTP/1.1\r\nHost: x\r\n\r\n")
			serverGone(c)
		}},
		{rejectTLSError, s, func() { // a client that offers only TLS 1.0
			c := tls.Client(dialTCP(addr), &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS10})
			if c.Handshake() == nil {
				t.Error("a TLS 1.0 handshake succeeded")
			}
		}},
		{rejectTLSError, s, func() { // a client that does not trust the certificate
			c := tls.Client(dialTCP(addr), &tls.Config{ServerName: "localhost"})
			if c.Handshake() == nil {
				t.Error("a handshake with an untrusted certificate succeeded")
			}
		}},
	}
	want := map[string]float64{}
	for _, tc := range cases {
		tc.run()
		want[tc.reason]++
		waitFor(t, tc.reason+" counted", 10*time.Second, func() bool {
			return metricValue(t, tc.s, "ovbus_rejected_total", tc.reason) == want[tc.reason]
		})
	}
	for reason := range want {
		if !strings.Contains(logs.String(), "TLS handshake failed") || !strings.Contains(logs.String(), "reason="+reason) {
			t.Fatalf("no log line for %s:\n%s", reason, logs.String())
		}
	}
	// The handshake that works is not counted.
	c := dial(t, "wss://"+addr+"/core", &ws.DialOptions{TLSConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}})
	c.CloseNow()
	want[rejectTLSTimeout] = 0 // counted on quick
	for reason, n := range want {
		if got := metricValue(t, s, "ovbus_rejected_total", reason); got != n {
			t.Fatalf("rejected_total{reason=%s} = %v after a good handshake, want %v", reason, got, n)
		}
	}
}
