package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ovbus/ovbus/bench/stats"
)

// How a Report is written: the headline ratios of the subject to the best
// peer with their verdicts, and the table of every scenario and target as
// text or markdown, with the notes that say how to read it.

// Headline compares the subject (the first target) with the best other
// target on one metric in one scenario.
type Headline struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Subject  string  `json:"subject"`
	Value    float64 `json:"value"`
	BestPeer string  `json:"best_peer"`
	Peer     float64 `json:"peer_value"`
	// Ratio is Value ÷ Peer; Ahead says whether the subject's median is
	// better (a higher throughput, a lower latency or CPU time).
	Ratio float64 `json:"ratio"`
	Ahead bool    `json:"ahead"`
	// RatioMin and RatioMax are the lowest and highest ratio of the
	// subject's run to the peer's run of the same repeat (runs are
	// interleaved, so repeat i of both ran side by side).
	RatioMin float64 `json:"ratio_min"`
	RatioMax float64 `json:"ratio_max"`
	// Verdict is "ahead", "behind" or "level": level when the ratios of
	// the repeats straddle 1 (the difference is inside the noise) or the
	// median ratio is within LevelThreshold of 1.
	Verdict string `json:"verdict"`
	// Pooled: Value and Peer are figures over every run's deliveries
	// together (Series.Pooled), not medians; there is one ratio, no spread.
	Pooled bool `json:"pooled,omitempty"`
}

// LevelThreshold is how close to 1 a median ratio must be for a headline to say "level" whatever
// the spread: differences under 5 % are not worth a claim on a shared machine.
const LevelThreshold = 0.05

// verdict judges a headline from its median ratio and the per-repeat ratios.
func verdict(ratio, lo, hi float64, n int, higher bool) string {
	if (n >= 2 && lo <= 1 && hi >= 1) || math.Abs(ratio-1) <= LevelThreshold {
		return "level"
	}
	if (ratio > 1) == higher {
		return "ahead"
	}
	return "behind"
}

// pairedRatios returns the lowest and highest ratio subject run ÷ peer run of key, over the
// repeats both have, and how many there were.
func pairedRatios(subj, peer *Series, key string) (lo, hi float64, n int) {
	for i := 0; i < len(subj.Runs) && i < len(peer.Runs); i++ {
		a, okA := subj.Runs[i][key]
		b, okB := peer.Runs[i][key]
		if !okA || !okB || b == 0 {
			continue
		}
		r := a / b
		if n == 0 || r < lo {
			lo = r
		}
		if n == 0 || r > hi {
			hi = r
		}
		n++
	}
	return lo, hi, n
}

// headlineMetrics are the goals of the comparison: higher throughput, lower
// p99 and lower server CPU time per delivery (or per echo).
func (r *Report) headlineMetrics() []struct {
	key    string
	higher bool
} {
	type hm = struct {
		key    string
		higher bool
	}
	switch r.Kind {
	case KindLoad:
		return []hm{{"msg_per_sec", true}, {"rtt_p99_ms", false}, {"server_cpu_us_per_msg", false}}
	case KindSteady:
		// The rate is the schedule's: what a server shows is its cost and
		// its latency at that rate.
		return []hm{{"server_cpu_us_per_frame", false}, {"latency_p99_ms", false}, {"latency_p999_ms", false}}
	}
	return []hm{{"deliveries_per_sec", true}, {"latency_p99_ms", false}, {"server_cpu_us_per_delivery", false}}
}

func (r *Report) headline() []Headline {
	buses := r.Buses()
	if len(buses) < 2 {
		return nil
	}
	subject := buses[0]
	var out []Headline
	for _, sc := range r.Scenarios() {
		var subj *Series
		var peers []*Series
		for _, s := range r.Series {
			if s.Scenario != sc {
				continue
			}
			if s.Bus == subject {
				subj = s
			} else {
				peers = append(peers, s)
			}
		}
		if subj == nil {
			continue
		}
		for _, hm := range r.headlineMetrics() {
			v, ok := subj.Summary[hm.key]
			if !ok || v.N == 0 {
				continue
			}
			best := (*Series)(nil)
			bestV := 0.0
			for _, p := range peers {
				pv, ok := p.Summary[hm.key]
				if !ok || pv.N == 0 || !p.valid() {
					continue
				}
				if best == nil || (hm.higher && pv.Median > bestV) || (!hm.higher && pv.Median < bestV) {
					best, bestV = p, pv.Median
				}
			}
			if best == nil {
				continue
			}
			h := Headline{Scenario: sc, Metric: hm.key, Subject: subject, Value: v.Median, BestPeer: best.Bus, Peer: bestV}
			if bestV != 0 {
				h.Ratio = v.Median / bestV
			}
			if hm.higher {
				h.Ahead = v.Median > bestV
			} else {
				h.Ahead = v.Median < bestV
			}
			lo, hi, n := pairedRatios(subj, best, hm.key)
			h.RatioMin, h.RatioMax = lo, hi
			h.Verdict = verdict(h.Ratio, lo, hi, n, hm.higher)
			out = append(out, h)
		}
		if h, ok := pooledHeadline(subj, peers); ok {
			out = append(out, h)
		}
	}
	return out
}

// pooledHeadline compares the subject's p99.9 over all its runs' deliveries
// together with the lowest of the peers that lost nothing.
func pooledHeadline(subj *Series, peers []*Series) (Headline, bool) {
	const key = "latency_p999_ms"
	v, ok := subj.Pooled[key]
	if !ok {
		return Headline{}, false
	}
	var best *Series
	for _, p := range peers {
		if pv, ok := p.Pooled[key]; ok && p.valid() && (best == nil || pv < best.Pooled[key]) {
			best = p
		}
	}
	if best == nil || best.Pooled[key] == 0 {
		return Headline{}, false
	}
	pv := best.Pooled[key]
	h := Headline{Scenario: subj.Scenario, Metric: key, Subject: subj.Bus, Value: v, BestPeer: best.Bus, Peer: pv,
		Ratio: v / pv, Ahead: v < pv, Pooled: true}
	h.Verdict = verdict(h.Ratio, 0, 0, 1, false)
	return h, true
}

func (r *Report) notes() []string {
	var notes []string
	bound := 0
	runs := 0
	var spreads []float64
	thr, thrLabel := "deliveries_per_sec", "throughput"
	switch r.Kind {
	case KindLoad:
		thr = "msg_per_sec"
	case KindSteady:
		thr, thrLabel = "server_cpu_us_per_frame", "server CPU per frame"
	}
	for _, s := range r.Series {
		runs += len(s.Runs)
		bound += int(s.Summary["client_bound"].Sum)
		if sp, ok := s.Summary[thr]; ok && sp.N > 1 && sp.Median > 0 {
			spreads = append(spreads, (sp.Max-sp.Min)/sp.Median)
		}
		if s.Failed > 0 {
			notes = append(notes, fmt.Sprintf("%s %s: %d of %d runs failed: %s", s.Bus, s.Scenario, s.Failed, s.Failed+len(s.Runs), strings.Join(s.Errors, "; ")))
		}
		if !s.valid() && len(s.Runs) > 0 {
			var what []string
			for _, k := range append(slices.Clone(lossMetrics), "not_warm") {
				sp := s.Summary[k]
				if sp.Sum == 0 {
					continue
				}
				bad := 0
				for _, m := range s.Runs {
					if m[k] > 0 {
						bad++
					}
				}
				what = append(what, fmt.Sprintf("%s %.0f in %d of %d runs", strings.ReplaceAll(k, "_", " "), sp.Sum, bad, len(s.Runs)))
			}
			notes = append(notes, fmt.Sprintf("%s %s: lost messages or connections (%s): left out of the headline", s.Bus, s.Scenario, strings.Join(what, ", ")))
		}
	}
	if r.Kind == KindSteady {
		notes = append(notes, r.steadyNotes()...)
	}
	if bound > 0 {
		notes = append(notes, fmt.Sprintf("client-bound in %d of %d runs: the client used more than %.0f%% of a core, so those throughput figures are a floor", bound, runs, ClientBoundShare*100))
	}
	if len(spreads) > 0 {
		slices.Sort(spreads)
		notes = append(notes, fmt.Sprintf("noise: %s (max−min)/median over repeats is %.0f%% in the median series, %.0f%% at worst", thrLabel, 100*stats.Median(spreads), 100*spreads[len(spreads)-1]))
	}
	switch m := r.Machine; {
	case m.OnlineCPUs > m.CPUs:
		notes = append(notes, fmt.Sprintf("the client ran on %d of the machine's %d CPUs (an affinity mask): a server pinned to the others (bench/run.sh --pin) does not share its CPU with the client", m.CPUs, m.OnlineCPUs))
	case m.CPUs <= 2:
		notes = append(notes, fmt.Sprintf("%d CPUs: client and server share them, so every figure includes the client's load", m.CPUs))
	}
	return notes
}

// steadyNotes says where a steady run's frames came out of order or twice,
// and where the clients fell behind their schedule.
func (r *Report) steadyNotes() []string {
	var notes []string
	worstLag, lateRuns, runs := 0.0, 0, 0
	for _, s := range r.Series {
		var what []string
		for _, k := range []string{"out_of_order", "duplicates", "unexpected"} {
			if n := s.Summary[k].Sum; n > 0 {
				what = append(what, fmt.Sprintf("%.0f %s", n, strings.ReplaceAll(k, "_", " ")))
			}
		}
		if len(what) > 0 {
			notes = append(notes, fmt.Sprintf("%s %s: %s: the bus broke a sender's order", s.Bus, s.Scenario, strings.Join(what, ", ")))
		}
		for _, m := range s.Runs {
			runs++
			if lag := m["send_lag_p99_ms"]; lag > SteadyLateMillis {
				lateRuns++
				worstLag = max(worstLag, lag)
			}
		}
	}
	if lateRuns > 0 {
		notes = append(notes, fmt.Sprintf("the clients sent late in %d of %d runs (send lag p99 above %gms, up to %s): the latency includes that wait, as it should, but it is the client's", lateRuns, runs, float64(SteadyLateMillis), FormatMillis(worstLag)))
	}
	return notes
}

// SteadyLateMillis is the send lag p99 (ms) above which a steady report says
// the clients fell behind their schedule.
const SteadyLateMillis = 1

// column is one column of the result table.
type column struct {
	title string
	cell  func(s *Series, best map[string]float64) string
}

func (r *Report) columns(markdown bool) []column {
	med := func(s *Series, k string) (float64, bool) {
		sp, ok := s.Summary[k]
		return sp.Median, ok && sp.N > 0
	}
	rateCol := func(title, k string) column {
		return column{title, func(s *Series, best map[string]float64) string {
			sp, ok := s.Summary[k]
			if !ok || sp.N == 0 {
				return "–"
			}
			str := FormatRate(sp.Median)
			if sp.N > 1 {
				str += fmt.Sprintf(" (%s–%s)", FormatRate(sp.Min), FormatRate(sp.Max))
			}
			if b := best[k]; b > 0 && len(r.Buses()) > 1 {
				str += fmt.Sprintf(" ×%.2f", sp.Median/b)
			}
			if markdown && best[k] == sp.Median && len(r.Buses()) > 1 && s.valid() {
				str = "**" + str + "**"
			}
			return str
		}}
	}
	// medCol shows the median of k, formatted.
	medCol := func(title, k string, format func(float64) string) column {
		return column{title, func(s *Series, _ map[string]float64) string {
			v, ok := med(s, k)
			if !ok {
				return "–"
			}
			return format(v)
		}}
	}
	latCol := func(title, k string) column { return medCol(title, k, FormatMillis) }
	cpuCol := func(title, k string) column {
		return medCol(title, k, func(v float64) string { return fmt.Sprintf("%.2f", v) })
	}
	sumCol := func(title string, keys ...string) column {
		return column{title, func(s *Series, _ map[string]float64) string {
			t := 0.0
			for _, k := range keys {
				t += s.Summary[k].Sum
			}
			str := fmt.Sprintf("%.0f", t)
			if s.Failed > 0 {
				str += fmt.Sprintf(" +%d failed", s.Failed)
			}
			return str
		}}
	}
	coresCol := column{"client CPU", func(s *Series, _ map[string]float64) string {
		v, ok := med(s, "client_cpu_cores")
		if !ok {
			return "–"
		}
		str := fmt.Sprintf("%.0f%%", 100*v)
		if s.Summary["client_bound"].Sum > 0 {
			str += "!"
		}
		return str
	}}
	pctCol := func(title, k string) column {
		return medCol(title, k, func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) })
	}
	switch r.Kind {
	case KindSteady:
		return []column{
			rateCol("deliveries/s", "deliveries_per_sec"),
			latCol("p50", "latency_p50_ms"), latCol("p90", "latency_p90_ms"), latCol("p99", "latency_p99_ms"),
			latCol("p99.9", "latency_p999_ms"), latCol("max", "latency_max_ms"),
			sumCol("lost", "lost"), sumCol("reordered", "out_of_order"), sumCol("duplicates", "duplicates"),
			sumCol("errors", "conn_errors"),
			latCol("send lag p99", "send_lag_p99_ms"),
			latCol("p99 from send", "from_send_p99_ms"), latCol("p99.9 from send", "from_send_p999_ms"),
			coresCol,
			pctCol("server CPU", "server_cpu_cores"),
			cpuCol("server µs/frame", "server_cpu_us_per_frame"),
			cpuCol("server µs/delivery", "server_cpu_us_per_delivery"),
		}
	case KindLoad:
		return []column{
			rateCol("msg/s", "msg_per_sec"),
			medCol("MB/s", "mb_per_sec", func(v float64) string { return fmt.Sprintf("%.1f", v) }),
			latCol("RTT p50", "rtt_p50_ms"), latCol("p95", "rtt_p95_ms"), latCol("p99", "rtt_p99_ms"), latCol("max", "rtt_max_ms"),
			sumCol("errors", "conn_errors", "timeouts", "mismatched"),
			coresCol,
			cpuCol("server µs/msg", "server_cpu_us_per_msg"),
			cpuCol("client µs/msg", "client_cpu_us_per_msg"),
		}
	}
	return []column{
		rateCol("deliveries/s", "deliveries_per_sec"),
		latCol("p50", "latency_p50_ms"), latCol("p95", "latency_p95_ms"), latCol("p99", "latency_p99_ms"), latCol("max", "latency_max_ms"),
		sumCol("dropped", "dropped"), sumCol("errors", "conn_errors"), sumCol("out of order", "out_of_order"),
		coresCol,
		cpuCol("server µs/delivery", "server_cpu_us_per_delivery"),
		cpuCol("client µs/delivery", "client_cpu_us_per_delivery"),
	}
}

// bestOf returns, per throughput metric, the best median in a scenario
// among the series that lost nothing (among all when every one lost some).
func (r *Report) bestOf(scenario string) map[string]float64 {
	best := map[string]float64{}
	anyValid := false
	for _, s := range r.Series {
		if s.Scenario == scenario && s.valid() {
			anyValid = true
		}
	}
	for _, s := range r.Series {
		if s.Scenario != scenario || (anyValid && !s.valid()) {
			continue
		}
		for _, k := range []string{"deliveries_per_sec", "msg_per_sec"} {
			if sp, ok := s.Summary[k]; ok && sp.Median > best[k] {
				best[k] = sp.Median
			}
		}
	}
	return best
}

// table returns the result table: a header row, then one row per series,
// grouped by scenario.
func (r *Report) table(markdown bool) [][]string {
	cols := r.columns(markdown)
	hdr := []string{"scenario", "bus"}
	for _, c := range cols {
		hdr = append(hdr, c.title)
	}
	rows := [][]string{hdr}
	for _, sc := range r.Scenarios() {
		best := r.bestOf(sc)
		for _, s := range r.Series {
			if s.Scenario != sc {
				continue
			}
			row := []string{s.Scenario, s.Bus}
			for _, c := range cols {
				row = append(row, c.cell(s, best))
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// pooledTable returns the table of the latency over all runs together
// (Series.Pooled), nil when no series has it.
func (r *Report) pooledTable() [][]string {
	cols := []struct{ title, key string }{
		{"p99", "latency_p99_ms"}, {"p99.9", "latency_p999_ms"}, {"p99.99", "latency_p9999_ms"},
		{"max", "latency_max_ms"}, {"p99 from send", "from_send_p99_ms"}, {"p99.9 from send", "from_send_p999_ms"},
	}
	rows := [][]string{{"scenario", "bus", "deliveries"}}
	for _, c := range cols {
		rows[0] = append(rows[0], c.title)
	}
	for _, s := range r.Series {
		if s.Pooled == nil {
			continue
		}
		row := []string{s.Scenario, s.Bus, fmt.Sprintf("%.0f", s.Pooled["delivered"])}
		for _, c := range cols {
			row = append(row, FormatMillis(s.Pooled[c.key]))
		}
		rows = append(rows, row)
	}
	if len(rows) == 1 {
		return nil
	}
	return rows
}

// WriteText writes the table for a terminal, then the headline and notes.
func (r *Report) WriteText(w io.Writer) error {
	for i, rows := range [][][]string{r.table(false), r.pooledTable()} {
		if rows == nil {
			continue
		}
		if i > 0 {
			fmt.Fprintf(w, "\nLatency over every delivery of the %d runs together:\n", r.Repeat)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	r.writeFooter(w, false)
	return nil
}

// WriteMarkdown writes the table as GitHub markdown, then the headline and
// notes.
func (r *Report) WriteMarkdown(w io.Writer) error {
	writeMarkdownTable(w, r.table(true))
	if rows := r.pooledTable(); rows != nil {
		fmt.Fprintf(w, "\nLatency over every delivery of the %d runs together:\n\n", r.Repeat)
		writeMarkdownTable(w, rows)
	}
	r.writeFooter(w, true)
	return nil
}

// writeMarkdownTable writes rows, the first the header, as a GitHub markdown
// table: the first two columns text, the rest figures.
func writeMarkdownTable(w io.Writer, rows [][]string) {
	align := []string{"---", "---"}
	for range rows[0][2:] {
		align = append(align, "---:")
	}
	fmt.Fprintf(w, "| %s |\n| %s |\n", strings.Join(rows[0], " | "), strings.Join(align, " | "))
	for _, row := range rows[1:] {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

func (r *Report) writeFooter(w io.Writer, markdown bool) {
	bullet := ""
	if markdown {
		bullet = "- "
	}
	fmt.Fprintln(w)
	if r.Repeat > 1 {
		fmt.Fprintf(w, "%sMedians of %d runs (min–max in brackets); ×N is the ratio to the best median in the scenario.\n", bullet, r.Repeat)
	}
	switch r.Kind {
	case KindFanout:
		fmt.Fprintf(w, "%sLatency is receive − send over every delivery; dropped, errors and out of order are summed over all runs; CPU time is per delivered message.\n", bullet)
	case KindSteady:
		fmt.Fprintf(w, "%sEvery client sends on its own schedule and receives every frame, its own too. Latency runs from each frame's scheduled send time to its arrival, over every delivery (no coordinated omission: a frame sent late is charged for the wait); percentiles from a log-linear histogram (at most %.1f%% high). Send lag is how late the clients sent (part of the latency, the client's); p99 and p99.9 from send run from when the sender began to write each frame instead, so they leave the senders' lateness out: the bus's share, with the kernel's and the receivers'. Lost, reordered (after a later frame of the same sender) and duplicates are summed over all runs. Server CPU per frame is server CPU ÷ frames sent; per delivery, ÷ frames delivered.\n",
			bullet, 100.0/(1<<stats.HistogramBits))
	default:
		fmt.Fprintf(w, "%sRTT is echo receive − send; MB/s is echoed payload in one direction (10^6 bytes); CPU time is per echo.\n", bullet)
	}
	if len(r.Headline) > 0 {
		fmt.Fprintln(w)
		if markdown {
			fmt.Fprintf(w, "**Headline: %s against the best other target in each scenario**\n\n", r.Headline[0].Subject)
		} else {
			fmt.Fprintf(w, "Headline: %s against the best other target in each scenario\n", r.Headline[0].Subject)
		}
		for _, h := range r.Headline {
			label := metricLabel(h.Metric)
			if h.Pooled {
				label += ", all runs pooled"
			}
			fmt.Fprintf(w, "%s%s %s: ×%.2f vs %s (%s vs %s) — %s\n", bullet, h.Scenario, label,
				h.Ratio, h.BestPeer, formatMetric(h.Metric, h.Value), formatMetric(h.Metric, h.Peer), h.why(r.Repeat))
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.Notes {
			if markdown {
				fmt.Fprintf(w, "- %s\n", n)
			} else {
				fmt.Fprintf(w, "note: %s\n", n)
			}
		}
	}
}

// why is the verdict with what it rests on.
func (h Headline) why(repeat int) string {
	v := h.Verdict
	if v == "" { // a report saved before verdicts
		v = "behind"
		if h.Ahead {
			v = "ahead"
		}
	}
	if h.Pooled {
		return fmt.Sprintf("%s (over every delivery of the %d runs together: one figure each, no spread)", v, repeat)
	}
	if repeat < 2 || h.RatioMin == 0 {
		if v == "level" {
			return fmt.Sprintf("level (within %.0f%%; one run each, no spread to judge by: use --repeat 3 or more)", LevelThreshold*100)
		}
		return v + " (one run each, no spread to judge by: use --repeat 3 or more)"
	}
	span := fmt.Sprintf("×%.2f–×%.2f over the repeats", h.RatioMin, h.RatioMax)
	switch {
	case v == "level" && h.RatioMin <= 1 && h.RatioMax >= 1:
		return "level (" + span + ": inside the noise)"
	case v == "level":
		return fmt.Sprintf("level (%s, within %.0f%%)", span, LevelThreshold*100)
	}
	return v + " (" + span + ")"
}

func metricLabel(k string) string {
	switch k {
	case "deliveries_per_sec":
		return "deliveries/s"
	case "msg_per_sec":
		return "msg/s"
	case "latency_p99_ms":
		return "p99 latency"
	case "rtt_p99_ms":
		return "p99 RTT"
	case "server_cpu_us_per_delivery":
		return "server CPU/delivery"
	case "server_cpu_us_per_msg":
		return "server CPU/msg"
	case "server_cpu_us_per_frame":
		return "server CPU/frame"
	case "latency_p999_ms":
		return "p99.9 latency"
	}
	return k
}

func formatMetric(k string, v float64) string {
	switch {
	case strings.HasSuffix(k, "_per_sec"):
		return FormatRate(v)
	case strings.HasSuffix(k, "_ms"):
		return FormatMillis(v)
	case strings.Contains(k, "_us_"):
		return fmt.Sprintf("%.2fµs", v)
	}
	return fmt.Sprintf("%g", v)
}

// FormatRate formats a rate per second compactly: 950, 12.3k, 1.25M.
func FormatRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// FormatMillis formats a duration given in milliseconds with a unit that
// suits it: 850µs, 12.3ms, 1.54s.
func FormatMillis(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	case v >= 1:
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.0fµs", v*1000)
}
