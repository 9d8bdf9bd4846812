package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ovbus/ovbus/bench"
	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

func init() {
	register("bench", "the OVOS fan-out benchmark: deliveries/s, latency, CPU; compare buses", runBench)
}

const benchSynopsis = `ovbus bench [flags] [NAME=URL ...]

The fan-out benchmark of the OVOS message bus (ovos-messagebus's benchmark, with
a client fast enough to measure a fast bus): M subscribers, then one sender,
connect and take their greeting; after W warm-up messages the sender sends N
messages back to back (or at --rate), each carrying its send time and a
sequence number; every subscriber records receive − send. Reported per run:
deliveries/s = (M·N − dropped) ÷ (first send → last delivery), latency
min/p50/p95/p99/max, dropped, connection errors, out-of-order deliveries, and
the CPU time of this client and of the bus process (--server-pid, or found from
the URL's port) per delivery.

Compare buses with --compare NAME=URL (repeatable, or as arguments): the runs
are interleaved A B A B so that drift of the machine hits every bus alike, and
the first one is the subject of the headline ratios.

A URL may list the nodes of one clustered bus, comma-separated: the sender
connects to the first node, the subscribers to each node in turn, and the CPU
time of every node's process is added up.

--steady measures the bus as an OVOS device uses it: --clients clients that
all send and all receive (their own frames too), --rate frames/s in total,
spread evenly, each client on its own schedule, for --duration. The frames are
OVOS-like JSON of --json-size bytes and a --binary-share of binary frames
(audio) of --binary-size. Latency runs from each frame's scheduled send time,
so a bus (or a client) that falls behind is charged for the wait (no
coordinated omission). Reported: latency p50/p90/p99/p99.9/max from a
log-linear histogram, lost, reordered (per sender, on every client) and
duplicated frames, deliveries/s, and the bus's CPU time per frame and per
delivery; with --repeat, also the tail over every delivery of all the runs
together (pooled: p99 to p99.99), which one run's few slowest deliveries
cannot give. --preset steady runs the three workloads of an OVOS device
(steady20, steady20-json, steady10).

Without --url or NAME=URL, bench starts an ovbus of its own in this process, on a
free loopback port, and measures that: it never floods a bus it was not pointed
at (the OVOS bus on 127.0.0.1:8181 is a live one).

Examples:
  ovbus bench --clients 50 --messages 2000
  ovbus bench --url ws://127.0.0.1:8181/core --clients 50 --messages 2000
  ovbus bench --compare one=ws://127.0.0.1:8181/core three=ws://127.0.0.1:8281/core,ws://127.0.0.1:8282/core,ws://127.0.0.1:8283/core
  ovbus bench --preset seeds --repeat 3 --compare ovbus=ws://127.0.0.1:8181/core tornado=ws://127.0.0.1:8182/core
  ovbus bench --preset 5x200,1000x100 --json > out.json
  ovbus bench --steady --clients 20 --rate 2000 --duration 30s --binary-share 0.01 --url ws://127.0.0.1:8181/core
  ovbus bench --preset steady --duration 20s --repeat 3 ovbus=ws://127.0.0.1:8181/core uws=ws://127.0.0.1:8182/core`

const benchExitHelp = `
Exit status: 0 done, nothing lost; 1 done, but messages were dropped or connections failed;
2 bad usage; 3 no run could take place (cannot connect).
`

// benchTargets is the repeatable --compare flag.
type benchTargets []bench.Target

func (l *benchTargets) String() string {
	var s []string
	for _, t := range *l {
		s = append(s, t.Name+"="+t.URL)
	}
	return strings.Join(s, " ")
}

func (l *benchTargets) Set(v string) error {
	t, err := bench.ParseTarget(v)
	if err != nil {
		return err
	}
	*l = append(*l, t)
	return nil
}

// benchOutput are the report options shared by bench and loadtest.
type benchOutput struct {
	json      bool
	format    string
	saveJSON  string
	saveMD    string
	plot      string
	verbose   bool
	insecure  bool
	from      string
	repeat    int
	pause     time.Duration
	serverPID int
	compare   benchTargets
	url       string
	name      string
}

func addBenchOutput(fs *flag.FlagSet, o *benchOutput, defaultURL string) {
	urlHelp := "`URL` of the server under test (when --compare is not given)"
	if defaultURL == "" {
		urlHelp += "; without one, bench measures an ovbus it starts in this process on a free port, never a bus it was not pointed at"
	}
	fs.StringVar(&o.url, "url", defaultURL, urlHelp)
	fs.StringVar(&o.name, "name", "ovbus", "`NAME` of the --url server in the report")
	fs.Var(&o.compare, "compare", "`NAME=URL` of a server to compare; repeat it (or give more NAME=URL arguments); the first is the subject of the headline")
	fs.IntVar(&o.repeat, "repeat", 1, "runs of every scenario and server; the report shows median, min and max")
	fs.DurationVar(&o.pause, "pause", bench.DefaultPause, "pause between runs, for the servers to settle")
	fs.IntVar(&o.serverPID, "server-pid", 0, "`PID` of the server process whose CPU time is measured (with --url); 0 finds it from the URL's port, -1 measures none")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON on stdout, nothing else (same as --format json)")
	fs.StringVar(&o.format, "format", "text", "report format on stdout: text, markdown or json")
	fs.StringVar(&o.saveJSON, "save-json", "", "also write the JSON report to `FILE`")
	fs.StringVar(&o.saveMD, "save-md", "", "also write the markdown table to `FILE`")
	fs.StringVar(&o.plot, "plot", "", "write an SVG chart of throughput and latency percentiles per server to `FILE` (named .svg)")
	fs.BoolVar(&o.verbose, "verbose", false, "print one line per run on stderr")
	fs.BoolVar(&o.insecure, "insecure", false, "wss:// without verifying the server's certificate")
	fs.StringVar(&o.from, "from", "", "run nothing: print (and --plot, --save-md) the JSON report saved in `FILE`")
}

// parse parses the arguments of bench or loadtest (kinds are the reports it makes)
// and checks the options they share. It returns the servers to measure, or
// done and the exit code when there is no more to do: -h, a usage error, or
// a report replayed --from a file.
func (o *benchOutput) parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, kinds ...string) (targets []bench.Target, code int, done bool) {
	pos, err := parseArgs(fs, args, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, true
		}
		return nil, 2, true
	}
	if err := o.check(); err != nil {
		return nil, usageError(fs, stderr, "%v", err), true
	}
	if o.from != "" {
		return nil, o.replay(stdout, stderr, kinds...), true
	}
	targets, err = o.targets(pos)
	if err != nil {
		return nil, usageError(fs, stderr, "%v", err), true
	}
	return targets, 0, false
}

// targets returns the servers to measure.
func (o *benchOutput) targets(pos []string) ([]bench.Target, error) {
	ts := append(benchTargets(nil), o.compare...)
	for _, p := range pos {
		if err := ts.Set(p); err != nil {
			return nil, err
		}
	}
	if len(ts) == 0 && o.url == "" {
		return nil, nil // bench: measure a bus of its own
	}
	if len(ts) == 0 {
		t, err := bench.ParseTarget(o.url)
		if err != nil {
			return nil, fmt.Errorf("--url: %w", err)
		}
		t.Name = o.name
		t.PID = o.serverPID
		ts = append(ts, t)
	} else if o.serverPID != 0 && len(ts) == 1 {
		ts[0].PID = o.serverPID
	}
	seen := map[string]bool{}
	for _, t := range ts {
		if seen[t.Name] {
			return nil, fmt.Errorf("two servers named %q", t.Name)
		}
		seen[t.Name] = true
	}
	return ts, nil
}

func (o *benchOutput) check() error {
	if o.json {
		o.format = "json"
	}
	switch o.format {
	case "text", "markdown", "md", "json":
	default:
		return fmt.Errorf("--format %q: want text, markdown or json", o.format)
	}
	if o.repeat < 1 {
		return fmt.Errorf("--repeat must be at least 1")
	}
	if ext := strings.ToLower(filepath.Ext(o.plot)); o.plot != "" && ext != ".svg" {
		return fmt.Errorf("--plot %s: the chart is SVG, so the file must be named .svg (for a PNG, convert it: rsvg-convert -o x.png x.svg)", o.plot)
	}
	return nil
}

// dialOptions returns the options of every connection: nil means the
// runner's defaults.
func (o *benchOutput) dialOptions() *ws.DialOptions {
	if !o.insecure {
		return nil
	}
	return &ws.DialOptions{Proxy: ws.NoProxy, TLSConfig: &tls.Config{InsecureSkipVerify: true}}
}

// progress returns the terminal progress display, or nil.
func (o *benchOutput) progress(stderr io.Writer, runs int) *bench.Progress {
	if o.format == "json" {
		return nil
	}
	return bench.NewProgress(stderr, runs)
}

// log returns where a suite writes one line per run: stderr with
// --verbose, else nowhere (nil).
func (o *benchOutput) log(stderr io.Writer) io.Writer {
	if o.verbose {
		return stderr
	}
	return nil
}

// run runs a suite until it ends or Ctrl-C or SIGTERM stops it (the runs
// in progress stop and the report shows what was measured), then writes the
// report; it returns the exit code.
func (o *benchOutput) run(fs *flag.FlagSet, suite func(context.Context) (*bench.Report, error), args []string, stdout, stderr io.Writer) int {
	ctx, stop := signalContext()
	defer stop()
	rep, err := suite(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v: the report shows the runs so far\n", fs.Name(), err)
	}
	rep.Command = commandLine(fs.Name(), args)
	rep.Commit = buildVCS()
	return o.write(rep, stdout, stderr)
}

// ownBus starts a bus in this process on a free loopback port, for bench without a URL, so that
// it never sends to a bus it was not pointed at (the OVOS bus at 127.0.0.1:8181 is live).
func ownBus(name string) (bench.Target, func(), error) {
	srv, err := bus.New(bus.Options{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return bench.Target{}, nil, err
	}
	if err := srv.Start(); err != nil {
		return bench.Target{}, nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
	return bench.Target{Name: name, URL: "ws://" + srv.Addr().String() + "/core", PID: -1}, stop, nil
}

// commandLine is the command as typed: the program, the subcommand and the arguments, each
// quoted for a POSIX shell when it needs to be.
func commandLine(name string, args []string) string {
	parts := []string{name}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// write prints the report and writes the files; it returns the exit code.
func (o *benchOutput) write(rep *bench.Report, stdout, stderr io.Writer) int {
	var err error
	switch o.format {
	case "json":
		err = rep.WriteJSON(stdout)
	case "markdown", "md":
		err = rep.WriteMarkdown(stdout)
	default:
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	files := []struct {
		name  string
		write func(io.Writer) error
	}{{o.saveJSON, rep.WriteJSON}, {o.saveMD, rep.WriteMarkdown}, {o.plot, rep.WriteSVG}}
	for _, f := range files {
		if f.name == "" {
			continue
		}
		if err := benchWriteFile(f.name, f.write); err != nil {
			fmt.Fprintf(stderr, "ovbus: %v\n", err)
			return 1
		}
	}
	return benchExitStatus(rep)
}

func benchWriteFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}

// replay prints a saved report of one of the kinds; it returns the exit code.
func (o *benchOutput) replay(stdout, stderr io.Writer, kinds ...string) int {
	b, err := os.ReadFile(o.from)
	if err != nil {
		fmt.Fprintf(stderr, "ovbus: %v\n", err)
		return 1
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintf(stderr, "ovbus: %s: %v\n", o.from, err)
		return 1
	}
	if !slices.Contains(kinds, rep.Kind) {
		fmt.Fprintf(stderr, "ovbus: %s is a %q report, not %s\n", o.from, rep.Kind, strings.Join(kinds, " or "))
		return 1
	}
	return o.write(&rep, stdout, stderr)
}

// benchExitStatus is 3 when no run took place, 1 when something was lost, 0
// otherwise.
func benchExitStatus(rep *bench.Report) int {
	runs, lost := 0, false
	for _, s := range rep.Series {
		runs += len(s.Runs)
		if s.Failed > 0 {
			lost = true
		}
		if s.Lossy() {
			lost = true
		}
	}
	switch {
	case runs == 0:
		return 3
	case lost:
		return 1
	}
	return 0
}

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", benchSynopsis, benchExitHelp, stderr)
	var o benchOutput
	addBenchOutput(fs, &o, "")
	clients := fs.Int("clients", bench.DefaultClients, "subscribers (M); with --steady, clients that all send and all receive")
	messages := fs.Int("messages", bench.DefaultMessages, "timed messages sent (N)")
	size := fs.Int("size", bench.DefaultSize, "size of every message in `BYTES` (an OVOS message with a padding field)")
	warmup := fs.Int("warmup", bench.DefaultWarmup, "warm-up messages before the timed phase (0: none)")
	timeout := fs.Duration("timeout", bench.DefaultTimeout, "a subscriber that waits longer than this for a message ends; with --steady, the wait for the last deliveries")
	rate := fs.Float64("rate", 0, "send at this many messages/s (open loop: latency from the scheduled send time); 0 sends back to back; with --steady, frames/s of all clients together (0: 2000)")
	preset := fs.String("preset", "", "scenarios instead of --clients/--messages: seeds (5x200, 20x1000, 50x2000, 100x500, 1000x100) or a `LIST` like 5x200,20x1000; "+
		"steady scenarios (imply --steady): steady (steady20, steady20-json, steady10: 20 clients at 2000/s with 1% binary, the same JSON only, 10 clients at 500/s with 1% binary) or CLIENTS@RATE[:BINARY_SHARE]")
	noGreeting := fs.Bool("no-greeting", false, "the bus sends no greeting on connect")
	drain := fs.Bool("drain-sender", false, "the sender reads (and discards) its own echoes; the upstream sender does not")
	conc := fs.Int("connect-concurrency", bench.DefaultConnectConcurrency, "connections opened at once")
	var sf steadyFlags
	addSteadyFlags(fs, &sf)
	targets, code, done := o.parse(fs, args, stdout, stderr, bench.KindFanout, bench.KindSteady)
	if done {
		return code
	}
	usageErr := func(format string, a ...any) int { return usageError(fs, stderr, format, a...) }
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if sf.on || (*preset != "" && bench.IsSteadyPreset(*preset)) {
		for _, name := range []string{"messages", "size", "warmup", "drain-sender"} {
			if set[name] {
				return usageErr("--%s is for the fan-out benchmark; --steady runs for --duration with --json-size and --binary-size frames", name)
			}
		}
		suite, err := sf.suite(*preset, *clients, *rate, *timeout, *noGreeting, *conc, &o)
		if err != nil {
			return usageErr("%v", err)
		}
		return o.runOn(fs, targets, func(ts []bench.Target) func(context.Context) (*bench.Report, error) {
			suite.Targets = ts
			suite.Progress = o.progress(stderr, len(suite.Scenarios)*o.repeat*len(ts))
			suite.Log = o.log(stderr)
			return suite.Run
		}, args, stdout, stderr)
	}
	for _, name := range steadyOnlyFlags {
		if set[name] {
			return usageErr("--%s is for --steady", name)
		}
	}
	scenarios := []bench.Scenario{{Clients: *clients, Messages: *messages}}
	if *preset != "" {
		var err error
		if scenarios, err = bench.ParseScenarios(*preset); err != nil {
			return usageErr("--preset: %v", err)
		}
	}
	switch {
	case *clients <= 0 || *messages <= 0:
		return usageErr("--clients and --messages must be positive")
	case *size < 0 || *rate < 0 || *timeout <= 0:
		return usageErr("--size and --rate must not be negative, --timeout must be positive")
	case *warmup < 0:
		return usageErr("--warmup must not be negative")
	}
	w := *warmup
	if w == 0 {
		w = -1 // FanoutConfig: negative is none
	}
	suite := bench.FanoutSuite{
		Base: bench.FanoutConfig{
			Size: *size, Warmup: w, Timeout: *timeout, Rate: *rate,
			NoGreeting: *noGreeting, DrainSender: *drain, Measure: bench.Measure{ConnectConcurrency: *conc, Dial: o.dialOptions()},
		},
		Scenarios: scenarios,
		Repeat:    o.repeat,
		Pause:     o.pause,
	}
	return o.runOn(fs, targets, func(ts []bench.Target) func(context.Context) (*bench.Report, error) {
		suite.Targets = ts
		suite.Progress = o.progress(stderr, len(scenarios)*o.repeat*len(ts))
		suite.Log = o.log(stderr)
		return suite.Run
	}, args, stdout, stderr)
}

// runOn runs the suite that suite returns for targets, or, when none was
// given, for an ovbus started in this process, and writes the report; it
// returns the exit code.
func (o *benchOutput) runOn(fs *flag.FlagSet, targets []bench.Target, suite func([]bench.Target) func(context.Context) (*bench.Report, error),
	args []string, stdout, stderr io.Writer) int {
	if len(targets) == 0 {
		t, stop, err := ownBus(o.name)
		if err != nil {
			fmt.Fprintf(stderr, "%s: cannot start a bus to measure: %v\n", fs.Name(), err)
			return 3
		}
		defer stop()
		fmt.Fprintf(stderr, "%s: no --url or NAME=URL given: measuring an ovbus started in this process at %s "+
			"(its CPU time is counted with the client's); give --url to measure another bus\n", fs.Name(), t.URL)
		targets = []bench.Target{t}
	}
	return o.run(fs, suite(targets), args, stdout, stderr)
}
