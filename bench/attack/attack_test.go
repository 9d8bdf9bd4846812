//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ovbusBinary builds ovbus once for the test (or uses $OVBUS_ATTACK_BIN).
func ovbusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("OVBUS_ATTACK_BIN"); p != "" {
		return p
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build ovbus")
	}
	bin := filepath.Join(t.TempDir(), "ovbus")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/ovbus/ovbus/cmd/ovbus").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ovbus: %v\n%s", err, out)
	}
	return bin
}

// Every scenario runs in -smoke mode against a real ovbus serve and
// produces its figures. Their values are not checked: this keeps the
// harness from rotting, it is not a limit test.
func TestSmokeEveryScenario(t *testing.T) {
	bin := ovbusBinary(t)
	want := map[string][]string{ // figures each scenario must produce
		"churn":      {"heap in use before", "heap in use after", "goroutines after", "RSS after"},
		"bomb":       {"peak RSS (VmHWM)", "answers"},
		"large-idle": {"plain: RSS per idle connection that never sent", "deflate: RSS per idle connection after one large message"},
		"handshake":  {"peak RSS (VmHWM)", "answers"},
		"stalled":    {"deflate: peak RSS", "plain-slow: peak ovbus_log_bytes", "configured max_queue_bytes"},
		"fullbus":    {"/health max", "/metrics max", "its answer time"},
		"slowcut":    {"never-reader", "reader-a", "clients cut"},
		"wtimeout":   {"what the stalled client saw", "configured write_timeout"},
		"shutdown":   {"SIGTERM to exit", "stalled client saw"},
		"soak":       {"messages lost by healthy readers", "RSS peak", "live heap peak, second half", "churn cycles by way of leaving", "departed writers peak"},
		"fdlimit":    {"connections upgraded", "/health max", "one more client"},
	}
	if len(want) != len(scenarios) {
		t.Fatalf("%d scenarios registered, %d checked", len(scenarios), len(want))
	}
	dir := t.TempDir()
	var files []string
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			out := filepath.Join(dir, sc.name+".json")
			var stdout, stderr bytes.Buffer
			if rc := run([]string{"-ovbus", bin, "-out", out, "-smoke", sc.name}, &stdout, &stderr); rc != 0 {
				t.Fatalf("exit %d\n%s", rc, stderr.String())
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var r result
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.Error != "" {
				t.Fatalf("error: %s", r.Error)
			}
			var have []string
			for _, f := range r.Figures {
				have = append(have, f.Name)
			}
			for _, name := range want[sc.name] {
				// Scenarios with variants prefix their figures ("burst: …").
				if !slices.ContainsFunc(have, func(h string) bool { return h == name || strings.HasSuffix(h, ": "+name) }) {
					t.Errorf("figure %q missing; have %q", name, have)
				}
			}
			files = append(files, out)
		})
	}
	// The report reads what the scenarios wrote, and draws the soak.
	var md bytes.Buffer
	var stderr bytes.Buffer
	svg := filepath.Join(dir, "soak.svg")
	args := append([]string{"report", "-svg", svg}, files...)
	if rc := run(args, &md, &stderr); rc != 0 {
		t.Fatalf("report: exit %d\n%s", rc, stderr.String())
	}
	if !bytes.Contains(md.Bytes(), []byte("| scenario | target | met |")) {
		t.Errorf("report without its table:\n%s", md.String())
	}
	if !bytes.Contains(md.Bytes(), []byte("- plot: [soak.svg]")) {
		t.Errorf("report without the soak's plot:\n%s", md.String())
	}
	if b, err := os.ReadFile(svg); err != nil || bytes.Count(b, []byte("<polyline")) < 4 {
		t.Errorf("the soak's SVG has fewer than 4 lines (%v):\n%s", err, b)
	}
}
