//go:build linux

// Command attack reproduces attacks on the bus's memory and limits (and a
// slow-consumer case) against a real `ovbus serve` process on 127.0.0.1 and
// measures what each one costs the server: RSS, heap, goroutines, close
// codes, latencies, timings. It changes nothing and asserts nothing; it
// writes figures (JSON) so that a run before a fix and one after can be
// compared. bench/attack.sh runs every scenario and writes the report.
//
//	go run ./bench/attack [-ovbus PATH] [-out FILE] SCENARIO [scenario flags]
//	go run ./bench/attack report [-md FILE] [-json FILE] RESULT.json...
//
// Each scenario starts its own server (or several), with the configuration
// it needs written to a file, is bounded in count and time, and stops every
// process it started. Run one at a time: some of them use most of the
// machine's file descriptors. With the defaults (each scenario's target):
//
//	attack churn        # 200 000 connect/greeting/disconnect cycles, 32 at a time; heap, goroutines, RSS
//	attack bomb         # 100 deflate messages of 26 MiB of zeros (~26 KB each); peak RSS, close codes
//	attack large-idle   # 1 000 connections send 683 KiB each, then idle, vs 1 000 that never sent; plain and deflate
//	attack handshake    # 500 unfinished upgrades with a 1 MB header line; peak RSS, what the server answered
//	attack stalled      # 200 never-reading (then slow-reading) clients, deflate and plain, and a flood; RSS, ovbus_log_bytes, the bound
//	attack fullbus      # 19 000 idle connections; /health and /metrics latency; connection 19 001 vs max_connections
//	attack fdlimit      # the server's file limit lowered to 5 000, then 5 500 clients; what still answers
//	attack slowcut      # max_msg_size 1, max_queue_bytes 2 MiB, paced and unpaced senders; who is cut
//	attack wtimeout     # a client that stops reading: what it sees, how long after write_timeout
//	attack shutdown     # close_frames_on_shutdown and a stalled client: SIGTERM to exit vs shutdown_timeout
//	attack soak -duration 2m   # mixed load (default 30 minutes) in busy and quiet minutes; RSS, live heap every 10 s; messages lost
//
// Every scenario takes -h for its flags (counts, sizes, durations) and
// -timeout; -smoke gives each tiny counts (the package test runs them so).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// scenario is one attack: its flags and its run.
type scenario struct {
	name    string
	doc     string
	target  string // the figure the scenario must meet
	timeout time.Duration
	// setup registers the scenario's flags and returns its run.
	setup func(fs *flag.FlagSet) func(ctx context.Context, e *env, r *result) error
}

var scenarios []*scenario

func register(s *scenario) { scenarios = append(scenarios, s) }

func lookup(name string) *scenario {
	for _, s := range scenarios {
		if s.name == name {
			return s
		}
	}
	return nil
}

// env is what every scenario shares: the binary under test, a work
// directory, the RSS limit, and the servers to stop at the end.
type env struct {
	ovbus    string
	work     string
	rssLimit int64
	log      io.Writer
	// serverNofile, when set, is the RLIMIT_NOFILE set on each server started.
	serverNofile uint64

	mu      sync.Mutex
	servers []*server
}

func (e *env) track(s *server) {
	e.mu.Lock()
	e.servers = append(e.servers, s)
	e.mu.Unlock()
}

// cleanup kills every server still running.
func (e *env) cleanup() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.servers {
		if s.alive() {
			s.kill()
		}
	}
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "attack: "+format+"\n", args...)
}

// result is what one scenario run writes.
type result struct {
	Scenario string                    `json:"scenario"`
	Doc      string                    `json:"doc"`
	Target   string                    `json:"target"`
	Met      *bool                     `json:"met,omitempty"` // the target, when the harness can tell
	Command  string                    `json:"command"`
	Started  time.Time                 `json:"started"`
	Seconds  float64                   `json:"seconds"`
	Load     string                    `json:"load_average"`             // /proc/loadavg at the start
	Ovbus    string                    `json:"ovbus_commit,omitempty"`   // $ATTACK_OVBUS_COMMIT (set by bench/attack.sh)
	Harness  string                    `json:"harness_commit,omitempty"` // $ATTACK_HARNESS_COMMIT
	Configs  map[string]map[string]any `json:"configs"`                  // websocket section of each server, by label
	Figures  []figure                  `json:"figures"`
	Series   map[string][]sample       `json:"series,omitempty"`
	Spans    []span                    `json:"spans,omitempty"` // phases of the series' time, e.g. the soak's quiet ones
	Notes    []string                  `json:"notes,omitempty"`
	Error    string                    `json:"error,omitempty"`
	mu       sync.Mutex
}

// figure is one measured value. Text holds a value that is not a number.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	Text  string  `json:"text,omitempty"`
}

// sample is one point of a time series.
type sample struct {
	T float64 `json:"t"` // seconds since the series began
	V float64 `json:"v"`
}

// span is a phase of a run, in seconds on its series' clock.
type span struct {
	Label string  `json:"label"`
	From  float64 `json:"from"`
	To    float64 `json:"to"`
}

func (r *result) fig(name string, v float64, unit string) {
	r.mu.Lock()
	r.Figures = append(r.Figures, figure{Name: name, Value: v, Unit: unit})
	r.mu.Unlock()
}

func (r *result) mib(name string, bytes int64) { r.fig(name, float64(bytes)/(1<<20), "MiB") }

func (r *result) text(name, s string) {
	r.mu.Lock()
	r.Figures = append(r.Figures, figure{Name: name, Text: s})
	r.mu.Unlock()
}

func (r *result) note(format string, args ...any) {
	r.mu.Lock()
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *result) config(label string, s *server) {
	r.mu.Lock()
	if r.Configs == nil {
		r.Configs = map[string]map[string]any{}
	}
	r.Configs[label] = s.conf
	r.mu.Unlock()
}

func (r *result) met(ok bool) {
	if r.Met != nil && !*r.Met {
		return // one miss is a miss
	}
	r.Met = &ok
}

func (r *result) addSeries(name string, s []sample) {
	r.mu.Lock()
	if r.Series == nil {
		r.Series = map[string][]sample{}
	}
	r.Series[name] = s
	r.mu.Unlock()
}

// countMap renders a map of counts as "a: 3, b: 1", sorted by key.
func countMap(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// smokeArgs are each scenario's flags in -smoke mode (flags given after
// them win). The test runs every scenario with them.
var smokeArgs = map[string][]string{
	"churn":      {"-n", "200", "-settle", "200ms", "-gc-wait", "0"},
	"bomb":       {"-conns", "5"},
	"large-idle": {"-conns", "10", "-size-kib", "64", "-wait", "200ms"},
	"handshake":  {"-conns", "10", "-header-bytes", "100000", "-hold", "500ms"},
	"stalled":    {"-stalled", "5", "-duration", "1s", "-size-kib", "4", "-max-queue-bytes", "33554432", "-variants", "deflate,plain-slow"},
	"fullbus":    {"-conns", "20", "-probes", "3"},
	"slowcut":    {"-messages", "200", "-rates", "400,0"},
	"wtimeout":   {"-flood-mib", "16", "-write-timeout", "1"},
	"shutdown":   {"-shutdown-timeout", "1"},
	"soak":       {"-duration", "6s", "-sample", "500ms", "-slow-life", "2s", "-busy", "2s", "-quiet", "1s"},
	"fdlimit":    {"-server-nofile", "60", "-conns", "80", "-probes", "2"},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: attack [-ovbus PATH] [-out FILE] [-work DIR] [-rss-limit MiB] [-smoke] SCENARIO [flags]")
	fmt.Fprintln(w, "       attack report [-md FILE] [-json FILE] RESULT.json...")
	fmt.Fprintln(w, "\nscenarios (each takes -h for its flags):")
	for _, s := range scenarios {
		fmt.Fprintf(w, "  %-10s %s\n", s.name, s.doc)
	}
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("attack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ovbus := fs.String("ovbus", "ovbus", "the ovbus binary under test")
	out := fs.String("out", "", "write the result JSON here (default: stdout)")
	work := fs.String("work", "", "directory for configurations and server logs (default: a new temporary one)")
	smoke := fs.Bool("smoke", false, "tiny counts, seconds per scenario: checks the harness works, measures nothing worth keeping")
	limit := fs.Int64("rss-limit", 0, "MiB: kill the server beyond this RSS, recording it (default: 70% of MemAvailable)")
	fs.Usage = func() { usage(fs.Output()) }
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		usage(stderr)
		return 2
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "report" {
		return runReport(rest, stdout, stderr)
	}
	sc := lookup(name)
	if sc == nil {
		fmt.Fprintf(stderr, "attack: unknown scenario %q\n", name)
		usage(stderr)
		return 2
	}
	sfs := flag.NewFlagSet("attack "+name, flag.ContinueOnError)
	sfs.SetOutput(stderr)
	timeout := sfs.Duration("timeout", sc.timeout, "stop the scenario after this long (0: only its own bounds)")
	runFn := sc.setup(sfs)
	if *smoke {
		rest = append(append([]string(nil), smokeArgs[name]...), rest...)
	}
	if err := sfs.Parse(rest); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}

	raiseFileLimit(stderr)
	e := &env{ovbus: *ovbus, work: *work, log: stderr}
	if e.work == "" {
		d, err := os.MkdirTemp("", "ovbus-attack-")
		if err != nil {
			fmt.Fprintln(stderr, "attack:", err)
			return 1
		}
		defer os.RemoveAll(d)
		e.work = d
	} else if err := os.MkdirAll(e.work, 0o755); err != nil {
		fmt.Fprintln(stderr, "attack:", err)
		return 1
	}
	e.rssLimit = *limit << 20
	if *limit == 0 {
		e.rssLimit = memAvailable() * 7 / 10
	}
	defer e.cleanup()

	ctx, cancel := context.WithCancel(context.Background())
	if *timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	}
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	r := &result{Scenario: name, Doc: sc.doc, Target: sc.target, Started: time.Now().UTC(),
		Command: "attack " + strings.Join(args, " "), Load: loadAverage(),
		Ovbus: os.Getenv("ATTACK_OVBUS_COMMIT"), Harness: os.Getenv("ATTACK_HARNESS_COMMIT")}
	err := runFn(ctx, e, r)
	r.Seconds = time.Since(r.Started).Seconds()
	if err != nil {
		r.Error = err.Error()
		e.logf("%s: %v", name, err)
	}
	if ctx.Err() == context.DeadlineExceeded {
		r.note("stopped by -timeout %v", *timeout)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	b = append(b, '\n')
	if *out != "" {
		if werr := os.WriteFile(*out, b, 0o644); werr != nil {
			fmt.Fprintln(stderr, "attack:", werr)
			return 1
		}
	} else {
		stdout.Write(b)
	}
	if err != nil {
		return 1
	}
	return 0
}

// raiseFileLimit sets RLIMIT_NOFILE's soft limit to the hard one: the full
// bus scenario holds ~19 000 client sockets in this process. The servers
// it starts inherit the raised limit.
func raiseFileLimit(stderr io.Writer) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			fmt.Fprintln(stderr, "attack: cannot raise the file limit:", err)
		}
	}
}

func fileLimit() uint64 {
	var l syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	return l.Cur
}

// loadAverage returns the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// memAvailable returns MemAvailable from /proc/meminfo in bytes (4 GiB
// when it cannot be read).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "MemAvailable:" {
				var kb int64
				fmt.Sscan(f[1], &kb)
				return kb << 10
			}
		}
	}
	return 4 << 30
}
