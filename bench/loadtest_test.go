package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func checkLoad(t *testing.T, r *LoadResult, want int64) {
	t.Helper()
	if r.Sent != want || r.Received != want || r.Mismatched != 0 || r.ConnErrors != 0 || r.Timeouts != 0 {
		t.Errorf("sent %d received %d mismatched %d errors %d %v timeouts %d; want %d each, no errors",
			r.Sent, r.Received, r.Mismatched, r.ConnErrors, r.Errors, r.Timeouts, want)
	}
	if r.RTT.N != int(want) || r.RTT.Min <= 0 || r.RTT.Median > r.RTT.Max {
		t.Errorf("RTT %+v", r.RTT)
	}
	if r.MsgPerSec <= 0 || r.MBPerSec <= 0 {
		t.Errorf("msg/s %v MB/s %v", r.MsgPerSec, r.MBPerSec)
	}
}

func TestLoadPingPong(t *testing.T) {
	url := startEcho(t)
	r, err := RunLoad(ctxT(t), LoadConfig{URL: url, Conns: 3, Payload: 100, Count: 50, Measure: Measure{ServerPID: ResolvePID(url)}})
	if err != nil {
		t.Fatal(err)
	}
	checkLoad(t, r, 150)
	if !r.ServerCPUOK {
		t.Error("server CPU not measured")
	}
}

func TestLoadWindowTextAndTinyPayload(t *testing.T) {
	url := startEcho(t)
	for _, cfg := range []LoadConfig{
		{Conns: 2, Payload: 64, Count: 200, Window: 16},
		{Conns: 2, Payload: 64, Count: 200, Window: 8, Text: true},
		{Conns: 1, Payload: 3, Count: 20, Window: 4}, // too small for a sequence number
		// Past lockstepMaxInFlight: the reader and the writer are two goroutines.
		{Conns: 2, Payload: 64 << 10, Count: 20, Window: 4},
	} {
		cfg.URL = url
		r, err := RunLoad(ctxT(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkLoad(t, r, int64(cfg.Conns*cfg.Count))
	}
}

func TestLoadDuration(t *testing.T) {
	url := startEcho(t)
	for _, w := range []int{1, 8} {
		start := time.Now()
		r, err := RunLoad(ctxT(t), LoadConfig{URL: url, Conns: 2, Payload: 32, Duration: 200 * time.Millisecond, Window: w})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 20*time.Second {
			t.Errorf("window %d: took %v for a 200ms run", w, d)
		}
		if r.Sent == 0 || r.Sent != r.Received || r.ConnErrors != 0 || r.Timeouts != 0 {
			t.Errorf("window %d: sent %d received %d errors %d timeouts %d", w, r.Sent, r.Received, r.ConnErrors, r.Timeouts)
		}
	}
}

// A server that answers with something else is caught.
func TestLoadDetectsWrongEchoes(t *testing.T) {
	url := startRelay(t, false, nil) // relays back to the sender: an echo (of text)
	r, err := RunLoad(ctxT(t), LoadConfig{URL: url, Conns: 1, Payload: 32, Count: 10, Text: true})
	if err != nil {
		t.Fatal(err)
	}
	checkLoad(t, r, 10)
	bad := startRelay(t, false, func(b []byte) [][]byte {
		c := append([]byte(nil), b...)
		c[15] ^= 1 // the last hex digit of the sequence number
		return [][]byte{c}
	})
	r, err = RunLoad(ctxT(t), LoadConfig{URL: bad, Conns: 1, Payload: 32, Count: 10, Text: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Received != 10 || r.Mismatched != 10 {
		t.Errorf("received %d mismatched %d, want 10 10", r.Received, r.Mismatched)
	}
}

func TestLoadSuiteJSON(t *testing.T) {
	a, b := startEcho(t), startEcho(t)
	rep, err := LoadSuite{
		Base:      LoadConfig{Count: 20},
		Scenarios: []LoadScenario{{2, 64, 1}, {2, 1024, 4}},
		Targets:   []Target{{Name: "a", URL: a}, {Name: "b", URL: b}},
		Repeat:    2,
		Pause:     time.Millisecond,
	}.Run(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Kind != KindLoad || len(back.Series) != 4 {
		t.Fatalf("kind %q, %d series", back.Kind, len(back.Series))
	}
	for _, s := range back.Series {
		if len(s.Runs) != 2 || s.Summary["received"].Sum != 80 {
			t.Errorf("%s %s: %d runs, received %v", s.Bus, s.Scenario, len(s.Runs), s.Summary["received"])
		}
	}
	buf.Reset()
	rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "msg/s") || !strings.Contains(buf.String(), "2×1KiB w4") {
		t.Errorf("text report:\n%s", buf.String())
	}
}
