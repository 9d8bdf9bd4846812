package main

import (
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bench/peers"
)

// busURL serves the gorilla fan-out peer in this process.
func busURL(t *testing.T) string {
	t.Helper()
	h, err := peers.Handler("gorilla", peers.ModeFanout, peers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(peers.Mux("/core", h))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/core"
}

func TestFanoutDeliversEverything(t *testing.T) {
	tg := target{name: "gorilla", url: busURL(t), pid: os.Getpid()}
	cfg := fanoutConfig{clients: 5, messages: 300, size: 256, warmup: 3, timeout: 5 * time.Second, readBuf: 4096}
	res, err := runFanout(tg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.delivered != 5*300 || res.expected != 5*300 {
		t.Fatalf("delivered %d of %d, want all 1500", res.delivered, res.expected)
	}
	f := res.figures()
	if f.rate <= 0 || f.serverUs < 0 || f.clientUs <= 0 {
		t.Errorf("figures %+v: want a rate and both CPU figures", f)
	}
	if m := median([]figures{{rate: 3}, {rate: 1}, {rate: 2}}); m.rate != 2 {
		t.Errorf("median rate %v, want 2", m.rate)
	}
}

func TestFanoutRunsGoOnAfterAFailure(t *testing.T) {
	dead := httptest.NewServer(nil)
	deadURL := "ws" + strings.TrimPrefix(dead.URL, "http") + "/core"
	dead.Close() // nothing listens there any more: every run of it fails
	targets := []target{{name: "gorilla", url: busURL(t), pid: os.Getpid()}, {name: "dead", url: deadURL, pid: -1}}
	cfg := fanoutConfig{clients: 3, messages: 50, size: 256, warmup: 2, timeout: 5 * time.Second, readBuf: 4096}
	var out, errs strings.Builder
	if err := fanoutRuns(&out, &errs, targets, cfg, 2, 0); err != nil {
		t.Fatalf("fanoutRuns: %v (a failing target must not end the comparison)", err)
	}
	report := out.String()
	if n := strings.Count(report, "dead        failed: "); n != 2 {
		t.Errorf("%d failed rows for the dead target, want 2:\n%s", n, report)
	}
	if !strings.Contains(report, "median  dead        no run completed (2 failed)") {
		t.Errorf("no median row saying the dead target never completed:\n%s", report)
	}
	if !strings.Contains(report, "median  gorilla") || strings.Contains(report, "gorilla     failed") {
		t.Errorf("gorilla's runs should all complete, with a median:\n%s", report)
	}
	if !strings.Contains(errs.String(), "client: dead: ") {
		t.Errorf("the failures are not on the error stream: %q", errs.String())
	}

	// Nothing completed at all: an error.
	out.Reset()
	if err := fanoutRuns(&out, &errs, targets[1:], cfg, 1, 0); err == nil {
		t.Error("fanoutRuns with no completed run returned no error")
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		warm      bool
		seq, size int
	}{{false, 0, 10}, {false, 1234, 256}, {true, 7, 300}} {
		b := message(nil, tt.warm, tt.seq, tt.size)
		if len(b) < tt.size {
			t.Errorf("message of size %d is %d bytes", tt.size, len(b))
		}
		timed, seq, ok := parse(b)
		if !ok || timed == tt.warm || seq != tt.seq {
			t.Errorf("parse(%s) = %v %d %v", b, timed, seq, ok)
		}
	}
	if _, _, ok := parse([]byte(peers.Greeting)); ok {
		t.Error("the greeting parsed as a benchmark message")
	}
}

func TestIdleConnectionsStayOpen(t *testing.T) {
	url := busURL(t)
	conns, err := openIdle(url, 50, true, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if n := countOpen(conns); n != 50 {
		t.Errorf("%d of 50 idle connections open", n)
	}
	conns[0].Close()
	conns = conns[1:]
	if n := countOpen(conns); n != 49 {
		t.Errorf("%d of 49 idle connections open", n)
	}
	if r, err := rss(os.Getpid()); err != nil || r <= 0 {
		t.Errorf("rss of this process: %d, %v", r, err)
	}
}
