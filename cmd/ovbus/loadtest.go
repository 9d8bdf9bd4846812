package main

import (
	"io"

	"github.com/ovbus/ovbus/bench"
)

func init() {
	register("loadtest", "echo load test of a WebSocket server: msg/s, MB/s, RTT, CPU", runLoadtest)
}

const loadtestSynopsis = `ovbus loadtest [flags] [NAME=URL ...]

An echo load test in the manner of ws-tool's load_test, for any WebSocket echo
server (ours: go run ./examples/echoserver): C connections each send messages
of P bytes, COUNT per connection or for --duration, keeping --window messages
in flight, and time every echo. Reported: echoes/s, MB/s (echoed payload, one
direction), RTT min/p50/p95/p99/max, and the CPU time of this client and of the
server process per echo. Echoes are checked (length and sequence number).

Examples:
  ovbus loadtest --url ws://127.0.0.1:9001/ --conns 100 --payload 1k --duration 5s
  ovbus loadtest --preset std --repeat 3 --compare ovbus=ws://127.0.0.1:9001/ gorilla=ws://127.0.0.1:9002/core`

func runLoadtest(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("loadtest", loadtestSynopsis, benchExitHelp, stderr)
	var o benchOutput
	addBenchOutput(fs, &o, "ws://127.0.0.1:9001/")
	conns := fs.Int("conns", bench.DefaultLoadConns, "connections (C)")
	payload := fs.String("payload", "1024", "message size in `BYTES` (k and m suffixes: KiB, MiB)")
	count := fs.Int("count", bench.DefaultLoadCount, "messages per connection (unless --duration)")
	duration := fs.Duration("duration", 0, "send for this long instead of --count messages")
	window := fs.Int("window", bench.DefaultLoadWindow, "messages in flight per connection (1: wait for each echo)")
	text := fs.Bool("text", false, "send text messages instead of binary ones")
	warmup := fs.Int("warmup", bench.DefaultLoadWarmup, "untimed echoes per connection before the timed phase (0: none)")
	timeout := fs.Duration("timeout", bench.DefaultTimeout, "a connection that waits longer than this for an echo ends")
	preset := fs.String("preset", "", "scenarios instead of --conns/--payload/--window: std (1x64, 10x1k, 100x1k, 10x64k, 10x1k w64), echo (1x300, 1x300 w64, 1x1m, 100x1k w16) or a `LIST` like 10x1k,100x64w8")
	conc := fs.Int("connect-concurrency", bench.DefaultConnectConcurrency, "connections opened at once")
	targets, code, done := o.parse(fs, args, stdout, stderr, bench.KindLoad)
	if done {
		return code
	}
	usageErr := func(format string, a ...any) int { return usageError(fs, stderr, format, a...) }
	p, err := bench.ParseSize(*payload)
	if err != nil || p <= 0 {
		return usageErr("--payload %q: want a positive size like 1024, 1k or 1m", *payload)
	}
	scenarios := []bench.LoadScenario{{Conns: *conns, Payload: p, Window: *window}}
	if *preset != "" {
		if scenarios, err = bench.ParseLoadScenarios(*preset); err != nil {
			return usageErr("--preset: %v", err)
		}
	}
	switch {
	case *conns <= 0 || *count <= 0 || *window <= 0:
		return usageErr("--conns, --count and --window must be positive")
	case *duration < 0 || *timeout <= 0 || *warmup < 0:
		return usageErr("--duration and --warmup must not be negative, --timeout must be positive")
	}
	w := *warmup
	if w == 0 {
		w = -1 // LoadConfig: negative is none
	}

	suite := bench.LoadSuite{
		Base: bench.LoadConfig{
			Count: *count, Duration: *duration, Text: *text, Timeout: *timeout, Warmup: w,
			Measure: bench.Measure{ConnectConcurrency: *conc, Dial: o.dialOptions()},
		},
		Scenarios: scenarios,
		Targets:   targets,
		Repeat:    o.repeat,
		Pause:     o.pause,
		Progress:  o.progress(stderr, len(scenarios)*o.repeat*len(targets)),
		Log:       o.log(stderr),
	}
	return o.run(fs, suite.Run, args, stdout, stderr)
}
