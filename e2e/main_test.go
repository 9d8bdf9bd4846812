// Package e2e tests the real ovbus binary end to end: TestMain builds
// ./cmd/ovbus once, and every test starts `ovbus serve` as a subprocess in an
// isolated environment (temporary HOME, XDG_* and OVOS/MYCROFT paths, so
// nothing from /etc or the user's home leaks in) and talks to it with our ws
// client and with Python's websocket-client from Debian (python3-websocket,
// the library ovos-bus-client uses).
//
// Run: go test -race ./e2e
package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ovbusBin is the binary TestMain built.
var ovbusBin string

// startedLine is what the bus prints once it listens (docs/protocol.md §7).
const startedLine = "Message bus service started!"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "ovbus-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ovbusBin = filepath.Join(dir, "ovbus")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", ovbusBin}
	if raceEnabled {
		// The test binary runs with -race: check the server too.
		args = append(args, "-race")
	}
	args = append(args, "github.com/ovbus/ovbus/cmd/ovbus")
	start := time.Now()
	cmd := exec.Command(goTool, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %s: %v\n%s", strings.Join(args, " "), err, out.String())
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "e2e: built %s (race=%v) in %v\n", ovbusBin, raceEnabled, time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}

// sandbox is an isolated environment for one or more runs of the binary.
type sandbox struct {
	t    *testing.T
	root string

	home, configHome, dataHome, stateHome string
	xdgDirs                               []string // XDG_CONFIG_DIRS, highest priority first
	systemFile, distFile, webCache        string

	env map[string]string // the process environment, apart from PATH
	// port is the bus port the harness set with OVOS_BUS_PORT; 0 when the
	// test sets the port itself.
	port int
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	root := t.TempDir()
	sb := &sandbox{
		t:          t,
		root:       root,
		home:       filepath.Join(root, "home"),
		configHome: filepath.Join(root, "home", ".config"),
		dataHome:   filepath.Join(root, "home", ".local", "share"),
		stateHome:  filepath.Join(root, "home", ".local", "state"),
		xdgDirs:    []string{filepath.Join(root, "etc", "xdg")},
		systemFile: filepath.Join(root, "etc", "mycroft", "mycroft.conf"),
		distFile:   filepath.Join(root, "usr", "share", "mycroft", "mycroft.conf"),
		webCache:   filepath.Join(root, "home", ".config", "mycroft", "web_cache.json"),
	}
	for _, d := range []string{sb.home, sb.configHome, sb.dataHome, sb.stateHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb.env = map[string]string{
		"HOME":                     sb.home,
		"XDG_CONFIG_HOME":          sb.configHome,
		"XDG_DATA_HOME":            sb.dataHome,
		"XDG_STATE_HOME":           sb.stateHome,
		"XDG_CONFIG_DIRS":          strings.Join(sb.xdgDirs, ":"),
		"MYCROFT_SYSTEM_CONFIG":    sb.systemFile,
		"OVOS_DISTRIBUTION_CONFIG": sb.distFile,
		"MYCROFT_WEB_CACHE":        sb.webCache,
		"TZ":                       "UTC",
		"LANG":                     "C.UTF-8",
	}
	return sb
}

// setXDGDirs sets XDG_CONFIG_DIRS to n directories under the sandbox and
// returns them, highest priority first.
func (sb *sandbox) setXDGDirs(n int) []string {
	sb.xdgDirs = nil
	for i := range n {
		sb.xdgDirs = append(sb.xdgDirs, filepath.Join(sb.root, "etc", "xdg"+strconv.Itoa(i)))
	}
	sb.env["XDG_CONFIG_DIRS"] = strings.Join(sb.xdgDirs, ":")
	return sb.xdgDirs
}

// userFile is the XDG user configuration file.
func (sb *sandbox) userFile() string {
	return filepath.Join(sb.configHome, "mycroft", "mycroft.conf")
}

// xdgFile is the configuration file in the i-th XDG_CONFIG_DIRS entry.
func (sb *sandbox) xdgFile(i int) string {
	return filepath.Join(sb.xdgDirs[i], "mycroft", "mycroft.conf")
}

// write creates a file, and its directories, with the given content.
func (sb *sandbox) write(path, content string) string {
	sb.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		sb.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		sb.t.Fatal(err)
	}
	return path
}

// environ is the environment of the bus process: nothing of ours but PATH
// (and the race detector's options).
func (sb *sandbox) environ() []string {
	out := []string{"PATH=" + os.Getenv("PATH")}
	if v, ok := os.LookupEnv("GORACE"); ok {
		out = append(out, "GORACE="+v)
	}
	for k, v := range sb.env {
		out = append(out, k+"="+v)
	}
	return out
}

// usePort makes the harness choose the port, through OVOS_BUS_PORT.
func (sb *sandbox) usePort() int {
	sb.port = freePort(sb.t)
	sb.env["OVOS_BUS_PORT"] = strconv.Itoa(sb.port)
	return sb.port
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// lines collects a process's output line by line and lets tests wait for a
// line.
type lines struct {
	mu      sync.Mutex
	all     []string
	partial []byte
	changed chan struct{}
	closed  bool
}

func newLines() *lines { return &lines{changed: make(chan struct{})} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.all = append(l.all, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// finish marks the end of the output (the process exited).
func (l *lines) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.all = append(l.all, string(l.partial))
		l.partial = nil
	}
	l.closed = true
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n") + string(l.partial)
}

// wait returns the first line, at index from or later, for which match is
// true, and its index; ok is false when the output ended or timeout passed.
func (l *lines) wait(from int, timeout time.Duration, match func(string) bool) (line string, idx int, ok bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for i := from; i < len(l.all); i++ {
			if match(l.all[i]) {
				line := l.all[i]
				l.mu.Unlock()
				return line, i, true
			}
		}
		if len(l.all) > from {
			from = len(l.all)
		}
		closed, ch := l.closed, l.changed
		l.mu.Unlock()
		if closed {
			return "", -1, false
		}
		select {
		case <-ch:
		case <-deadline.C:
			return "", -1, false
		}
	}
}

// busProc is one running `ovbus serve`.
type busProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *lines
	stderr *lines
	done   chan struct{}
	err    error // the exit status, valid after done
	port   int
}

// runResult is a finished run of the binary.
type runResult struct {
	code           int
	stdout, stderr string
}

func (r runResult) output() string { return r.stdout + "\n" + r.stderr }

// run runs the binary to completion (bounded by timeout) with the sandbox's
// environment.
func (sb *sandbox) run(timeout time.Duration, args ...string) runResult {
	sb.t.Helper()
	cmd := exec.Command(ovbusBin, args...)
	cmd.Env = sb.environ()
	cmd.Dir = sb.root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		sb.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		sb.t.Fatalf("ovbus %s did not finish within %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, stdout.String(), stderr.String())
	}
	res := runResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		sb.t.Fatal(err)
	}
	checkRace(sb.t, res.stderr)
	return res
}

// checkRace fails the test when the race detector reported in the server.
func checkRace(t *testing.T, stderr string) {
	t.Helper()
	if i := strings.Index(stderr, "WARNING: DATA RACE"); i >= 0 {
		end := min(len(stderr), i+6000)
		t.Errorf("the race detector reported a data race in ovbus:\n%s", stderr[i:end])
	}
}

// start runs `ovbus serve args...` and waits until it has logged that it
// started. When the test did not set a port (sb.env has no OVOS_BUS_PORT and
// no file sets one), call sb.usePort first; if the port chosen by the harness
// was taken in the meantime start tries another.
func (sb *sandbox) start(args ...string) *busProc {
	sb.t.Helper()
	for attempt := 0; ; attempt++ {
		b, err := sb.tryStart(args...)
		if err == nil {
			return b
		}
		if attempt < 3 && sb.port != 0 && strings.Contains(err.Error(), "address already in use") {
			sb.t.Logf("port %d was taken, retrying: %v", sb.port, err)
			sb.usePort()
			continue
		}
		sb.t.Fatal(err)
	}
}

func (sb *sandbox) tryStart(args ...string) (*busProc, error) {
	b, err := sb.spawn(args...)
	if err != nil {
		return nil, err
	}
	if _, _, ok := b.stdout.wait(0, 20*time.Second, func(s string) bool { return strings.Contains(s, startedLine) }); !ok {
		select {
		case <-b.done:
			return nil, fmt.Errorf("ovbus serve exited (%v) before %q\nstdout:\n%s\nstderr:\n%s", b.err, startedLine, b.stdout, b.stderr)
		default:
		}
		b.kill()
		return nil, fmt.Errorf("ovbus serve did not log %q within 20s\nstdout:\n%s\nstderr:\n%s", startedLine, b.stdout, b.stderr)
	}
	if b.port != 0 {
		// "started" comes after the bind: the port must accept now.
		c, err := net.DialTimeout("tcp", b.addr(), 2*time.Second)
		if err != nil {
			b.kill()
			return nil, fmt.Errorf("ovbus logged %q but %s does not accept: %v", startedLine, b.addr(), err)
		}
		c.Close()
	}
	return b, nil
}

// spawn starts `ovbus serve args...` without waiting for it.
func (sb *sandbox) spawn(args ...string) (*busProc, error) {
	cmd := exec.Command(ovbusBin, append([]string{"serve"}, args...)...)
	cmd.Env = sb.environ()
	cmd.Dir = sb.root
	b := &busProc{t: sb.t, cmd: cmd, stdout: newLines(), stderr: newLines(), done: make(chan struct{}), port: sb.port}
	cmd.Stdout, cmd.Stderr = b.stdout, b.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		b.err = cmd.Wait()
		b.stdout.finish()
		b.stderr.finish()
		close(b.done)
	}()
	sb.t.Cleanup(func() {
		b.kill()
		checkRace(sb.t, b.stderr.String())
		if sb.t.Failed() {
			sb.t.Logf("ovbus stdout:\n%s\novbus stderr:\n%s", b.stdout, b.stderr)
		}
	})
	return b, nil
}

func (b *busProc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// url is the bus's WebSocket URL with the default route.
func (b *busProc) url() string { return "ws://" + b.addr() + "/core" }

// kill ends the process at once, if it still runs.
func (b *busProc) kill() {
	select {
	case <-b.done:
		return
	default:
	}
	b.cmd.Process.Kill()
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
	}
}

// stop sends sig and waits for the process to exit; it returns the exit code.
func (b *busProc) stop(sig syscall.Signal, timeout time.Duration) int {
	b.t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		b.t.Fatalf("signal %v: %v", sig, err)
	}
	return b.wait(timeout)
}

// wait waits for the process to exit and returns its exit code.
func (b *busProc) wait(timeout time.Duration) int {
	b.t.Helper()
	select {
	case <-b.done:
	case <-time.After(timeout):
		b.kill()
		b.t.Fatalf("ovbus did not exit within %v\nstdout:\n%s\nstderr:\n%s", timeout, b.stdout, b.stderr)
	}
	var ee *exec.ExitError
	switch {
	case b.err == nil:
		return 0
	case errors.As(b.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		b.t.Fatal(b.err)
		return -1
	}
}

// waitLog waits for an output line (stdout or stderr) containing all of subs.
func (b *busProc) waitLog(timeout time.Duration, subs ...string) string {
	b.t.Helper()
	match := func(s string) bool {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				return false
			}
		}
		return true
	}
	res := make(chan string, 2)
	for _, l := range []*lines{b.stdout, b.stderr} {
		go func() {
			line, _, _ := l.wait(0, timeout, match)
			res <- line
		}()
	}
	for range 2 {
		if line := <-res; line != "" {
			return line
		}
	}
	b.t.Fatalf("no log line containing %q within %v\nstdout:\n%s\nstderr:\n%s", subs, timeout, b.stdout, b.stderr)
	return ""
}

// output is everything the process printed so far.
func (b *busProc) output() string { return b.stdout.String() + "\n" + b.stderr.String() }

// readAllLines reads r line by line into ch until EOF.
func readAllLines(r io.Reader, ch chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		ch <- sc.Text()
	}
	close(ch)
}
