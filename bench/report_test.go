package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
)

func TestSchedule(t *testing.T) {
	steps := Schedule(2, 2, 3)
	if len(steps) != 12 {
		t.Fatalf("%d steps", len(steps))
	}
	var order []int
	for _, s := range steps[:6] {
		if s.Scenario != 0 {
			t.Fatalf("scenario %d before scenario 0 is done", s.Scenario)
		}
		order = append(order, s.Target)
	}
	// Every repeat runs every target once, interleaved, rotated.
	if !slices.Equal(order, []int{0, 1, 2, 1, 2, 0}) {
		t.Errorf("order %v", order)
	}
}

func TestParseScenariosAndTargets(t *testing.T) {
	sc, err := ParseScenarios("seeds")
	if err != nil || len(sc) != 5 || sc[0] != (Scenario{5, 200}) || sc[4] != (Scenario{1000, 100}) {
		t.Errorf("seeds: %v %v", sc, err)
	}
	sc, err = ParseScenarios("3x50, 7×9")
	if err != nil || !slices.Equal(sc, []Scenario{{3, 50}, {7, 9}}) {
		t.Errorf("list: %v %v", sc, err)
	}
	for _, bad := range []string{"", "x", "3x", "0x5", "ax5", "seedz"} {
		if _, err := ParseScenarios(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	ls, err := ParseLoadScenarios("10x1k,2x64w8")
	if err != nil || !slices.Equal(ls, []LoadScenario{{10, 1024, 1}, {2, 64, 8}}) {
		t.Errorf("load list: %v %v", ls, err)
	}
	if ls, _ := ParseLoadScenarios("std"); len(ls) != len(LoadPresets["std"]) {
		t.Errorf("std: %v", ls)
	}
	if ls, _ := ParseLoadScenarios("echo"); !slices.Equal(ls, []LoadScenario{{1, 300, 1}, {1, 300, 64}, {1, 1 << 20, 1}, {100, 1024, 16}}) {
		t.Errorf("echo: %v", ls)
	}
	tg, err := ParseTarget("gws=ws://127.0.0.1:9/core")
	if err != nil || tg.Name != "gws" || tg.URL != "ws://127.0.0.1:9/core" {
		t.Errorf("target: %+v %v", tg, err)
	}
	tg, err = ParseTarget("ws://127.0.0.1:9/core")
	if err != nil || tg.Name != "127.0.0.1:9" {
		t.Errorf("bare target: %+v %v", tg, err)
	}
	for _, bad := range []string{"x=http://a/", "x=", "nourl"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// fakeReport builds a report from made-up runs: the subject "a" is ahead on
// throughput and behind on p99; "c" lost messages and must not be "best".
func fakeReport() *Report {
	r := NewReport(KindFanout, 3, nil)
	run := func(thr, p99, cpu, dropped float64) map[string]float64 {
		return map[string]float64{
			"deliveries_per_sec": thr, "latency_min_ms": 0.1, "latency_p50_ms": p99 / 3, "latency_p95_ms": p99 * 0.9,
			"latency_p99_ms": p99, "latency_max_ms": p99 * 1.1, "server_cpu_us_per_delivery": cpu, "dropped": dropped,
			"client_cpu_cores": 0.5,
		}
	}
	for _, sc := range []string{"5×200", "20×1000"} {
		a := r.SeriesFor(sc, Target{Name: "a"})
		b := r.SeriesFor(sc, Target{Name: "b"})
		c := r.SeriesFor(sc, Target{Name: "c"})
		for i := range 3 {
			f := float64(i)
			a.Add(run(1000+f*10, 5+f, 1, 0))
			b.Add(run(500+f*10, 4+f, 2, 0))
			c.Add(run(5000, 0.1, 0.1, 7))
		}
	}
	r.Finish()
	return r
}

func TestHeadline(t *testing.T) {
	r := fakeReport()
	if len(r.Headline) != 6 {
		t.Fatalf("%d headline entries: %+v", len(r.Headline), r.Headline)
	}
	h := r.Headline[0]
	if h.Metric != "deliveries_per_sec" || h.BestPeer != "b" || h.Value != 1010 || h.Peer != 510 || !h.Ahead {
		t.Errorf("throughput headline %+v", h)
	}
	if h := r.Headline[1]; h.Metric != "latency_p99_ms" || h.BestPeer != "b" || h.Ahead || h.Ratio != 6.0/5.0 {
		t.Errorf("p99 headline %+v", h)
	}
	if h := r.Headline[2]; h.Metric != "server_cpu_us_per_delivery" || h.Ratio != 0.5 || !h.Ahead {
		t.Errorf("cpu headline %+v", h)
	}
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "c 5×200: lost messages or connections (dropped 21 in 3 of 3 runs)") {
		t.Errorf("notes:\n%s", notes)
	}
}

func TestReportFormats(t *testing.T) {
	r := fakeReport()
	var text, md, js, svg bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deliveries/s", "1.01k (1.00k–1.02k)", "Headline: a", "×1.98 vs b"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	lines := strings.Split(md.String(), "\n")
	if !strings.HasPrefix(lines[0], "| scenario | bus | deliveries/s |") || !strings.HasPrefix(lines[1], "| --- | --- | ---: |") {
		t.Errorf("markdown header:\n%s", md.String())
	}
	if !strings.Contains(md.String(), "**1.01k (1.00k–1.02k) ×1.00**") {
		t.Errorf("markdown does not mark the best:\n%s", md.String())
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Series) != 6 || back.Series[0].Summary["deliveries_per_sec"].Median != 1010 {
		t.Errorf("JSON round trip: %v", err)
	}
	checkSVG(t, svg.Bytes(), "a", "b", "c", "5×200", "20×1000")
}

// checkSVG asserts well-formed XML with an <svg> root that names every want.
func checkSVG(t *testing.T, b []byte, want ...string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
		case xml.CharData:
			texts = append(texts, string(v))
		}
	}
	if root != "svg" {
		t.Errorf("root element %q", root)
	}
	all := strings.Join(texts, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("SVG lacks %q", w)
		}
	}
}

func TestNiceTicksAndFormats(t *testing.T) {
	for _, m := range []float64{0.3, 7, 42, 999, 1234567} {
		ticks := niceTicks(m)
		if ticks[0] != 0 || ticks[len(ticks)-1] < m || len(ticks) < 3 || len(ticks) > 9 {
			t.Errorf("niceTicks(%v) = %v", m, ticks)
		}
	}
	for v, want := range map[float64]string{950: "950", 1234: "1.23k", 45678: "45.7k", 2.5e6: "2.50M"} {
		if got := FormatRate(v); got != want {
			t.Errorf("FormatRate(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0.85: "850µs", 1.5: "1.50ms", 12.34: "12.3ms", 1540: "1.54s"} {
		if got := FormatMillis(v); got != want {
			t.Errorf("FormatMillis(%v) = %q, want %q", v, got, want)
		}
	}
	for d, want := range map[int]string{-2: "10µs", -1: "100µs", 0: "1ms", 2: "100ms", 3: "1s"} {
		if got := decadeLabel(d); got != want {
			t.Errorf("decadeLabel(%d) = %q, want %q", d, got, want)
		}
	}
}

// TestFanoutSuiteCompare runs a tiny interleaved comparison of the real bus
// and the test relay end to end, through the JSON report and the plot.
func TestFanoutSuiteCompare(t *testing.T) {
	busURL, relayURL := startBus(t), startRelay(t, true, nil)
	var log bytes.Buffer
	rep, err := FanoutSuite{
		Base:      FanoutConfig{Size: 128},
		Scenarios: []Scenario{{3, 50}, {2, 20}},
		Targets:   []Target{{Name: "ovbus", URL: busURL}, {Name: "relay", URL: relayURL}},
		Repeat:    2,
		Pause:     time.Millisecond,
		Log:       &log,
	}.Run(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), "\n"); n != 8 {
		t.Errorf("%d log lines:\n%s", n, log.String())
	}
	if len(rep.Series) != 4 {
		t.Fatalf("%d series", len(rep.Series))
	}
	for _, s := range rep.Series {
		exp := s.Summary["expected"].Median
		if len(s.Runs) != 2 || s.Failed != 0 || s.Summary["delivered"].Min != exp || s.Summary["dropped"].Sum != 0 ||
			s.Summary["out_of_order"].Sum != 0 || s.Summary["conn_errors"].Sum != 0 {
			t.Errorf("%s %s: runs %d failed %d %+v", s.Bus, s.Scenario, len(s.Runs), s.Failed, s.Summary)
		}
		if s.ServerPID == 0 {
			t.Errorf("%s: server pid not found from the port", s.Bus)
		}
	}
	if len(rep.Headline) == 0 {
		t.Error("no headline")
	}
	var svg bytes.Buffer
	rep.WriteSVG(&svg)
	checkSVG(t, svg.Bytes(), "ovbus", "relay", "3×50")
}

func TestProgressLinesWhenNotATerminal(t *testing.T) {
	var none *Progress
	none.Begin(0, "x") // a nil Progress is a no-op
	none.Update(1, 2)
	none.Done()
	var buf bytes.Buffer
	p := NewProgress(&buf, 3)
	p.Begin(0, "ovbus 5×200 run 1/1") // the first line is written at once
	p.Update(10, 100)                 // then at most one every LineEvery
	p.Begin(1, "ovbus 5×200 run 1/2")
	p.Done()
	if s := buf.String(); strings.Count(s, "\n") != 1 || !strings.HasPrefix(s, "[1/3 0s] ovbus 5×200 run 1/1") || strings.Contains(s, "\r") {
		t.Errorf("progress lines %q", s)
	}
	p.last = time.Now().Add(-LineEvery)
	p.Update(50, 100)
	if s := buf.String(); strings.Count(s, "\n") != 2 || !strings.Contains(s, "[2/3 ") || !strings.Contains(s, "50%") {
		t.Errorf("progress lines %q", s)
	}
	buf.Reset()
	// Drawn on a writer that pretends to be a terminal.
	q := &Progress{w: &buf, total: 2, start: time.Now()}
	q.Begin(1, "ovbus 5×200 run 1/1")
	q.Update(50, 100)
	q.Done()
	if s := buf.String(); !strings.Contains(s, "[2/2 ") || !strings.Contains(s, "##########..........]  50%") {
		t.Errorf("progress line %q", s)
	}
}

// Two identical servers whose repeats vary: the ratios straddle 1, so the verdict is "level",
// whatever the medians say.
func TestHeadlineLevelInsideTheNoise(t *testing.T) {
	r := NewReport(KindLoad, 3, nil)
	a := r.SeriesFor("10×1k", Target{Name: "a"})
	b := r.SeriesFor("10×1k", Target{Name: "b"})
	for _, v := range [][2]float64{{900, 1000}, {1100, 950}, {1000, 1040}} {
		a.Add(map[string]float64{"msg_per_sec": v[0], "rtt_p99_ms": 2000 / v[0]})
		b.Add(map[string]float64{"msg_per_sec": v[1], "rtt_p99_ms": 2000 / v[1]})
	}
	r.Finish()
	for _, h := range r.Headline {
		if h.Verdict != "level" || h.RatioMin > 1 || h.RatioMax < 1 {
			t.Errorf("%s: verdict %q, ratios %.2f–%.2f", h.Metric, h.Verdict, h.RatioMin, h.RatioMax)
		}
	}
	var text bytes.Buffer
	r.WriteText(&text)
	if !strings.Contains(text.String(), "level (×0.90–×1.16 over the repeats: inside the noise)") {
		t.Errorf("text:\n%s", text.String())
	}
	// The fake report's subject is clearly ahead on throughput and behind on p99.
	f := fakeReport()
	if v := f.Headline[0].Verdict; v != "ahead" {
		t.Errorf("throughput verdict %q", v)
	}
	if v := f.Headline[1].Verdict; v != "behind" {
		t.Errorf("p99 verdict %q", v)
	}
	// One run each: a ratio within LevelThreshold is level, and the text says there is no spread.
	one := NewReport(KindLoad, 1, nil)
	one.SeriesFor("s", Target{Name: "a"}).Add(map[string]float64{"msg_per_sec": 1000})
	one.SeriesFor("s", Target{Name: "b"}).Add(map[string]float64{"msg_per_sec": 1030})
	one.Finish()
	text.Reset()
	one.WriteText(&text)
	if h := one.Headline[0]; h.Verdict != "level" || !strings.Contains(text.String(), "no spread to judge by") {
		t.Errorf("one run: %+v\n%s", h, text.String())
	}
}

func TestCountCPUList(t *testing.T) {
	for list, want := range map[string]int{"0": 1, "0-1": 2, "0-3,8,10-11": 7, "": 0, "x": 0, "3-1": 0} {
		if got := countCPUList(list); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", list, got, want)
		}
	}
}

// A client pinned to part of the machine is not said to share its CPUs
// with the server.
func TestNotesPinnedClient(t *testing.T) {
	pinned := (&Report{Kind: KindLoad, Machine: Machine{CPUs: 1, OnlineCPUs: 2}}).notes()
	shared := (&Report{Kind: KindLoad, Machine: Machine{CPUs: 2}}).notes()
	if j := strings.Join(pinned, "\n"); !strings.Contains(j, "1 of the machine's 2 CPUs") || strings.Contains(j, "share them") {
		t.Errorf("pinned: %q", pinned)
	}
	if j := strings.Join(shared, "\n"); !strings.Contains(j, "2 CPUs: client and server share them") {
		t.Errorf("not pinned: %q", shared)
	}
}

// The chart's subtitle says how many of the machine's CPUs a pinned client
// had.
func TestCPUsText(t *testing.T) {
	for _, c := range []struct {
		m    Machine
		want string
	}{
		{Machine{CPUs: 2}, "2 CPUs"},
		{Machine{CPUs: 1, OnlineCPUs: 2}, "1 of 2 CPUs"},
	} {
		if got := c.m.cpusText(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
}

// TestSteadyPooledLatency: the pooled figures are percentiles of every run's
// deliveries together, not medians of each run's: a stall in one run of two
// moves the pooled p99.9, which the median of the runs' p99.9 hides.
func TestSteadyPooledLatency(t *testing.T) {
	r := NewReport(KindSteady, 2, nil)
	run := func(base time.Duration, slow int) *SteadyResult {
		res := &SteadyResult{Latency: stats.NewHistogram(), SendLag: stats.NewHistogram(), FromSend: stats.NewHistogram(), Delivered: 1000}
		for i := range 1000 {
			d := base
			if i < slow {
				d = 50 * time.Millisecond
			}
			res.Latency.Record(d)
			res.FromSend.Record(d / 2)
			res.SendLag.Record(0)
		}
		return res
	}
	a, b := r.SeriesFor("s", Target{Name: "a"}), r.SeriesFor("s", Target{Name: "b"})
	for _, res := range []*SteadyResult{run(time.Millisecond, 0), run(time.Millisecond, 10), run(2*time.Millisecond, 0), run(2*time.Millisecond, 0)} {
		s := a
		if res.Latency.Min() == 2*time.Millisecond {
			s = b
		}
		s.pool(res)
		s.Add(SteadyMetrics(res))
	}
	r.Finish()
	p := a.Pooled
	near := func(k string, want float64) bool { return p[k] >= want && p[k] <= want*1.01 } // a bucket's top: at most 0.78 % high
	if p["delivered"] != 2000 || !near("latency_p99_ms", 1) || !near("latency_p999_ms", 50) || !near("latency_max_ms", 50) || !near("from_send_p999_ms", 25) {
		t.Errorf("pooled %v: want 2000 delivered, p99 1 ms, p99.9 and max 50 ms, p99.9 from send 25 ms", p)
	}
	if m := a.Summary["latency_p999_ms"].Median; m >= 50 {
		t.Errorf("median of the runs' p99.9 %v: the test's premise is gone", m)
	}
	var h *Headline
	for i := range r.Headline {
		if r.Headline[i].Pooled {
			h = &r.Headline[i]
		}
	}
	if h == nil || h.Metric != "latency_p999_ms" || h.BestPeer != "b" || h.Ratio < 24 || h.Ratio > 26 || h.Verdict != "behind" {
		t.Fatalf("pooled headline %+v in %+v", h, r.Headline)
	}
	var md, text bytes.Buffer
	r.WriteMarkdown(&md)
	r.WriteText(&text)
	for _, want := range []string{"Latency over every delivery of the 2 runs together", "| s | a | 2000 | 1.00ms | 50.0ms |",
		"p99.9 latency, all runs pooled: ×25.00 vs b (50.0ms vs 2.00ms) — behind (over every delivery of the 2 runs together"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(text.String(), "Latency over every delivery of the 2 runs together:") {
		t.Errorf("text:\n%s", text.String())
	}
	// One run each: nothing to pool.
	one := NewReport(KindSteady, 1, nil)
	s := one.SeriesFor("s", Target{Name: "a"})
	s.pool(run(time.Millisecond, 0))
	s.Add(SteadyMetrics(run(time.Millisecond, 0)))
	one.Finish()
	if s.Pooled != nil || one.pooledTable() != nil {
		t.Errorf("one run pooled: %v", s.Pooled)
	}
}
