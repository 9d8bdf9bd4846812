package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/message"
)

// cliBus starts a real ovbus server on a free loopback port for the test.
func cliBus(t *testing.T) (*bus.Server, string) {
	t.Helper()
	return cliBusWith(t, bus.Options{Addr: "127.0.0.1:0"})
}

// cliBusWith starts a real ovbus server with options o (quiet) for the test.
func cliBusWith(t *testing.T, o bus.Options) (*bus.Server, string) {
	t.Helper()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := bus.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, "ws://" + srv.Addr().String() + "/core"
}

func cliWaitClients(t *testing.T, srv *bus.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Clients() != n {
		if time.Now().After(deadline) {
			t.Fatalf("bus has %d clients, want %d", srv.Clients(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func cliClient(t *testing.T, url string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func unreachableURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "ws://" + addr + "/core"
}

// lockedBuffer is a bytes.Buffer safe for the command's goroutines and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type sendResult struct {
	code           int
	stdout, stderr string
}

func send(t *testing.T, stdin string, args ...string) sendResult {
	t.Helper()
	var out, errb lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := sendCmd(ctx, args, strings.NewReader(stdin), &out, &errb)
	return sendResult{code, out.String(), errb.String()}
}

func TestSendWaitsForReply(t *testing.T) {
	srv, url := cliBus(t)
	responder := cliClient(t, url)
	responder.On("ask.time", func(m message.Message) {
		responder.Emit(context.Background(), m.Response(map[string]any{"time": "noon", "q": m.Data["q"]}))
	})
	// A reply of the same type as the question: the command must not take its own echo for it.
	responder.On("same.type", func(m message.Message) {
		if m.Data["from"] != "responder" {
			responder.Emit(context.Background(), m.Reply("same.type", map[string]any{"from": "responder"}))
		}
	})
	cliWaitClients(t, srv, 1)

	r := send(t, "", "--url", url, "ask.time", `{"q": 1}`, "--wait", "ask.time.response", "--context", `{"source":"cli","destination":"skills"}`)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	want := `{"type":"ask.time.response","data":{"q":1,"time":"noon"},"context":{"destination":"cli","source":"skills"}}` + "\n"
	if r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}

	r = send(t, "", "same.type", "--wait=same.type", "--url="+url)
	if r.code != 0 || !strings.Contains(r.stdout, `"from":"responder"`) {
		t.Errorf("same-type reply: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestSendEmitsAndWaitsForTheEcho(t *testing.T) {
	srv, url := cliBus(t)
	listener := cliClient(t, url)
	got := make(chan message.Message, 4)
	listener.On("note.taken", func(m message.Message) { got <- m })
	cliWaitClients(t, srv, 1)

	r := send(t, "", "note.taken", `{"text": "<b>milk</b> & bread"}`, "--context", `{"source":"cli"}`, "--url", url)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	select {
	case m := <-got:
		if m.Data["text"] != "<b>milk</b> & bread" || m.Context["source"] != "cli" {
			t.Errorf("received %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("message not relayed")
	}

	// DATA_JSON from standard input.
	r = send(t, `{"text": "eggs"}`, "--url", url, "note.taken", "-")
	if r.code != 0 {
		t.Fatalf("stdin: exit %d, stderr %q", r.code, r.stderr)
	}
	if m := <-got; m.Data["text"] != "eggs" {
		t.Errorf("received %v", m)
	}
}

func TestSendTimeout(t *testing.T) {
	_, url := cliBus(t)
	start := time.Now()
	r := send(t, "", "--url", url, "--timeout", "200ms", "--wait", "nobody.answers", "question")
	if r.code != exitTimeout {
		t.Errorf("exit %d, want %d (stderr %q)", r.code, exitTimeout, r.stderr)
	}
	if want := `ovbus send: timed out after 200ms waiting for "nobody.answers"`; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestSendUnreachable(t *testing.T) {
	r := send(t, "", "--url", unreachableURL(t), "--timeout", "1s", "x")
	if r.code != exitConn || !strings.Contains(r.stderr, "ovbus send: cannot connect to ws://127.0.0.1:") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSendUsage(t *testing.T) {
	url := unreachableURL(t) // never dialled: usage errors come first
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"t", "{bad"}, "DATA_JSON is not valid JSON"},
		{[]string{"t", "[1,2]"}, "DATA_JSON must be a JSON object"},
		{[]string{"t", `{"a":1} {"b":2}`}, "extra text"},
		{[]string{"t", "--context", "nope"}, "--context is not valid JSON"},
		{[]string{"t", "--context", `"s"`}, "--context must be a JSON object"},
		{[]string{}, "want TYPE"},
		{[]string{"a", "{}", "c"}, "want TYPE"},
		{[]string{"t", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"t", "--bogus"}, "flag provided but not defined"},
		{[]string{"--url", "http://x", "t"}, "--url"},
	} {
		r := send(t, "", append([]string{"--url", url}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "Usage: ovbus send") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestSendHelpListsEveryFlag(t *testing.T) {
	r := send(t, "", "--help")
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	for _, want := range []string{
		"Usage: ovbus send TYPE [DATA_JSON]",
		"--url URL", "default: the bus of the OVOS configuration",
		"--context", `(default "{}")`,
		"--wait TYPE", `(default "")`,
		"--timeout duration", "(default 3s)",
		"--ca", "--insecure", "(default false)",
		"Exit status:",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, r.stdout)
		}
	}
	var code int
	out := captureRun(t, func(stdout, stderr io.Writer) { code = runSend([]string{"-h"}, stdout, stderr) })
	if code != 0 || !strings.Contains(out, "--wait") {
		t.Errorf("runSend -h: exit %d, %q", code, out)
	}
}

func captureRun(t *testing.T, f func(stdout, stderr io.Writer)) string {
	t.Helper()
	var out lockedBuffer
	f(&out, &out)
	return out.String()
}

func TestParseArgsInterleaved(t *testing.T) {
	fs := newFlagSet("x", "x", "", io.Discard)
	a := fs.String("a", "", "")
	pos, err := parseArgs(fs, []string{"p1", "--a", "v", "p2", "--", "--a", "p3"}, io.Discard)
	if err != nil || *a != "v" || strings.Join(pos, " ") != "p1 p2 --a p3" {
		t.Errorf("pos %q a %q err %v", pos, *a, err)
	}
}
