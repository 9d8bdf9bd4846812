package bench

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
	"github.com/ovbus/ovbus/ws"
)

func TestSteadyPlan(t *testing.T) {
	tests := []struct {
		plan  SteadyPlan
		total int
	}{
		{SteadyPlan{Clients: 20, Rate: 2000, Duration: 30 * time.Second}, 60000},
		{SteadyPlan{Clients: 10, Rate: 500, Duration: time.Second}, 500},
		{SteadyPlan{Clients: 3, Rate: 7, Duration: time.Second}, 7},                // 7 frames over 3 senders: 3, 2, 2
		{SteadyPlan{Clients: 4, Rate: 2.5, Duration: 1100 * time.Millisecond}, 3},  // due at 0, 0.4 s, 0.8 s
		{SteadyPlan{Clients: 5, Rate: 2, Duration: time.Second}, 2},                // more clients than frames
		{SteadyPlan{Clients: 2, Rate: 1000, Duration: 1500 * time.Microsecond}, 2}, // 0 and 1 ms
		{SteadyPlan{Clients: 0, Rate: 10, Duration: time.Second}, 0},
		{SteadyPlan{Clients: 1, Rate: 10, Duration: 0}, 0},
	}
	for _, tt := range tests {
		p := tt.plan
		if got := p.Total(); got != tt.total {
			t.Errorf("%+v: total %d, want %d", p, got, tt.total)
			continue
		}
		// Every frame of the run comes from exactly one sender: the
		// senders' frames together are due at g/Rate, g = 0 … total−1,
		// every one inside the duration.
		var dues []time.Duration
		for i := range p.Clients {
			n := p.Frames(i)
			for k := range n {
				d := p.Due(i, k)
				if k > 0 {
					// Each sender on its own schedule, Clients/Rate apart.
					gap := d - p.Due(i, k-1)
					want := time.Duration(float64(p.Clients) / p.Rate * 1e9)
					if (gap - want).Abs() > time.Microsecond {
						t.Fatalf("%+v: sender %d frame %d: %v after the last, want %v", p, i, k, gap, want)
					}
				}
				dues = append(dues, d)
			}
			if p.Due(i, n) < p.Duration {
				t.Errorf("%+v: sender %d: a frame after its last (%d) is still due within the run", p, i, n)
			}
		}
		if len(dues) != tt.total {
			t.Fatalf("%+v: %d frames over the senders, want %d", p, len(dues), tt.total)
		}
		slices.Sort(dues)
		for g, d := range dues {
			want := time.Duration(float64(g) / p.Rate * 1e9)
			if (d-want).Abs() > time.Microsecond || d >= p.Duration {
				t.Fatalf("%+v: frame %d of the run due at %v, want %v within %v", p, g, d, want, p.Duration)
			}
		}
		if p.Frames(-1) != 0 || p.Frames(p.Clients) != 0 {
			t.Errorf("%+v: frames of a client outside the run", p)
		}
	}
}

func TestSizeMix(t *testing.T) {
	m := DefaultSizeMix
	m.BinaryShare = 0.01
	const clients, frames = 20, 5000
	var nBin, nText int
	var sumText, sumBin float64
	for i := range clients {
		for k := range frames {
			size, bin := m.Frame(DefaultSteadySeed, i, k)
			if s2, b2 := m.Frame(DefaultSteadySeed, i, k); s2 != size || b2 != bin {
				t.Fatal("Frame is not a function of (seed, client, frame)")
			}
			if bin {
				nBin++
				sumBin += float64(size)
				if size < m.BinaryMin || size > m.BinaryMax {
					t.Fatalf("binary frame of %d bytes outside %d-%d", size, m.BinaryMin, m.BinaryMax)
				}
			} else {
				nText++
				sumText += float64(size)
				if size < m.JSONMin || size > m.JSONMax {
					t.Fatalf("JSON frame of %d bytes outside %d-%d", size, m.JSONMin, m.JSONMax)
				}
			}
		}
	}
	n := float64(clients * frames)
	// The share within 5 standard deviations of the binomial's mean.
	if sd := math.Sqrt(n * m.BinaryShare * (1 - m.BinaryShare)); math.Abs(float64(nBin)-n*m.BinaryShare) > 5*sd {
		t.Errorf("%d binary frames of %.0f, want about %.0f", nBin, n, n*m.BinaryShare)
	}
	// Uniform sizes: the means near the middle of their ranges.
	if mean, mid := sumText/float64(nText), float64(m.JSONMin+m.JSONMax)/2; math.Abs(mean-mid) > 0.01*mid {
		t.Errorf("mean JSON size %.0f, want about %.0f", mean, mid)
	}
	if mean, mid := sumBin/float64(nBin), float64(m.BinaryMin+m.BinaryMax)/2; math.Abs(mean-mid) > 0.05*mid {
		t.Errorf("mean binary size %.0f, want about %.0f", mean, mid)
	}
	// Another seed, other frames; no share, no binary; a share of 1, all.
	same := 0
	for k := range 1000 {
		a, _ := m.Frame(1, 0, k)
		b, _ := m.Frame(2, 0, k)
		if a == b {
			same++
		}
	}
	if same > 10 {
		t.Errorf("seeds 1 and 2 give %d equal sizes of 1000", same)
	}
	for k := range 1000 {
		if _, bin := DefaultSizeMix.Frame(1, 3, k); bin {
			t.Fatal("a binary frame with share 0")
		}
		all := DefaultSizeMix
		all.BinaryShare = 1
		if _, bin := all.Frame(1, 3, k); !bin {
			t.Fatal("a text frame with share 1")
		}
	}
	for _, bad := range []SizeMix{
		{JSONMin: 10, JSONMax: 2000},
		{JSONMin: 500, JSONMax: 400},
		{JSONMin: 200, JSONMax: 2000, BinaryShare: 1.5},
		{JSONMin: 200, JSONMax: 2000, BinaryShare: 0.1, BinaryMin: 10, BinaryMax: 100},
	} {
		if bad.Check() == nil {
			t.Errorf("%+v passes Check", bad)
		}
	}
	if err := m.Check(); err != nil {
		t.Errorf("the default mix: %v", err)
	}
}

// steadyGolden is what SizeMix.Frame gives for the steady presets' mix (1 %
// binary, seed 1). The independent client (bench/peers/cmd/client) checks
// the same table, so that both send the same frames.
var steadyGolden = []struct {
	client, frame, size int
	binary              bool
}{
	{0, 0, 250, false}, {0, 1, 849, false}, {3, 17, 838, false}, {19, 2999, 1332, false},
	{7, 123456, 1341, false}, {0, 155, 291145, true}, {5, 140, 267568, true},
}

func TestSizeMixGolden(t *testing.T) {
	m := DefaultSizeMix
	m.BinaryShare = 0.01
	for _, g := range steadyGolden {
		if size, bin := m.Frame(DefaultSteadySeed, g.client, g.frame); size != g.size || bin != g.binary {
			t.Errorf("client %d frame %d: %d bytes, binary %v; want %d, %v", g.client, g.frame, size, bin, g.size, g.binary)
		}
	}
}

func TestSteadyFrames(t *testing.T) {
	for _, size := range []int{0, minSteadyJSON, 200, 1000, 2000} {
		b := appendSteadyJSON(nil, false, 19, 123456, 987654321012, size)
		if size >= minSteadyJSON && len(b) != size {
			t.Errorf("size %d: %d bytes", size, len(b))
		}
		var v struct {
			Type string
			Data struct {
				From, Seq int
				T         int64
				Utterance string
			}
			Context map[string]any
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("not JSON: %v: %s", err, b)
		}
		if v.Type != steadyType || v.Data.From != 19 || v.Data.Seq != 123456 || v.Data.T != 987654321012 || v.Context["source"] != "bench" {
			t.Errorf("decoded %+v", v)
		}
		kind, from, seq, ts := parseSteady(false, b)
		if kind != kindRun || from != 19 || seq != 123456 || ts != 987654321012 {
			t.Errorf("parse %s: %v %d %d %d", b, kind, from, seq, ts)
		}
	}
	w := appendSteadyJSON(nil, true, 4, 0, 55, 300)
	if kind, from, _, _ := parseSteady(false, w); kind != kindWarmup || from != 4 {
		t.Errorf("warm-up: %v from %d", kind, from)
	}
	bin := make([]byte, 64<<10)
	putSteadyBinary(bin, 7, 1<<31-1, 1<<50)
	if kind, from, seq, ts := parseSteady(true, bin); kind != kindRun || from != 7 || seq != 1<<31-1 || ts != 1<<50 {
		t.Errorf("binary: %v %d %d %d", kind, from, seq, ts)
	}
	for _, f := range []struct {
		binary bool
		b      string
	}{
		{false, `{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`},
		{false, `{"type":"ovbus.bench.steady","data":{"from":1,"t":5}}`},
		{false, `{"type":"ovbus.bench.steady","data":{"from":x}}`},
		{false, ""},
		{true, "\x00OVB short"},
		{true, strings.Repeat("\x01", 64)},
		{false, string(bin)}, // a binary frame's bytes delivered as text
	} {
		if kind, _, _, _ := parseSteady(f.binary, []byte(f.b)); kind != kindForeign {
			t.Errorf("%q: kind %v", f.b, kind)
		}
	}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = appendSteadyJSON(buf[:0], false, 3, 99, 99, 1500) }); n != 0 {
		t.Errorf("appendSteadyJSON allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { parseSteady(false, buf) }); n != 0 {
		t.Errorf("parseSteady allocates %v times", n)
	}
}

func TestParseSteadyScenarios(t *testing.T) {
	got, err := ParseSteadyScenarios("steady, 5@100, 30@4000:0.05")
	if err != nil {
		t.Fatal(err)
	}
	want := []SteadyScenario{{20, 2000, 0.01}, {20, 2000, 0}, {10, 500, 0.01}, {5, 100, 0}, {30, 4000, 0.05}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if s := want[0].String(); s != "20c 2000/s 1%bin" {
		t.Errorf("name %q", s)
	}
	if s := want[1].String(); s != "20c 2000/s json" {
		t.Errorf("name %q", s)
	}
	for _, bad := range []string{"", "steady30", "20x2000", "0@100", "5@0", "5@-1", "5@100:2", "5@100:x", "a@1"} {
		if _, err := ParseSteadyScenarios(bad); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
	for s, want := range map[string]bool{"steady": true, "steady10,steady20": true, "20@2000": true, "seeds": false, "5x200": false} {
		if IsSteadyPreset(s) != want {
			t.Errorf("IsSteadyPreset(%q) = %v", s, !want)
		}
	}
	if lo, hi, err := ParseSizeRange("64k-1m"); err != nil || lo != 64<<10 || hi != 1<<20 {
		t.Errorf("64k-1m: %d %d %v", lo, hi, err)
	}
	if lo, hi, err := ParseSizeRange("500"); err != nil || lo != 500 || hi != 500 {
		t.Errorf("500: %d %d %v", lo, hi, err)
	}
	for _, bad := range []string{"2000-200", "x-1", "-5", ""} {
		if _, _, err := ParseSizeRange(bad); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
}

// TestSteadySenderStampsTheSchedule is the sender's half of "no coordinated
// omission": when a write holds the sender up, the frames due meanwhile go
// out as soon as it can send them, none skipped, each stamped with its own
// due time (not the time it left), and the lag is recorded.
func TestSteadySenderStampsTheSchedule(t *testing.T) {
	cfg := SteadyConfig{Clients: 1, Rate: 200, Duration: 100 * time.Millisecond}.withDefaults()
	r := newSteadyRun(cfg)
	r.t0 = r.now()
	cl := &steadyClient{id: 0, lag: stats.NewHistogram()}
	const stall = 60 * time.Millisecond
	type sent struct {
		seq   int
		stamp int64
		at    int64
	}
	var out []sent
	err := r.send(context.Background(), cl, func(op ws.Opcode, b []byte) error {
		kind, from, seq, ts := parseSteady(op == ws.BinaryMessage, b)
		if kind != kindRun || from != 0 {
			t.Fatalf("frame %q", b)
		}
		out = append(out, sent{seq, ts, r.now()})
		if seq == 1 {
			time.Sleep(stall) // the connection is busy
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 20 || cl.sent != 20 || cl.lag.Count() != 20 {
		t.Fatalf("sent %d frames (counted %d, lags %d), want the plan's 20", len(out), cl.sent, cl.lag.Count())
	}
	late := 0
	for k, s := range out {
		due := r.t0 + int64(r.plan.Due(0, k))
		if s.seq != k || s.stamp != due {
			t.Errorf("frame %d: seq %d stamped %d, want its due time %d", k, s.seq, s.stamp, due)
		}
		if s.at < due {
			t.Errorf("frame %d left %v before it was due", k, time.Duration(due-s.at))
		}
		if s.at-due > int64(stall/2) {
			late++
		}
		// FromSend runs from when the write began: after the due time,
		// by the lag, and no later than the frame reached the write.
		if sent := r.sentAt[0][k].Load(); sent < due || sent > s.at {
			t.Errorf("frame %d: began to be written at %d, want between its due time %d and its write %d", k, sent, due, s.at)
		}
	}
	// Frames 2 … 7 were due (10 … 35 ms) while frame 1's write held the
	// sender until 65 ms at the earliest: they left late, back to back.
	if late < 4 {
		t.Errorf("%d frames left more than %v late, want the ones due during the stall", late, stall/2)
	}
	if cl.lag.Max() < stall/2 {
		t.Errorf("max send lag %v, want about %v", cl.lag.Max(), stall)
	}
}

// checkSteady asserts a run that lost nothing: every count adds up.
func checkSteady(t *testing.T, r *SteadyResult) {
	t.Helper()
	if r.Sent != r.Planned || r.Expected != r.Planned*int64(r.Clients) || r.Delivered != r.Expected || r.Lost != 0 {
		t.Errorf("planned %d sent %d expected %d delivered %d lost %d", r.Planned, r.Sent, r.Expected, r.Delivered, r.Lost)
	}
	if r.OutOfOrder != 0 || r.Duplicates != 0 || r.Unexpected != 0 || r.ConnErrors != 0 || r.NotWarm != 0 {
		t.Errorf("out of order %d duplicates %d unexpected %d errors %d %v not warm %d",
			r.OutOfOrder, r.Duplicates, r.Unexpected, r.ConnErrors, r.Errors, r.NotWarm)
	}
	if r.Latency.Count() != r.Delivered || r.FromSend.Count() != r.Delivered || r.SendLag.Count() != r.Sent {
		t.Errorf("latency samples %d, from send %d (delivered %d), send lags %d (sent %d)",
			r.Latency.Count(), r.FromSend.Count(), r.Delivered, r.SendLag.Count(), r.Sent)
	}
	// From send leaves the sender's lateness out: never above the latency.
	if r.FromSend.Max() > r.Latency.Max() || r.FromSend.Percentile(0.99) > r.Latency.Percentile(0.99) {
		t.Errorf("from send: p99 %v max %v, above the latency's p99 %v max %v",
			r.FromSend.Percentile(0.99), r.FromSend.Max(), r.Latency.Percentile(0.99), r.Latency.Max())
	}
	if r.Latency.Min() <= 0 || r.Latency.Percentile(0.5) > r.Latency.Percentile(0.99) || r.Latency.Percentile(0.99) > r.Latency.Max() {
		t.Errorf("latency: min %v p50 %v p99 %v max %v", r.Latency.Min(), r.Latency.Percentile(0.5), r.Latency.Percentile(0.99), r.Latency.Max())
	}
}

// TestSteadyAgainstBus runs a small steady run against the real bus, binary
// frames included: the CI proof that the runner and the bus agree on every
// count. No speed threshold.
func TestSteadyAgainstBus(t *testing.T) {
	url := startBus(t)
	var progress int64
	r, err := RunSteady(ctxT(t), SteadyConfig{
		URL: url, Clients: 4, Rate: 400, Duration: 500 * time.Millisecond,
		Mix: SizeMix{BinaryShare: 0.1, BinaryMin: 64 << 10, BinaryMax: 200 << 10},
		Measure: Measure{
			ServerPID: ResolvePID(url), // this test process
			Progress:  func(d, _ int64) { progress = d },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSteady(t, r)
	if r.Planned != 200 || r.SentBinary == 0 || r.SentBinary == r.Sent {
		t.Errorf("planned %d, binary %d of %d", r.Planned, r.SentBinary, r.Sent)
	}
	if progress != r.Delivered {
		t.Errorf("last progress %d, want %d", progress, r.Delivered)
	}
	if !r.ServerCPUOK || r.ServerCPUPerFrame() <= 0 || r.ServerCPUPerDelivery() > r.ServerCPUPerFrame() {
		t.Errorf("server CPU %v ok %v, per frame %v, per delivery %v", r.ServerCPU, r.ServerCPUOK, r.ServerCPUPerFrame(), r.ServerCPUPerDelivery())
	}
	// The schedule took its duration: the last frame was due at 497.5 ms.
	if r.Wall < 490*time.Millisecond || r.Elapsed < 490*time.Millisecond {
		t.Errorf("wall %v elapsed %v for a 500 ms schedule", r.Wall, r.Elapsed)
	}
	m := SteadyMetrics(r)
	for _, k := range []string{"latency_p999_ms", "server_cpu_us_per_frame", "send_lag_p99_ms", "from_send_p999_ms", "lost", "out_of_order"} {
		if _, ok := m[k]; !ok {
			t.Errorf("metric %s missing", k)
		}
	}
}

// TestSteadyChargesAStall is the bus's half of "no coordinated omission": a
// bus that stalls for 200 ms is charged for every frame due during the stall,
// each from its own due time, not once. A closed-loop client (send, wait for
// the echo, send the next) would have measured one slow frame and a p90 of
// well under a millisecond; here a fifth of the frames waited, so the p90 is
// tens of milliseconds.
func TestSteadyChargesAStall(t *testing.T) {
	const stall = 200 * time.Millisecond
	var stalled atomic.Bool
	url := startRelay(t, true, func(b []byte) [][]byte {
		if kind, from, seq, _ := parseSteady(false, b); kind == kindRun && from == 0 && seq == 20 && !stalled.Load() {
			stalled.Store(true)
			time.Sleep(stall) // under the relay's lock: nothing moves
		}
		return [][]byte{b}
	})
	r, err := RunSteady(ctxT(t), SteadyConfig{URL: url, Clients: 2, Rate: 400, Duration: time.Second, Measure: Measure{ServerPID: -1}})
	if err != nil {
		t.Fatal(err)
	}
	checkSteady(t, r)
	if !stalled.Load() {
		t.Fatal("the relay never stalled")
	}
	if p90, max := r.Latency.Percentile(0.9), r.Latency.Max(); p90 < 20*time.Millisecond || max < stall*3/4 {
		t.Errorf("p90 %v, max %v: the frames due during a %v stall were not charged for it", p90, max, stall)
	}
}

// TestSteadyCountsLossAndOrder has a relay drop every tenth frame of client
// 1 and swap pairs of client 0's frames: lost and reordered frames are
// counted on every receiver, per sender.
func TestSteadyCountsLossAndOrder(t *testing.T) {
	var held []byte
	url := startRelay(t, true, func(b []byte) [][]byte {
		kind, from, seq, _ := parseSteady(false, b)
		switch {
		case kind != kindRun:
		case from == 1 && seq%10 == 3:
			return nil
		case from == 0 && seq%2 == 0 && seq < 20:
			held = b
			return nil
		case from == 0 && seq%2 == 1 && seq < 20:
			return [][]byte{b, held} // 1 0 3 2 …
		case from == 2 && seq == 5:
			return [][]byte{b, b}
		}
		return [][]byte{b}
	})
	r, err := RunSteady(ctxT(t), SteadyConfig{URL: url, Clients: 3, Rate: 300, Duration: 300 * time.Millisecond, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// 90 frames, 30 a client; client 1 loses 3 (seq 3, 13, 23) on each of
	// the 3 receivers; client 0's 10 swaps reach each receiver; client 2's
	// frame 5 comes twice everywhere.
	if r.Sent != 90 || r.Lost != 9 || r.Delivered != 270-9 || r.OutOfOrder != 30 || r.Duplicates != 3 {
		t.Errorf("sent %d lost %d delivered %d out of order %d duplicates %d; want 90 9 261 30 3",
			r.Sent, r.Lost, r.Delivered, r.OutOfOrder, r.Duplicates)
	}
	if r.ConnErrors != 0 {
		t.Errorf("errors %v", r.Errors)
	}
}

func TestSteadyConnectFailure(t *testing.T) {
	_, err := RunSteady(ctxT(t), SteadyConfig{URL: "ws://127.0.0.1:1/core", Clients: 2, Duration: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "2 clients wanted, 0 connected") {
		t.Fatalf("got %v", err)
	}
	if _, err := RunSteady(ctxT(t), SteadyConfig{URL: "ws://127.0.0.1:1/core", Mix: SizeMix{JSONMin: 5, JSONMax: 10}}); err == nil {
		t.Error("a bad mix runs")
	}
}
