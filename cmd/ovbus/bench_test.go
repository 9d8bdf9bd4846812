package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bench"
	"github.com/ovbus/ovbus/ws"
)

// benchTestEcho starts an echo server on package ws.
func benchTestEcho(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			op, b, err := c.ReadMessage(context.Background())
			if err != nil || c.WriteMessage(context.Background(), op, b) != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
}

func benchRun(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestBenchJSON runs a tiny bench against the real bus through the CLI: the
// output is pure JSON and every count adds up.
func TestBenchJSON(t *testing.T) {
	_, url := cliBus(t)
	dir := t.TempDir()
	svg, md := filepath.Join(dir, "p.svg"), filepath.Join(dir, "t.md")
	code, out, errs := benchRun("bench", "--url", url, "--clients", "3", "--messages", "50", "--size", "150",
		"--repeat", "2", "--json", "--plot", svg, "--save-md", md, "--pause", "1ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep bench.Report
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
	}
	if dec.More() {
		t.Error("more than one JSON value on stdout")
	}
	if rep.Kind != bench.KindFanout || len(rep.Series) != 1 || rep.Series[0].Bus != "ovbus" || len(rep.Series[0].Runs) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	for _, r := range rep.Series[0].Runs {
		if r["expected"] != 150 || r["delivered"] != 150 || r["dropped"] != 0 || r["out_of_order"] != 0 || r["conn_errors"] != 0 || r["size"] != 150 {
			t.Errorf("run: %v", r)
		}
	}
	if !strings.HasPrefix(rep.Command, "ovbus bench --url ") || !strings.Contains(rep.Command, "--clients 3") || rep.Commit == "" {
		t.Errorf("command %q, commit %q", rep.Command, rep.Commit)
	}
	if errs != "" {
		t.Errorf("stderr with --json (not a terminal): %q", errs)
	}
	for _, f := range []string{svg, md} {
		if b, err := os.ReadFile(f); err != nil || len(b) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestBenchCompareTextAndPositionalTargets(t *testing.T) {
	_, a := cliBus(t)
	_, b := cliBus(t)
	code, out, errs := benchRun("bench", "--preset", "2x20,3x10", "--compare", "one="+a, "two="+b, "--pause", "1ms", "--warmup", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"2×20", "3×10", "one", "two", "deliveries/s", "Headline: one"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// Without a URL, bench measures a bus of its own and says so; the bus the OVOS_BUS_* variables
// name (a live one) sees nothing.
func TestBenchWithoutURLStartsItsOwnBus(t *testing.T) {
	live, url := cliBus(t)
	host, port, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(url, "ws://"), "/core"), ":")
	t.Setenv("OVOS_BUS_HOST", host)
	t.Setenv("OVOS_BUS_PORT", port)
	code, out, errs := benchRun("bench", "--clients", "2", "--messages", "20", "--json", "--pause", "1ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "measuring an ovbus started in this process at ws://127.0.0.1:") {
		t.Errorf("stderr %q", errs)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Series) != 1 || rep.Series[0].URL == url {
		t.Fatalf("report %+v (%v)", rep, err)
	}
	if n := len(live.Sessions()) + len(live.RecentCloses()); n != 0 {
		t.Errorf("the bus of the variables saw %d connections", n)
	}
}

func TestBenchUnreachable(t *testing.T) {
	code, out, errs := benchRun("bench", "--url", "ws://127.0.0.1:1/core", "--clients", "1", "--messages", "1")
	if code != 3 {
		t.Errorf("exit %d, want 3\n%s\n%s", code, out, errs)
	}
}

func TestLoadtestJSON(t *testing.T) {
	url := benchTestEcho(t)
	code, out, errs := benchRun("loadtest", "--url", url, "--conns", "2", "--payload", "1k", "--count", "30", "--window", "4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if rep.Kind != bench.KindLoad || len(rep.Series) != 1 {
		t.Fatalf("report %+v", rep)
	}
	r := rep.Series[0].Runs[0]
	if r["received"] != 60 || r["sent"] != 60 || r["mismatched"] != 0 || r["payload"] != 1024 || r["window"] != 4 {
		t.Errorf("run %v", r)
	}
	code, out, errs = benchRun("loadtest", "--url", url, "--conns", "1", "--count", "5", "--format", "markdown")
	if code != 0 || !strings.HasPrefix(out, "| scenario | bus | msg/s |") {
		t.Errorf("markdown: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestBenchHelpListsEveryFlag checks that -h documents every flag with its
// default, on stdout, with exit status 0.
func TestBenchHelpListsEveryFlag(t *testing.T) {
	for _, cmd := range []string{"bench", "loadtest"} {
		code, out, _ := benchRun(cmd, "-h")
		if code != 0 {
			t.Errorf("%s -h: exit %d", cmd, code)
		}
		want := []string{"--url", "--compare", "--repeat", "--json", "--plot", "--server-pid", "--format"}
		if cmd == "bench" {
			want = append(want, "--clients", "--messages", "--size", "--warmup", "--timeout", "--rate", "--preset", "--no-greeting")
		} else {
			want = append(want, "--conns", "--payload", "--count", "--duration", "--window", "--text")
		}
		for _, f := range want {
			if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
				t.Errorf("%s -h does not list %s", cmd, f)
			}
		}
		// Every flag but the repeatable --compare, which has none.
		if got, n := strings.Count(out, "(default "), strings.Count(out, "\n  --")-1; got != n || n < 15 {
			t.Errorf("%s -h: %d flags, %d defaults", cmd, n, got)
		}
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--clients", "0"},
		{"bench", "--preset", "nonsense"},
		{"bench", "--format", "xml"},
		{"bench", "--plot", "x.png"},
		{"loadtest", "--plot", "chart"},
		{"bench", "--compare", "a=http://x/"},
		{"bench", "a=ws://127.0.0.1:1/", "a=ws://127.0.0.1:2/"},
		{"bench", "--no-such-flag"},
		{"loadtest", "--payload", "0"},
		{"loadtest", "--window", "0"},
	} {
		if code, _, errs := benchRun(args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}
