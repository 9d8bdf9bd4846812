//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// server is one `ovbus serve` process started for a scenario: its own
// configuration file (OVOS_BUS_CONFIG_FILE), the rest of the OVOS
// configuration stack pointed at an empty directory, any free port on
// 127.0.0.1, metrics on another.
type server struct {
	cmd     *exec.Cmd
	pid     int
	addr    string // host:port of the bus
	route   string
	metrics string // http://host:port/metrics, "" without
	conf    map[string]any
	logPath string

	exited  chan struct{}
	exitErr error

	mu        sync.Mutex
	lines     int
	warnings  []string // WARNING lines (the first 50)
	nWarnings int

	watch     *rssWatch
	rssKilled bool // killed for passing the RSS limit
}

var startedLine = regexp.MustCompile(`service started! url=ws://([^/ ]+)(/\S*)(?: metrics=(\S+))?`)

// startServer starts ovbus serve with the websocket section ws (host, port
// and metrics_address filled in unless set) and waits until it listens.
func startServer(ctx context.Context, e *env, label string, ws map[string]any) (*server, error) {
	conf := map[string]any{"host": "127.0.0.1", "port": 0, "metrics_address": "127.0.0.1:0"}
	for k, v := range ws {
		conf[k] = v
	}
	dir, err := os.MkdirTemp(e.work, label+"-")
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "bus.conf")
	b, _ := json.MarshalIndent(map[string]any{"websocket": conf}, "", "  ")
	if err := os.WriteFile(confPath, b, 0o644); err != nil {
		return nil, err
	}
	xdg := filepath.Join(dir, "xdg")
	for _, d := range []string{"config", "state", "data", "cache"} {
		os.MkdirAll(filepath.Join(xdg, d), 0o755)
	}
	cmd := exec.Command(e.ovbus, "serve", "--log-file", "")
	cmd.Env = append(os.Environ(),
		"XDG_CONFIG_HOME="+xdg+"/config", "XDG_CONFIG_DIRS="+xdg+"/config",
		"XDG_STATE_HOME="+xdg+"/state", "XDG_DATA_HOME="+xdg+"/data", "XDG_CACHE_HOME="+xdg+"/cache",
		"MYCROFT_SYSTEM_CONFIG="+xdg+"/none.conf", "OVOS_DEFAULT_CONFIG=",
		"OVOS_BUS_CONFIG_FILE="+confPath)
	cmd.Env = dropEnv(cmd.Env, "OVOS_BUS_HOST", "OVOS_BUS_PORT", "OVOS_BUS_METRICS_ADDRESS", "OVOS_BUS_ROUTE")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	logf, err := os.Create(filepath.Join(dir, "ovbus.log"))
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", e.ovbus, err)
	}
	if e.serverNofile > 0 {
		if err := limitFiles(cmd.Process.Pid, e.serverNofile); err != nil {
			cmd.Process.Kill()
			logf.Close()
			return nil, err
		}
	}
	s := &server{cmd: cmd, pid: cmd.Process.Pid, conf: conf, logPath: logf.Name(), exited: make(chan struct{})}
	ready := make(chan []string, 1)
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			s.mu.Lock()
			s.lines++
			if strings.Contains(line, " - WARNING - ") {
				s.nWarnings++
				if len(s.warnings) < 50 {
					s.warnings = append(s.warnings, line)
				}
			}
			s.mu.Unlock()
			if m := startedLine.FindStringSubmatch(line); m != nil && !sent {
				ready <- m
				sent = true
			}
		}
		io.Copy(logf, out)
	}()
	go func() {
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	select {
	case m := <-ready:
		s.addr, s.route, s.metrics = m[1], m[2], m[3]
	case <-s.exited:
		time.Sleep(100 * time.Millisecond) // let the copier write the last lines
		return nil, fmt.Errorf("ovbus serve exited before listening (%v): %s", s.exitErr, lastLine(readFile(s.logPath)))
	case <-time.After(30 * time.Second):
		s.kill()
		return nil, fmt.Errorf("ovbus serve did not listen within 30 s; log %s", s.logPath)
	case <-ctx.Done():
		s.kill()
		return nil, ctx.Err()
	}
	e.track(s)
	s.watch = startRSSWatch(s, e.rssLimit, 100*time.Millisecond)
	return s, nil
}

// serve starts a server as startServer does and records its configuration
// in r under label.
func serve(ctx context.Context, e *env, r *result, label string, ws map[string]any) (*server, error) {
	s, err := startServer(ctx, e, label, ws)
	if err != nil {
		return nil, err
	}
	r.config(label, s)
	return s, nil
}

func dropEnv(env []string, names ...string) []string {
	out := env[:0]
outer:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue outer
			}
		}
		out = append(out, kv)
	}
	return out
}

// unknownKeys returns the websocket keys the server warned it does not know.
func (s *server) unknownKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for _, w := range s.warnings {
		if i := strings.Index(w, "websocket."); i >= 0 && strings.Contains(w, "unknown key") {
			k := w[i+len("websocket."):]
			keys = append(keys, k[:strings.IndexByte(k, ':')])
		}
	}
	return keys
}

// knows reports whether the server accepted the websocket key k.
func (s *server) knows(k string) bool {
	for _, u := range s.unknownKeys() {
		if u == k {
			return false
		}
	}
	return true
}

// warningCount returns how many WARNING lines the server has logged.
func (s *server) warningCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nWarnings
}

// procStatus returns VmRSS and VmHWM of the server in bytes.
func (s *server) procStatus() (rss, hwm int64, err error) {
	return procStatus(s.pid)
}

func procStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return rss, hwm, nil
}

// rss returns VmRSS in bytes, 0 when the process is gone.
func (s *server) rss() int64 {
	r, _, _ := s.procStatus()
	return r
}

// metricSet is one scrape of /metrics: series name (with labels) → value.
type metricSet map[string]float64

// scrape reads /metrics and reports how long the request took.
func (s *server) scrape() (metricSet, time.Duration, error) {
	if s.metrics == "" {
		return nil, 0, errors.New("no metrics_address")
	}
	return s.scrapeWithin(10 * time.Second)
}

// scrapeWithin is scrape with a timeout.
func (s *server) scrapeWithin(timeout time.Duration) (metricSet, time.Duration, error) {
	start := time.Now()
	resp, err := get(s.metrics, timeout)
	if err != nil {
		return nil, time.Since(start), err
	}
	defer resp.Body.Close()
	m := metricSet{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m, time.Since(start), sc.Err()
}

// sum adds every series of the metric name (any labels).
func (m metricSet) sum(name string) float64 {
	var t float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			t += v
		}
	}
	return t
}

// byLabel returns the series of name keyed by their label set.
func (m metricSet) byLabel(name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, name+"{") && v != 0 {
			out[k[len(name):]] = v
		}
	}
	return out
}

// stop sends SIGTERM and waits up to timeout for the exit, then kills.
// It returns how long the exit took.
func (s *server) stop(timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		s.watch.stop()
		return time.Since(start), true
	case <-time.After(timeout):
		s.kill()
		return time.Since(start), false
	}
}

// kill ends the process at once and waits for it.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
	if s.watch != nil {
		s.watch.stop()
	}
}

// alive reports whether the process is still running.
func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// rssWatch samples the server's RSS, keeps the peak, and kills the
// server when it passes limit (0: no limit), so that an attack on today's
// code cannot take the machine down with it.
type rssWatch struct {
	mu      sync.Mutex
	peak    int64
	limit   int64
	killed  bool
	done    chan struct{}
	stopped sync.Once
}

func startRSSWatch(s *server, limit int64, every time.Duration) *rssWatch {
	w := &rssWatch{limit: limit, done: make(chan struct{})}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-s.exited:
				return
			case <-t.C:
			}
			r := s.rss()
			w.mu.Lock()
			w.peak = max(w.peak, r)
			over := w.limit > 0 && r > w.limit
			if over {
				w.killed = true
			}
			w.mu.Unlock()
			if over {
				s.rssKilled = true
				s.cmd.Process.Kill()
				return
			}
		}
	}()
	return w
}

func (w *rssWatch) stop() { w.stopped.Do(func() { close(w.done) }) }

// resetPeak forgets the peak so far and returns it.
func (w *rssWatch) resetPeak() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.peak
	w.peak = 0
	return p
}

func (w *rssWatch) peakRSS() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak
}

func (w *rssWatch) wasKilled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killed
}

// health times GET /health on the bus port.
func (s *server) health(timeout time.Duration) (int, time.Duration, error) {
	start := time.Now()
	resp, err := get("http://"+s.addr+"/health", timeout)
	if err != nil {
		return 0, time.Since(start), err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// limitFiles sets both RLIMIT_NOFILE limits of the running process pid to
// n with prlimit(2), so that neither the Go runtime (which raises the soft
// limit to the hard one at start) nor the server itself can go past it.
// The syscall package has no wrapper for it; the call is the documented
// one, its rlimit argument a pointer to a struct the kernel reads.
func limitFiles(pid int, n uint64) error {
	lim := syscall.Rlimit{Cur: n, Max: n}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_NOFILE,
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("prlimit: %w", errno)
	}
	return nil
}

// fileLimits returns the "Max open files" soft and hard limits of the
// process, as /proc/PID/limits shows them.
func (s *server) fileLimits() string {
	for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/limits", s.pid)), "\n") {
		if f := strings.Fields(l); strings.HasPrefix(l, "Max open files") && len(f) >= 5 {
			return f[3] + " " + f[4]
		}
	}
	return "unknown"
}

// get requests url on a connection of its own: a probe of the server's
// accept path, never a kept-alive connection.
func get(url string, timeout time.Duration) (*http.Response, error) {
	c := http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	return c.Get(url)
}
