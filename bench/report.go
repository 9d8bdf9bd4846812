package bench

import (
	"encoding/json"
	"io"
	"slices"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
)

// Report kinds.
const (
	KindFanout = "fanout"
	KindLoad   = "loadtest"
	KindSteady = "steady"
)

// Report is what a bench or loadtest invocation prints: every run of every
// scenario and target, their summaries over repeats, and the headline ratios
// of the first target (the subject) to the best other one. It is also the
// --json output.
type Report struct {
	Kind    string  `json:"kind"`
	Date    string  `json:"date"`
	Machine Machine `json:"machine"`
	// Command is the command line that made the report, subcommand included.
	Command string `json:"command,omitempty"`
	// Commit is the ovbus commit of the binary that ran it ("+dirty": built from a tree with
	// uncommitted changes; "unknown": built without VCS information, as go run does).
	Commit   string         `json:"commit,omitempty"`
	Settings map[string]any `json:"settings"`
	Repeat   int            `json:"repeat"`
	// Series holds one entry per scenario and target, in scenario order
	// and, within a scenario, target order.
	Series   []*Series  `json:"results"`
	Headline []Headline `json:"headline,omitempty"`
	Notes    []string   `json:"notes,omitempty"`
}

// Series is every run of one scenario against one target.
type Series struct {
	Scenario  string `json:"scenario"`
	Bus       string `json:"bus"`
	URL       string `json:"url"`
	ServerPID int    `json:"server_pid,omitempty"`
	// Summary has, for every metric, its median, minimum, maximum and sum
	// over the runs that took place.
	Summary map[string]Spread `json:"summary"`
	// Runs holds every run's metrics (see FanoutMetrics and LoadMetrics).
	Runs []map[string]float64 `json:"runs"`
	// Failed counts runs that could not take place at all (Errors says
	// why).
	Failed int      `json:"failed_runs"`
	Errors []string `json:"errors,omitempty"`
	// Pooled has, for steady traffic repeated, the latency over every
	// delivery of every run together (the runs' histograms merged,
	// PooledMetrics): a run's own p99.9 rests on its slowest thousandth,
	// which a few stalls of a shared machine move by a factor of several
	// from run to run; pooled, it rests on all the runs' deliveries.
	Pooled map[string]float64 `json:"pooled,omitempty"`

	latency, fromSend *stats.Histogram // what Pooled is made of
}

// Spread summarises one metric over repeated runs.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Sum    float64 `json:"sum"`
	N      int     `json:"n"`
}

// NewReport starts a report of the given kind.
func NewReport(kind string, repeat int, settings map[string]any) *Report {
	return &Report{
		Kind:     kind,
		Date:     time.Now().Format(time.RFC3339),
		Machine:  ThisMachine(),
		Settings: settings,
		Repeat:   repeat,
	}
}

// SeriesFor returns the series of scenario × target, creating it.
func (r *Report) SeriesFor(scenario string, t Target) *Series {
	for _, s := range r.Series {
		if s.Scenario == scenario && s.Bus == t.Name {
			return s
		}
	}
	s := &Series{Scenario: scenario, Bus: t.Name, URL: t.URL, ServerPID: max(t.PID, 0)}
	r.Series = append(r.Series, s)
	return s
}

// Add records one run's metrics.
func (s *Series) Add(m map[string]float64) { s.Runs = append(s.Runs, m) }

// pool adds a steady run's deliveries to the series' pooled latency.
func (s *Series) pool(r *SteadyResult) {
	if s.latency == nil {
		s.latency, s.fromSend = stats.NewHistogram(), stats.NewHistogram()
	}
	s.latency.Merge(r.Latency)
	s.fromSend.Merge(r.FromSend)
}

// Fail records a run that could not take place.
func (s *Series) Fail(err error) {
	s.Failed++
	msg := err.Error()
	if !slices.Contains(s.Errors, msg) && len(s.Errors) < 5 {
		s.Errors = append(s.Errors, msg)
	}
}

// FanoutMetrics flattens a fan-out result into the report's metrics:
// latencies in milliseconds, CPU time per delivery in microseconds.
func FanoutMetrics(r *FanoutResult) map[string]float64 {
	m := map[string]float64{
		"clients":            float64(r.Clients),
		"messages":           float64(r.Messages),
		"size":               float64(r.Size),
		"rate":               r.Rate,
		"expected":           float64(r.Expected),
		"delivered":          float64(r.Delivered),
		"dropped":            float64(r.Dropped),
		"out_of_order":       float64(r.OutOfOrder),
		"duplicates":         float64(r.Duplicates),
		"conn_errors":        float64(r.ConnErrors),
		"timeouts":           float64(r.Timeouts),
		"warmup_ms":          ms(r.WarmupWait),
		"not_warm":           float64(r.NotWarm),
		"elapsed_ms":         ms(r.Elapsed),
		"send_ms":            ms(r.SendTime),
		"deliveries_per_sec": r.DeliveriesPerSec,
		"latency_min_ms":     ms(r.Latency.Min),
		"latency_p50_ms":     ms(r.Latency.Median),
		"latency_p95_ms":     ms(r.Latency.P95),
		"latency_p99_ms":     ms(r.Latency.P99),
		"latency_max_ms":     ms(r.Latency.Max),
	}
	r.addMetrics(m, r.Delivered)
	return m
}

// SteadyMetrics flattens a steady result into the report's metrics:
// latencies in milliseconds (percentiles from the run's histogram), CPU time
// per frame sent and per frame delivered in microseconds.
func SteadyMetrics(r *SteadyResult) map[string]float64 {
	m := map[string]float64{
		"clients":            float64(r.Clients),
		"rate":               r.Rate,
		"binary_share":       r.BinaryShare,
		"duration_s":         r.Duration.Seconds(),
		"planned":            float64(r.Planned),
		"sent":               float64(r.Sent),
		"sent_binary":        float64(r.SentBinary),
		"sent_mb":            float64(r.SentBytes) / 1e6,
		"expected":           float64(r.Expected),
		"delivered":          float64(r.Delivered),
		"lost":               float64(r.Lost),
		"out_of_order":       float64(r.OutOfOrder),
		"duplicates":         float64(r.Duplicates),
		"unexpected":         float64(r.Unexpected),
		"conn_errors":        float64(r.ConnErrors),
		"warmup_ms":          ms(r.WarmupWait),
		"not_warm":           float64(r.NotWarm),
		"elapsed_ms":         ms(r.Elapsed),
		"deliveries_per_sec": r.DeliveriesPerSec,
		"latency_min_ms":     ms(r.Latency.Min()),
		"latency_mean_ms":    ms(r.Latency.Mean()),
		"latency_p50_ms":     ms(r.Latency.Percentile(0.50)),
		"latency_p90_ms":     ms(r.Latency.Percentile(0.90)),
		"latency_p99_ms":     ms(r.Latency.Percentile(0.99)),
		"latency_p999_ms":    ms(r.Latency.Percentile(0.999)),
		"latency_max_ms":     ms(r.Latency.Max()),
		"send_lag_p99_ms":    ms(r.SendLag.Percentile(0.99)),
		"send_lag_max_ms":    ms(r.SendLag.Max()),
		"from_send_p99_ms":   ms(r.FromSend.Percentile(0.99)),
		"from_send_p999_ms":  ms(r.FromSend.Percentile(0.999)),
	}
	r.addMetrics(m, r.Delivered)
	if r.ServerCPUOK {
		m["server_cpu_us_per_frame"] = us(r.ServerCPUPerFrame())
	}
	return m
}

// PooledMetrics are the figures of the latency over several runs' deliveries
// together (Series.Pooled), from their merged histograms: the same keys as
// SteadyMetrics, plus p99.99.
func PooledMetrics(latency, fromSend *stats.Histogram) map[string]float64 {
	return map[string]float64{
		"delivered":         float64(latency.Count()),
		"latency_p99_ms":    ms(latency.Percentile(0.99)),
		"latency_p999_ms":   ms(latency.Percentile(0.999)),
		"latency_p9999_ms":  ms(latency.Percentile(0.9999)),
		"latency_max_ms":    ms(latency.Max()),
		"from_send_p99_ms":  ms(fromSend.Percentile(0.99)),
		"from_send_p999_ms": ms(fromSend.Percentile(0.999)),
	}
}

// LoadMetrics flattens an echo load result into the report's metrics.
func LoadMetrics(r *LoadResult) map[string]float64 {
	m := map[string]float64{
		"conns":                 float64(r.Conns),
		"payload":               float64(r.Payload),
		"window":                float64(r.Window),
		"count":                 float64(r.Count),
		"duration_s":            r.Duration.Seconds(),
		"sent":                  float64(r.Sent),
		"received":              float64(r.Received),
		"mismatched":            float64(r.Mismatched),
		"conn_errors":           float64(r.ConnErrors),
		"timeouts":              float64(r.Timeouts),
		"elapsed_ms":            ms(r.Elapsed),
		"msg_per_sec":           r.MsgPerSec,
		"mb_per_sec":            r.MBPerSec,
		"rtt_min_ms":            ms(r.RTT.Min),
		"rtt_p50_ms":            ms(r.RTT.Median),
		"rtt_p95_ms":            ms(r.RTT.P95),
		"rtt_p99_ms":            ms(r.RTT.P99),
		"rtt_max_ms":            ms(r.RTT.Max),
		"client_cpu_ms":         ms(r.ClientCPU),
		"client_cpu_cores":      r.ClientCores,
		"client_cpu_us_per_msg": us(r.ClientCPUPerMessage()),
		"client_bound":          b2f(r.ClientBound),
	}
	if r.ServerCPUOK {
		m["server_cpu_ms"] = ms(r.ServerCPU)
		m["server_cpu_us_per_msg"] = us(r.ServerCPUPerMessage())
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Finish computes the summaries, the headline and the notes.
func (r *Report) Finish() {
	for _, s := range r.Series {
		s.Summary = summarize(s.Runs)
		if s.latency != nil && len(s.Runs) > 1 {
			s.Pooled = PooledMetrics(s.latency, s.fromSend)
		}
	}
	r.Headline = r.headline()
	r.Notes = r.notes()
}

func summarize(runs []map[string]float64) map[string]Spread {
	keys := map[string]bool{}
	for _, m := range runs {
		for k := range m {
			keys[k] = true
		}
	}
	out := make(map[string]Spread, len(keys))
	for k := range keys {
		var xs []float64
		sum := 0.0
		for _, m := range runs {
			if v, ok := m[k]; ok {
				xs = append(xs, v)
				sum += v
			}
		}
		sp := stats.SummarizeRepeats(xs)
		out[k] = Spread{Median: sp.Median, Min: sp.Min, Max: sp.Max, Sum: sum, N: sp.N}
	}
	return out
}

// Scenarios returns the scenario names in order of first appearance.
func (r *Report) Scenarios() []string {
	return r.distinct(func(s *Series) string { return s.Scenario })
}

// Buses returns the target names in order of first appearance.
func (r *Report) Buses() []string {
	return r.distinct(func(s *Series) string { return s.Bus })
}

// distinct returns the values of field over the series, in order of first
// appearance.
func (r *Report) distinct(field func(*Series) string) []string {
	var out []string
	for _, s := range r.Series {
		if v := field(s); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// lossMetrics are the metrics that count what a run lost: messages or
// frames that never arrived, failed connections, wrong echoes, receivers
// that gave up waiting.
var lossMetrics = []string{"dropped", "lost", "mismatched", "conn_errors", "timeouts"}

// Lossy reports whether any run of the series lost something (lossMetrics).
func (s *Series) Lossy() bool {
	for _, k := range lossMetrics {
		if sp, ok := s.Summary[k]; ok && sp.Sum > 0 {
			return true
		}
	}
	return false
}

// valid reports whether a series is fit to be compared: it delivered
// everything in every run. A peer that dropped messages is not the "best"
// on throughput or latency, whatever its figures.
func (s *Series) valid() bool { return len(s.Runs) > 0 && !s.Lossy() }

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
