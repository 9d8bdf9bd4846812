package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bench"
)

// TestBenchSteady runs a tiny steady comparison of two buses through the CLI:
// a steady preset list implies --steady, the report is a steady one, every
// count adds up, and the saved report replays with --from.
func TestBenchSteady(t *testing.T) {
	_, a := cliBus(t)
	_, b := cliBus(t)
	saved := filepath.Join(t.TempDir(), "steady.json")
	code, out, errs := benchRun("bench", "--preset", "3@200:0.1,2@100", "--duration", "300ms", "--binary-size", "64k-100k",
		"--repeat", "2", "--pause", "1ms", "--format", "markdown", "--save-json", saved, "--plot", filepath.Join(t.TempDir(), "s.svg"),
		"one="+a, "two="+b)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"3c 200/s 10%bin", "2c 100/s json", "| one |", "| two |", "p99.9", "server µs/frame",
		"reordered", "Headline: one", "server CPU/frame", "p99.9 latency", "scheduled send time"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	raw, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Kind != bench.KindSteady || len(rep.Series) != 4 || rep.Settings["duration"] != "300ms" || rep.Settings["binary_size"] != "65536-102400" {
		t.Fatalf("report: kind %q, %d series, settings %v", rep.Kind, len(rep.Series), rep.Settings)
	}
	for _, s := range rep.Series {
		for _, r := range s.Runs {
			// 3 clients at 200/s for 300 ms: 60 frames, each to 3 clients.
			want := map[string]float64{"planned": 60, "sent": 60, "expected": 180, "delivered": 180}
			if s.Scenario == "2c 100/s json" {
				want = map[string]float64{"planned": 30, "sent": 30, "expected": 60, "delivered": 60, "sent_binary": 0}
			}
			for k, v := range want {
				if r[k] != v {
					t.Errorf("%s %s: %s %v, want %v", s.Bus, s.Scenario, k, r[k], v)
				}
			}
			if r["lost"] != 0 || r["out_of_order"] != 0 || r["conn_errors"] != 0 || r["server_cpu_us_per_frame"] <= 0 {
				t.Errorf("%s %s: %v", s.Bus, s.Scenario, r)
			}
		}
	}
	code, replay, errs := benchRun("bench", "--from", saved, "--format", "markdown")
	if code != 0 || replay != out {
		t.Errorf("--from: exit %d (%s), output differs:\n%s\nfrom the run's:\n%s", code, errs, replay, out)
	}
	if code, _, errs := benchRun("loadtest", "--from", saved); code != 1 || !strings.Contains(errs, `a "steady" report, not loadtest`) {
		t.Errorf("loadtest --from a steady report: exit %d, %q", code, errs)
	}
}

func TestBenchSteadyUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--steady", "--messages", "10"},
		{"bench", "--preset", "steady", "--size", "500"},
		{"bench", "--steady", "--warmup", "3"},
		{"bench", "--duration", "5s"},
		{"bench", "--binary-share", "0.5"},
		{"bench", "--steady", "--json-size", "2000-200"},
		{"bench", "--steady", "--json-size", "10-20"},
		{"bench", "--steady", "--binary-size", "10-20"},
		{"bench", "--steady", "--binary-share", "2"},
		{"bench", "--steady", "--duration", "0s"},
		{"bench", "--steady", "--seed", "0"},
		{"bench", "--steady", "--rate", "-1"},
		{"bench", "--steady", "--preset", "5@0"},
		{"bench", "--preset", "steady,5x200"},
	} {
		if code, _, errs := benchRun(args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}
