package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// listenRun is `ovbus listen` running in the background of a test.
type listenRun struct {
	out, err lockedBuffer
	cancel   context.CancelFunc
	done     chan struct{} // closed when the command has returned exit
	exit     int
}

func startListen(t *testing.T, args ...string) *listenRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &listenRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.exit = listenCmd(ctx, args, &l.out, &l.err)
	}()
	t.Cleanup(func() { l.stop(t) })
	return l
}

// stop interrupts the command (as SIGINT does) and returns its exit code.
func (l *listenRun) stop(t *testing.T) int {
	l.cancel()
	select {
	case <-l.done:
		return l.exit
	case <-time.After(5 * time.Second):
		t.Fatal("listen did not stop")
		return -1
	}
}

// waitOutput waits until the output has at least n lines and returns them.
func (l *listenRun) waitOutput(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := l.out.String()
		lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		if s != "" && len(lines) >= n && strings.HasSuffix(s, "\n") {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("wanted %d lines, got:\n%s\nstderr: %s", n, s, l.err.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestListenPrettyJSONAndFilters(t *testing.T) {
	srv, url := cliBus(t)
	pretty := startListen(t, "--url", url)
	asJSON := startListen(t, "--json", "--url", url)
	filtered := startListen(t, "--url", url, "--type", "test.*", "--type", "other,x?z", "--context=false")
	cliWaitClients(t, srv, 3)

	// Another client puts messages and junk on the bus.
	raw, _, err := ws.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	cliWaitClients(t, srv, 4)
	ctx := context.Background()
	for _, f := range []struct {
		op   ws.Opcode
		data string
	}{
		{ws.TextMessage, `{"type": "test.one", "data": {"b": 2, "a": [1, "x"]}, "context": {"source": "t"}}`},
		{ws.TextMessage, `{"type":"skip.me","data":{},"context":{}}`},
		{ws.TextMessage, "plain text"},
		{ws.TextMessage, `{"ciphertext":"ab","tag":"cd","nonce":"ef"}`},
		{ws.BinaryMessage, "\x01\x02"},
		{ws.TextMessage, `{"type":"other"}`},
		{ws.TextMessage, `{"type":"a/b:c.d","data":{"u":"<é>"}}`},
		{ws.TextMessage, `{"type":"xyz","data":{}}`},
	} {
		if err := raw.WriteMessage(ctx, f.op, []byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}

	ts := `\d\d:\d\d:\d\d\.\d{3}  `
	wantPretty := []string{
		ts + `connected  \{\}  ctx=\{"session":\{"session_id":"default"\}\}`,
		ts + `test\.one  \{"b":2,"a":\[1,"x"\]\}  ctx=\{"source":"t"\}`,
		ts + `skip\.me  \{\}`,
		ts + `\[not JSON\]  plain text`,
		ts + `\[encrypted\]  \{"ciphertext":"ab","tag":"cd","nonce":"ef"\}`,
		ts + `\[binary\]  2 bytes  0102`,
		ts + `other  \{\}`,
		ts + `a/b:c\.d  \{"u":"<é>"\}`,
		ts + `xyz  \{\}`,
	}
	lines := pretty.waitOutput(t, len(wantPretty))
	for i, re := range wantPretty {
		if !regexp.MustCompile("^" + re + "$").MatchString(lines[i]) {
			t.Errorf("pretty line %d = %q, want /%s/", i, lines[i], re)
		}
	}

	wantJSON := []string{
		`{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}`,
		`{"type":"test.one","data":{"b":2,"a":[1,"x"]},"context":{"source":"t"}}`,
		`{"type":"skip.me","data":{},"context":{}}`,
		`{"raw":"plain text"}`,
		`{"ciphertext":"ab","tag":"cd","nonce":"ef"}`,
		`{"binary":"AQI="}`,
		`{"type":"other"}`,
		`{"type":"a/b:c.d","data":{"u":"<é>"}}`,
		`{"type":"xyz","data":{}}`,
	}
	if got := asJSON.waitOutput(t, len(wantJSON)); strings.Join(got, "\n") != strings.Join(wantJSON, "\n") {
		t.Errorf("--json output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantJSON, "\n"))
	}

	wantFiltered := []string{ts + `test\.one  \{"b":2,"a":\[1,"x"\]\}`, ts + `other  \{\}`, ts + `xyz  \{\}`}
	lines = filtered.waitOutput(t, len(wantFiltered))
	for i, re := range wantFiltered {
		if !regexp.MustCompile("^" + re + "$").MatchString(lines[i]) {
			t.Errorf("filtered line %d = %q, want /%s/", i, lines[i], re)
		}
	}

	for _, l := range []*listenRun{pretty, asJSON, filtered} {
		if code := l.stop(t); code != 0 {
			t.Errorf("exit %d after interrupt", code)
		}
		if !strings.Contains(l.err.String(), "ovbus listen: connected to "+url) {
			t.Errorf("stderr = %q", l.err.String())
		}
	}
	if n := len(filtered.waitOutput(t, 3)); n != 3 {
		t.Errorf("filtered printed %d lines", n)
	}
}

func TestListenCountAndReconnect(t *testing.T) {
	srv, url := cliBus(t)
	l := startListen(t, "--url", url, "--json", "--count", "3")
	cliWaitClients(t, srv, 1)
	c := cliClient(t, url)
	cliWaitClients(t, srv, 2)
	for _, typ := range []string{"one", "two", "three"} {
		c.Emit(context.Background(), message.New(typ, nil))
	}
	select {
	case <-l.done:
		if l.exit != 0 {
			t.Errorf("exit %d", l.exit)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("--count 3 did not end the command")
	}
	if got := l.out.String(); strings.Count(got, "\n") != 3 || !strings.Contains(got, `"two"`) || strings.Contains(got, `"three"`) {
		t.Errorf("output:\n%s", got)
	}

	// --reconnect=false: exit 3 when the bus goes away.
	l2 := startListen(t, "--url", url, "--reconnect=false")
	l2.waitOutput(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	select {
	case <-l2.done:
		if code := l2.exit; code != exitConn || !strings.Contains(l2.err.String(), "connection lost") {
			t.Errorf("exit %d, stderr %q", code, l2.err.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("listen --reconnect=false kept running after the bus went away")
	}
}

func TestListenUnreachable(t *testing.T) {
	var out, errb lockedBuffer
	code := listenCmd(context.Background(), []string{"--url", unreachableURL(t), "--reconnect=false"}, &out, &errb)
	if code != exitConn || !strings.Contains(errb.String(), "ovbus listen: cannot connect to ws://127.0.0.1:") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

func TestListenUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--type", "a[b"}, "unterminated ["},
		{[]string{"--count", "-1"}, "--count must not be negative"},
		{[]string{"--nope"}, "flag provided but not defined"},
		{[]string{"--url", "tcp://x"}, "--url"},
		{[]string{"--ca", "/nonexistent/ca.pem"}, "--ca"},
	} {
		var out, errb lockedBuffer
		code := listenCmd(context.Background(), tc.args, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "Usage: ovbus listen") {
			t.Errorf("%q: exit %d, stderr %q", tc.args, code, errb.String())
		}
	}
	var out, errb lockedBuffer
	if code := runListen([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{
		"Usage: ovbus listen", "--type PATTERN", "--exclude PATTERN", "--token TOKEN", "--json", "(default false)",
		"--context", "(default true)", "--count int", "(default 0)", "--reconnect",
		"--url URL", "default: the bus of the OVOS configuration", "--ca FILE", "--insecure", "Exit status:",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestGlobs(t *testing.T) {
	re, err := compileGlobs("type", []string{"mycroft.*", "a?c", "[!x]yz", "q[0-9]", `lit\*`, "skill-*.openvoiceos:*"})
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{
		"mycroft.skills.loaded": true, "mycroft": false, "mycroft.a/b": true,
		"abc": true, "ac": false, "ayz": true, "xyz": false, "q5": true, "qa": false,
		"lit*": true, "litx": false, "skill-date.openvoiceos:intent": true, "x.mycroft.y": false,
	} {
		if re.MatchString(s) != want {
			t.Errorf("match %q = %v", s, !want)
		}
	}
}

// The real command in a child process: it exits 0 on SIGINT.
func TestListenSIGINT(t *testing.T) {
	if url := os.Getenv("OVBUS_TEST_LISTEN_CHILD"); url != "" {
		os.Exit(runListen([]string{"--url", url}, os.Stdout, os.Stderr))
	}
	_, url := cliBus(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestListenSIGINT$")
	cmd.Env = append(os.Environ(), "OVBUS_TEST_LISTEN_CHILD="+url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n') // the greeting: the child is connected
	if err != nil || !strings.Contains(line, "connected") {
		t.Fatalf("child printed %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("child exit after SIGINT: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child did not exit on SIGINT")
	}
}

// listen started before the bus (at boot) says so once and connects when the bus comes up.
func TestListenWaitsForTheBus(t *testing.T) {
	url := unreachableURL(t)
	l := startListen(t, "--url", url, "--json")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(l.err.String(), "waiting for the bus (--reconnect)") {
		if time.Now().After(deadline) {
			t.Fatalf("stderr %q", l.err.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "ws://"), "/core")
	cliBusWith(t, bus.Options{Addr: addr})
	if lines := l.waitOutput(t, 1); !strings.Contains(lines[0], `"connected"`) {
		t.Errorf("first line %q", lines[0])
	}
	l.waitStderr("connected to " + url)
	if got := l.err.String(); strings.Count(got, "waiting for the bus") != 1 || !strings.Contains(got, "connected to "+url) {
		t.Errorf("stderr %q", got)
	}
}

func TestListenExclude(t *testing.T) {
	srv, url := cliBus(t)
	l := startListen(t, "--url", url, "--json", "--type", "a.*", "--exclude", "a.noise*,a.x")
	cliWaitClients(t, srv, 1)
	c := cliClient(t, url)
	for _, typ := range []string{"a.noise.1", "a.x", "b.y", "a.keep", "a.noise"} {
		c.Emit(context.Background(), message.New(typ, nil))
	}
	c.Emit(context.Background(), message.New("a.last", nil))
	lines := l.waitOutput(t, 2)
	if len(lines) != 2 || !strings.Contains(lines[0], `"a.keep"`) || !strings.Contains(lines[1], `"a.last"`) {
		t.Errorf("lines %q", lines)
	}
}

// waitStderr waits (up to 5 s) until listen's stderr holds want. "connected
// to" is written when the client reports its state, on another goroutine
// than the messages: it may come after the first line of output.
func (l *listenRun) waitStderr(want string) {
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(l.err.String(), want) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}
