package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/ovbus/ovbus/bench"
)

// steadyFlags are bench's flags of the steady-traffic benchmark (--steady,
// or a steady --preset): N clients that all send and all receive, at a total
// rate, for a duration, with a mix of JSON and binary frames.
type steadyFlags struct {
	on         bool
	duration   time.Duration
	share      float64
	jsonSize   string
	binarySize string
	seed       uint64
}

// steadyOnlyFlags are the flags that mean nothing to the fan-out benchmark.
var steadyOnlyFlags = []string{"steady", "duration", "binary-share", "json-size", "binary-size", "seed"}

func addSteadyFlags(fs *flag.FlagSet, f *steadyFlags) {
	fs.BoolVar(&f.on, "steady", false, "steady traffic instead of the fan-out burst: --clients clients that all send (each on its own schedule) and all receive, "+
		"--rate frames/s in total, for --duration; latency from each frame's scheduled send time (a steady --preset implies it)")
	fs.DurationVar(&f.duration, "duration", bench.DefaultSteadyDuration, "with --steady: how long the clients send")
	fs.Float64Var(&f.share, "binary-share", bench.DefaultSteadyBinaryShare, "with --steady and --clients: the `SHARE` of binary frames (audio), 0 to 1")
	fs.StringVar(&f.jsonSize, "json-size", bench.FormatSizeRange(bench.DefaultSteadyJSONMin, bench.DefaultSteadyJSONMax),
		"with --steady: sizes of the JSON frames, `MIN-MAX` bytes (k and m suffixes: KiB, MiB), uniform")
	fs.StringVar(&f.binarySize, "binary-size", bench.FormatSizeRange(bench.DefaultSteadyBinaryMin, bench.DefaultSteadyBinaryMax),
		"with --steady: sizes of the binary frames, `MIN-MAX`, uniform")
	fs.Uint64Var(&f.seed, "seed", bench.DefaultSteadySeed, "with --steady: picks every frame's size and kind; the same seed sends the same frames")
}

// suite checks the steady flags and returns the suite they describe, without
// its targets.
func (f *steadyFlags) suite(preset string, clients int, rate float64, timeout time.Duration, noGreeting bool, conc int, o *benchOutput) (bench.SteadySuite, error) {
	var mix bench.SizeMix
	var err error
	if mix.JSONMin, mix.JSONMax, err = bench.ParseSizeRange(f.jsonSize); err != nil {
		return bench.SteadySuite{}, fmt.Errorf("--json-size: %v", err)
	}
	if mix.BinaryMin, mix.BinaryMax, err = bench.ParseSizeRange(f.binarySize); err != nil {
		return bench.SteadySuite{}, fmt.Errorf("--binary-size: %v", err)
	}
	if rate == 0 {
		rate = bench.DefaultSteadyRate
	}
	scenarios := []bench.SteadyScenario{{Clients: clients, Rate: rate, BinaryShare: f.share}}
	if preset != "" {
		if scenarios, err = bench.ParseSteadyScenarios(preset); err != nil {
			return bench.SteadySuite{}, fmt.Errorf("--preset: %v", err)
		}
	}
	for _, sc := range append(scenarios, bench.SteadyScenario{BinaryShare: f.share}) {
		mix.BinaryShare = max(mix.BinaryShare, sc.BinaryShare) // Check the binary sizes if any scenario sends binary
	}
	switch {
	case clients <= 0 || rate < 0 || f.duration <= 0 || timeout <= 0:
		return bench.SteadySuite{}, fmt.Errorf("--clients, --duration and --timeout must be positive, --rate not negative")
	case f.seed == 0:
		return bench.SteadySuite{}, fmt.Errorf("--seed must not be 0")
	}
	if err := mix.Check(); err != nil {
		return bench.SteadySuite{}, fmt.Errorf("--json-size, --binary-size, --binary-share: %v", err)
	}
	return bench.SteadySuite{
		Base: bench.SteadyConfig{
			Duration: f.duration, Mix: mix, Seed: f.seed, Timeout: timeout,
			NoGreeting: noGreeting, Measure: bench.Measure{ConnectConcurrency: conc, Dial: o.dialOptions()},
		},
		Scenarios: scenarios,
		Repeat:    o.repeat,
		Pause:     o.pause,
	}, nil
}
