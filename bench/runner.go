package bench

import (
	"context"
	"fmt"
	"io"
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
	targets := resolvePIDs(s.Targets)
	steps := Schedule(len(s.Scenarios), repeat, len(targets))
	pause := s.Pause
	if pause == 0 {
		pause = DefaultPause
	}
	// Create the series in table order before running interleaved.
	for _, sc := range s.Scenarios {
		for _, t := range targets {
			rep.SeriesFor(sc.String(), t)
		}
	}
	err := RunSchedule(ctx, steps, pause, func(i int, st Step) error {
		sc, t := s.Scenarios[st.Scenario], targets[st.Target]
		cfg := base
		cfg.URL, cfg.Clients, cfg.Messages, cfg.ServerPID = t.URL, sc.Clients, sc.Messages, max(t.PID, 0)
		label := fmt.Sprintf("%s %s run %d/%d", t.Name, sc, st.Repeat+1, repeat)
		s.Progress.Begin(i, label)
		if s.Progress != nil {
			cfg.Progress = s.Progress.Update
		}
		res, err := RunFanout(ctx, cfg)
		series := rep.SeriesFor(sc.String(), t)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			series.Fail(err)
			s.logf("%s: failed: %v\n", label, err)
			return nil
		}
		series.Add(FanoutMetrics(res))
		s.logf("%s: %s deliveries/s, p99 %s, dropped %d, errors %d\n", label,
			FormatRate(res.DeliveriesPerSec), FormatMillis(ms(res.Latency.P99)), res.Dropped, res.ConnErrors)
		return nil
	})
	s.Progress.Done()
	rep.Finish()
	return rep, err
}

func (s FanoutSuite) logf(format string, a ...any) {
	if s.Log != nil {
		s.Progress.Done()
		fmt.Fprintf(s.Log, format, a...)
	}
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
	targets := resolvePIDs(s.Targets)
	steps := Schedule(len(s.Scenarios), repeat, len(targets))
	pause := s.Pause
	if pause == 0 {
		pause = DefaultPause
	}
	for _, sc := range s.Scenarios {
		for _, t := range targets {
			rep.SeriesFor(sc.String(), t)
		}
	}
	err := RunSchedule(ctx, steps, pause, func(i int, st Step) error {
		sc, t := s.Scenarios[st.Scenario], targets[st.Target]
		cfg := base
		cfg.Duration = s.Base.Duration
		cfg.URL, cfg.Conns, cfg.Payload, cfg.Window, cfg.ServerPID = t.URL, sc.Conns, sc.Payload, sc.Window, max(t.PID, 0)
		label := fmt.Sprintf("%s %s run %d/%d", t.Name, sc, st.Repeat+1, repeat)
		s.Progress.Begin(i, label)
		if s.Progress != nil {
			cfg.Progress = s.Progress.Update
		}
		res, err := RunLoad(ctx, cfg)
		series := rep.SeriesFor(sc.String(), t)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			series.Fail(err)
			s.logf("%s: failed: %v\n", label, err)
			return nil
		}
		series.Add(LoadMetrics(res))
		s.logf("%s: %s msg/s, RTT p99 %s, errors %d\n", label,
			FormatRate(res.MsgPerSec), FormatMillis(ms(res.RTT.P99)), res.ConnErrors+res.Timeouts)
		return nil
	})
	s.Progress.Done()
	rep.Finish()
	return rep, err
}

func (s LoadSuite) logf(format string, a ...any) {
	if s.Log != nil {
		s.Progress.Done()
		fmt.Fprintf(s.Log, format, a...)
	}
}

// resolvePIDs fills in the server pids that are to be looked up from the
// URL's port.
func resolvePIDs(ts []Target) []Target {
	out := make([]Target, len(ts))
	for i, t := range ts {
		if t.PID == 0 {
			t.PID = ResolvePID(t.URL)
		}
		out[i] = t
	}
	return out
}
