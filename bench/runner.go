package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// DefaultPause is the pause between two runs of a suite.
const DefaultPause = 300 * time.Millisecond

// FanoutSuite runs fan-out scenarios against one or more targets, repeated
// and interleaved (see Schedule).
type FanoutSuite struct {
	// Base is the configuration of every run; its URL, Clients, Messages
	// and ServerPID are set per run from the scenario and the target.
	Base      FanoutConfig
	Scenarios []Scenario
	Targets   []Target
	Repeat    int
	// Pause between runs (0: DefaultPause).
	Pause time.Duration
	// Progress, when not nil, shows the runs on a terminal.
	Progress *Progress
	// Log, when not nil, gets one line per run.
	Log io.Writer
}

// Run runs the suite and returns its finished report. Runs that fail are
// recorded in the report; the error is only ctx's.
func (s FanoutSuite) Run(ctx context.Context) (*Report, error) {
	base := s.Base.withDefaults()
	repeat := max(s.Repeat, 1)
	rep := NewReport(KindFanout, repeat, map[string]any{
		"size":         max(base.Size, minMessageSize),
		"warmup":       base.Warmup,
		"timeout":      base.Timeout.String(),
		"rate":         base.Rate,
		"no_greeting":  base.NoGreeting,
		"drain_sender": base.DrainSender,
	})
	opts := suiteOptions{targets: s.Targets, repeat: repeat, pause: s.Pause, progress: s.Progress, log: s.Log}
	err := runSuite(ctx, rep, opts, s.Scenarios, func(sc Scenario, t Target, progress func(done, expected int64)) (map[string]float64, string, error) {
		cfg := base
		cfg.URL, cfg.Clients, cfg.Messages, cfg.ServerPID, cfg.ServerPIDs = t.URL, sc.Clients, sc.Messages, max(t.PID, 0), t.PIDs
		cfg.Progress = progress
		res, err := RunFanout(ctx, cfg)
		if err != nil {
			return nil, "", err
		}
		return FanoutMetrics(res), fmt.Sprintf("%s deliveries/s, p99 %s, dropped %d, errors %d",
			FormatRate(res.DeliveriesPerSec), FormatMillis(ms(res.Latency.P99)), res.Dropped, res.ConnErrors), nil
	})
	return rep, err
}

// SteadySuite runs steady-traffic scenarios against one or more targets,
// repeated and interleaved.
type SteadySuite struct {
	// Base is the configuration of every run; URL, Clients, Rate,
	// Mix.BinaryShare and ServerPID are set per run from the scenario and
	// the target.
	Base      SteadyConfig
	Scenarios []SteadyScenario
	Targets   []Target
	Repeat    int
	Pause     time.Duration
	Progress  *Progress
	Log       io.Writer
}

// Run runs the suite and returns its finished report.
func (s SteadySuite) Run(ctx context.Context) (*Report, error) {
	base := s.Base.withDefaults()
	repeat := max(s.Repeat, 1)
	rep := NewReport(KindSteady, repeat, map[string]any{
		"duration":    base.Duration.String(),
		"json_size":   fmt.Sprintf("%d-%d", base.Mix.JSONMin, base.Mix.JSONMax),
		"binary_size": fmt.Sprintf("%d-%d", base.Mix.BinaryMin, base.Mix.BinaryMax),
		"seed":        base.Seed,
		"timeout":     base.Timeout.String(),
		"no_greeting": base.NoGreeting,
	})
	opts := suiteOptions{targets: s.Targets, repeat: repeat, pause: s.Pause, progress: s.Progress, log: s.Log}
	err := runSuite(ctx, rep, opts, s.Scenarios, func(sc SteadyScenario, t Target, progress func(done, expected int64)) (map[string]float64, string, error) {
		cfg := base
		cfg.URL, cfg.Clients, cfg.Rate, cfg.Mix.BinaryShare = t.URL, sc.Clients, sc.Rate, sc.BinaryShare
		cfg.ServerPID, cfg.ServerPIDs = max(t.PID, 0), t.PIDs
		cfg.Progress = progress
		res, err := RunSteady(ctx, cfg)
		if err != nil {
			return nil, "", err
		}
		rep.SeriesFor(sc.String(), t).pool(res)
		m := SteadyMetrics(res)
		return m, fmt.Sprintf("%s deliveries/s, p99 %s, p99.9 %s, lost %d, server %.1fµs/frame",
			FormatRate(res.DeliveriesPerSec), FormatMillis(m["latency_p99_ms"]), FormatMillis(m["latency_p999_ms"]),
			res.Lost, m["server_cpu_us_per_frame"]), nil
	})
	return rep, err
}

// LoadSuite runs echo load scenarios against one or more targets, repeated
// and interleaved.
type LoadSuite struct {
	// Base is the configuration of every run; URL, Conns, Payload, Window
	// and ServerPID are set per run.
	Base      LoadConfig
	Scenarios []LoadScenario
	Targets   []Target
	Repeat    int
	Pause     time.Duration
	Progress  *Progress
	Log       io.Writer
}

// Run runs the suite and returns its finished report.
func (s LoadSuite) Run(ctx context.Context) (*Report, error) {
	base := s.Base.withDefaults()
	repeat := max(s.Repeat, 1)
	settings := map[string]any{"text": base.Text, "timeout": base.Timeout.String()}
	if s.Base.Duration > 0 {
		settings["duration"] = base.Duration.String()
	} else {
		settings["count"] = base.Count
	}
	rep := NewReport(KindLoad, repeat, settings)
	opts := suiteOptions{targets: s.Targets, repeat: repeat, pause: s.Pause, progress: s.Progress, log: s.Log}
	err := runSuite(ctx, rep, opts, s.Scenarios, func(sc LoadScenario, t Target, progress func(done, expected int64)) (map[string]float64, string, error) {
		cfg := base
		cfg.Duration = s.Base.Duration
		cfg.URL, cfg.Conns, cfg.Payload, cfg.Window, cfg.ServerPID = t.URL, sc.Conns, sc.Payload, sc.Window, max(t.PID, 0)
		cfg.Progress = progress
		res, err := RunLoad(ctx, cfg)
		if err != nil {
			return nil, "", err
		}
		return LoadMetrics(res), fmt.Sprintf("%s msg/s, RTT p99 %s, errors %d",
			FormatRate(res.MsgPerSec), FormatMillis(ms(res.RTT.P99)), res.ConnErrors+res.Timeouts), nil
	})
	return rep, err
}

// suiteOptions are the settings FanoutSuite and LoadSuite share: the
// targets, how often every run is repeated, the pause between runs, and
// where the progress and the log go.
type suiteOptions struct {
	targets  []Target
	repeat   int // at least 1
	pause    time.Duration
	progress *Progress
	log      io.Writer
}

// runSuite runs every scenario against every target, repeated and
// interleaved (see Schedule), and records the runs in rep, which it
// finishes. run does one run of scenario sc against t, passing progress on
// to the runner; it returns the run's metrics and a summary for the log,
// or the error that kept the run from taking place. The error of runSuite
// is only ctx's.
func runSuite[S fmt.Stringer](ctx context.Context, rep *Report, opts suiteOptions, scenarios []S,
	run func(sc S, t Target, progress func(done, expected int64)) (map[string]float64, string, error)) error {
	targets := resolvePIDs(opts.targets)
	steps := Schedule(len(scenarios), opts.repeat, len(targets))
	pause := opts.pause
	if pause == 0 {
		pause = DefaultPause
	}
	// Create the series in table order before running interleaved.
	for _, sc := range scenarios {
		for _, t := range targets {
			rep.SeriesFor(sc.String(), t)
		}
	}
	var progress func(done, expected int64)
	if opts.progress != nil {
		progress = opts.progress.Update
	}
	logf := func(format string, a ...any) {
		if opts.log != nil {
			opts.progress.Done()
			fmt.Fprintf(opts.log, format, a...)
		}
	}
	err := RunSchedule(ctx, steps, pause, func(i int, st Step) error {
		sc, t := scenarios[st.Scenario], targets[st.Target]
		label := fmt.Sprintf("%s %s run %d/%d", t.Name, sc, st.Repeat+1, opts.repeat)
		opts.progress.Begin(i, label)
		metrics, summary, err := run(sc, t, progress)
		series := rep.SeriesFor(sc.String(), t)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			series.Fail(err)
			logf("%s: failed: %v\n", label, err)
			return nil
		}
		series.Add(metrics)
		logf("%s: %s\n", label, summary)
		return nil
	})
	opts.progress.Done()
	rep.Finish()
	return err
}

// resolvePIDs fills in the server pids that are to be looked up from the
// URL's port.
func resolvePIDs(ts []Target) []Target {
	out := make([]Target, len(ts))
	for i, t := range ts {
		if t.PID == 0 {
			urls := strings.Split(t.URL, ",")
			t.PID = ResolvePID(strings.TrimSpace(urls[0]))
			t.PIDs = nil
			for _, u := range urls[1:] {
				if pid := ResolvePID(strings.TrimSpace(u)); pid > 0 {
					t.PIDs = append(t.PIDs, pid)
				}
			}
		}
		out[i] = t
	}
	return out
}
