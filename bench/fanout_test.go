package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestMessageSizeAndParse(t *testing.T) {
	for _, size := range []int{0, minMessageSize, 100, 256, 4096} {
		for _, seq := range []int64{0, 7, 123456} {
			b := appendMessage(nil, false, seq, 987654321, size)
			if size >= minMessageSize+12 && len(b) != size {
				t.Errorf("size %d seq %d: got %d bytes", size, seq, len(b))
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("not JSON: %v: %s", err, b)
			}
			if v["type"] != msgType {
				t.Errorf("type %v", v["type"])
			}
			kind, s, ts := parseMessage(b)
			if kind != kindRun || s != seq || ts != 987654321 {
				t.Errorf("parse %s: %v %d %d", b, kind, s, ts)
			}
		}
	}
	w := appendMessage(nil, true, 9, 5, 0)
	if kind, s, ts := parseMessage(w); kind != kindWarmup || s != 9 || ts != 5 {
		t.Errorf("warm-up: %v %d %d", kind, s, ts)
	}
	// A bus that re-encodes the JSON still parses.
	re := []byte(`{"type": "ovbus.bench", "data": {"seq": 12, "t": 34, "pad": "x"}, "context": {}}`)
	if kind, s, ts := parseMessage(re); kind != kindRun || s != 12 || ts != 34 {
		t.Errorf("re-encoded: %v %d %d", kind, s, ts)
	}
	for _, other := range []string{
		`{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`,
		`not json`, ``, `{"type":"ovbus.bench","data":{}}`,
	} {
		if kind, _, _ := parseMessage([]byte(other)); kind != kindForeign {
			t.Errorf("%q: kind %v", other, kind)
		}
	}
	if n := testing.AllocsPerRun(100, func() { parseMessage(w) }); n != 0 {
		t.Errorf("parseMessage allocates %v times", n)
	}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf = appendMessage(buf[:0], false, 99, 99, 256) }); n != 0 {
		t.Errorf("appendMessage allocates %v times", n)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkComplete asserts a run that lost nothing: every count adds up.
func checkComplete(t *testing.T, r *FanoutResult) {
	t.Helper()
	exp := int64(r.Clients * r.Messages)
	if r.Expected != exp || r.Delivered != exp || r.Dropped != 0 {
		t.Errorf("expected %d delivered %d dropped %d (want %d, %d, 0)", r.Expected, r.Delivered, r.Dropped, exp, exp)
	}
	if r.OutOfOrder != 0 || r.Duplicates != 0 || r.ConnErrors != 0 || r.Timeouts != 0 {
		t.Errorf("out of order %d, duplicates %d, errors %d %v, timeouts %d",
			r.OutOfOrder, r.Duplicates, r.ConnErrors, r.Errors, r.Timeouts)
	}
	if r.Latency.N != int(exp) {
		t.Errorf("latency samples %d, want %d", r.Latency.N, exp)
	}
	if r.Latency.Min <= 0 || r.Latency.Min > r.Latency.Median || r.Latency.Median > r.Latency.P95 ||
		r.Latency.P95 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
		t.Errorf("latency not ordered: %+v", r.Latency)
	}
	if r.Elapsed <= 0 || r.DeliveriesPerSec <= 0 {
		t.Errorf("elapsed %v, deliveries/s %v", r.Elapsed, r.DeliveriesPerSec)
	}
}

// TestFanoutAgainstBus runs a tiny benchmark against the real bus: the CI
// proof that the runner and the bus agree on every count. No speed
// threshold, ever.
func TestFanoutAgainstBus(t *testing.T) {
	url := startBus(t)
	var progress int64
	r, err := RunFanout(ctxT(t), FanoutConfig{
		URL: url, Clients: 3, Messages: 50, Size: 200,
		Measure: Measure{
			ServerPID: ResolvePID(url), // this test process
			Progress:  func(d, _ int64) { progress = d },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, r)
	if progress != 150 {
		t.Errorf("last progress %d, want 150", progress)
	}
	if !r.ServerCPUOK || r.ServerPID <= 0 {
		t.Errorf("server CPU not measured (pid %d)", r.ServerPID)
	}
	if want := r.ServerCPU.Seconds() / r.Wall.Seconds(); r.ServerCores != want {
		t.Errorf("server cores %v, want server CPU ÷ wall = %v", r.ServerCores, want)
	}
	if r.Size != 200 {
		t.Errorf("size %d", r.Size)
	}
}

func TestFanoutDrainSenderAndRate(t *testing.T) {
	url := startBus(t)
	start := time.Now()
	r, err := RunFanout(ctxT(t), FanoutConfig{URL: url, Clients: 2, Messages: 40, Rate: 400, DrainSender: true})
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, r)
	// 40 messages at 400/s are spread over ~100 ms: the sender paced itself.
	if r.SendTime < 80*time.Millisecond || time.Since(start) < 80*time.Millisecond {
		t.Errorf("send time %v at 400/s for 40 messages", r.SendTime)
	}
}

func TestFanoutNoGreeting(t *testing.T) {
	url := startRelay(t, false, nil)
	r, err := RunFanout(ctxT(t), FanoutConfig{URL: url, Clients: 3, Messages: 50, NoGreeting: true, Measure: Measure{ServerPID: -1}})
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, r)
	if r.ServerCPUOK {
		t.Error("server CPU measured without a pid")
	}
	// Without --no-greeting, a bus that sends none is reported clearly.
	_, err = RunFanout(ctxT(t), FanoutConfig{URL: url, Clients: 1, Messages: 1, Timeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no-greeting") {
		t.Errorf("got %v, want a hint at --no-greeting", err)
	}
}

func TestFanoutCountsDrops(t *testing.T) {
	url := startRelay(t, true, func(b []byte) [][]byte {
		if kind, seq, _ := parseMessage(b); kind == kindRun && seq%10 == 3 {
			return nil
		}
		return [][]byte{b}
	})
	r, err := RunFanout(ctxT(t), FanoutConfig{URL: url, Clients: 3, Messages: 50, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Dropped != 15 || r.Delivered != 135 || r.Timeouts != 3 || r.OutOfOrder != 0 {
		t.Errorf("dropped %d delivered %d timeouts %d ooo %d; want 15 135 3 0", r.Dropped, r.Delivered, r.Timeouts, r.OutOfOrder)
	}
	if r.Latency.N != 135 {
		t.Errorf("latency samples %d", r.Latency.N)
	}
}

func TestFanoutCountsOutOfOrder(t *testing.T) {
	var held []byte
	url := startRelay(t, true, func(b []byte) [][]byte {
		kind, seq, _ := parseMessage(b)
		if kind != kindRun {
			return [][]byte{b}
		}
		if seq%2 == 0 {
			held = b
			return nil
		}
		return [][]byte{b, held} // 1 0 3 2 …
	})
	r, err := RunFanout(ctxT(t), FanoutConfig{URL: url, Clients: 2, Messages: 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.Delivered != 40 || r.Dropped != 0 || r.OutOfOrder != 20 {
		t.Errorf("delivered %d dropped %d out of order %d; want 40 0 20", r.Delivered, r.Dropped, r.OutOfOrder)
	}
}

func TestFanoutConnectionErrors(t *testing.T) {
	_, err := RunFanout(ctxT(t), FanoutConfig{URL: "ws://127.0.0.1:1/core", Clients: 2, Messages: 1})
	if err == nil {
		t.Fatal("no error for a closed port")
	}
}

func TestFanoutCancel(t *testing.T) {
	url := startRelay(t, true, func(b []byte) [][]byte { return nil }) // swallows everything
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	start := time.Now()
	RunFanout(ctx, FanoutConfig{URL: url, Clients: 2, Messages: 10, Timeout: 10 * time.Second})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
}
