package main

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// TestSteadyFramesMatchOvbusBench checks frameOf against the table ovbus
// bench's SizeMix.Frame is checked against (bench/steady_test.go): both
// clients send the same frames.
func TestSteadyFramesMatchOvbusBench(t *testing.T) {
	cfg := steadyConfig{steadyScenario: steadyScenario{share: 0.01}, jsonMin: 200, jsonMax: 2000, binMin: 64 << 10, binMax: 1 << 20, seed: 1}
	for _, g := range []struct {
		client, frame, size int
		binary              bool
	}{
		{0, 0, 250, false}, {0, 1, 849, false}, {3, 17, 838, false}, {19, 2999, 1332, false},
		{7, 123456, 1341, false}, {0, 155, 291145, true}, {5, 140, 267568, true},
	} {
		if size, bin := cfg.frameOf(g.client, g.frame); size != g.size || bin != g.binary {
			t.Errorf("client %d frame %d: %d bytes, binary %v; want %d, %v", g.client, g.frame, size, bin, g.size, g.binary)
		}
	}
}

func TestSteadyFrameParse(t *testing.T) {
	b := textFrame(nil, false, 12, 3456, 789012345, 300)
	if len(b) != 300 {
		t.Errorf("text frame of %d bytes, want 300", len(b))
	}
	if kind, from, seq, ts := parseFrame(ws.OpText, b); kind != 1 || from != 12 || seq != 3456 || ts != 789012345 {
		t.Errorf("parse: %d %d %d %d", kind, from, seq, ts)
	}
	if kind, from, _, _ := parseFrame(ws.OpText, textFrame(nil, true, 4, 0, 0, 200)); kind != 2 || from != 4 {
		t.Errorf("warm-up: %d from %d", kind, from)
	}
	for _, other := range []string{`{"type":"connected","data":{},"context":{}}`, `{"type":"x.steady","data":{"from":1}}`, ""} {
		if kind, _, _, _ := parseFrame(ws.OpText, []byte(other)); kind != 0 {
			t.Errorf("%q parsed as kind %d", other, kind)
		}
	}
}

// TestSteadyDeliversEverything runs the steady mode against the gorilla peer
// in this process, binary frames included: every frame reaches every client,
// in order, once.
func TestSteadyDeliversEverything(t *testing.T) {
	tg := target{name: "gorilla", url: busURL(t), pid: os.Getpid()}
	cfg := steadyConfig{steadyScenario: steadyScenario{clients: 4, rate: 400, share: 0.1}, duration: 500 * time.Millisecond,
		jsonMin: 200, jsonMax: 2000, binMin: 64 << 10, binMax: 128 << 10, seed: 1, timeout: 5 * time.Second, readBuf: 64 << 10}
	f, err := runSteady(tg, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f["sent"] != 200 || f["delivered"] != 800 || f["lost"] != 0 || f["reordered"] != 0 || f["duplicates"] != 0 {
		t.Errorf("figures %v: want 200 sent, 800 delivered, nothing lost or out of order", f)
	}
	if f["p50_ms"] <= 0 || f["p50_ms"] > f["p99_ms"] || f["p99_ms"] > f["max_ms"] || f["server_us_per_frame"] <= 0 || f["deliveries_per_sec"] <= 0 {
		t.Errorf("figures %v", f)
	}
	// From send leaves the senders' lateness out: above 0, never above the latency.
	if f["from_send_p99_ms"] <= 0 || f["from_send_p99_ms"] > f["p99_ms"] || f["from_send_p999_ms"] > f["max_ms"] {
		t.Errorf("from send p99 %v p99.9 %v against p99 %v max %v", f["from_send_p99_ms"], f["from_send_p999_ms"], f["p99_ms"], f["max_ms"])
	}
	var out, errs strings.Builder
	rep := steadyRuns(&out, &errs, []target{tg}, []steadyScenario{{2, 100, 0}}, cfg, 2, 0)
	if rep.completed != 2 || len(rep.Medians) != 1 || !strings.Contains(out.String(), "| 2c 100/s json | gorilla | median of 2 |") {
		t.Errorf("completed %d, medians %d:\n%s\n%s", rep.completed, len(rep.Medians), out.String(), errs.String())
	}
	// The pool holds both runs' deliveries.
	if len(rep.Pooled) != 1 || rep.Pooled[0].Figures["delivered"] != rep.Runs[0].Figures["delivered"]+rep.Runs[1].Figures["delivered"] ||
		!strings.Contains(out.String(), "| 2c 100/s json | gorilla | 2 | 200 |") {
		t.Errorf("pooled %+v:\n%s", rep.Pooled, out.String())
	}
}

// TestPooledPercentiles checks the pool's buckets against exact nearest-rank
// percentiles: never below, at most 0.1 % above, the largest value exact.
func TestPooledPercentiles(t *testing.T) {
	var h histogram
	var all []int64
	x := uint64(1)
	for run := range 3 {
		var vs []int64
		for i := range 20000 {
			x = x*6364136223846793005 + 1442695040888963407
			v := int64(x>>40) % 5_000_000 // up to 5 ms
			if i%1000 == 0 {
				v = int64(run+1) * 40_000_000 // a stall in every run
			}
			vs = append(vs, v)
		}
		h.add(vs)
		all = append(all, vs...)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.99, 0.999, 0.9999, 1} {
		exact := float64(all[int(math.Ceil(q*float64(len(all))))-1]) / 1e6
		if got := h.rank(q); got < exact || got > exact*1.001 {
			t.Errorf("p%v: %v ms, exact %v ms", q*100, got, exact)
		}
	}
	// Buckets are ordered as their values, and a value's bucket ends at
	// most 0.1 % above it.
	for v := int64(1); v < 1<<40; v += v/3 + 1 {
		k := poolKey(v)
		if top := poolTop(k); top < v || top-v > v>>poolBits || poolKey(v-1) > k {
			t.Fatalf("%d in bucket %d, which ends at %d; %d in bucket %d", v, k, top, v-1, poolKey(v-1))
		}
	}
}
