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
