package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bench"
)

// saveReport writes a fan-out report with one series per target at 10 and
// 100 subscribers, whose server CPU per delivery is perDelivery at 100 and
// three times that at 10.
func saveReport(t *testing.T, name string, targets map[string]float64) string {
	t.Helper()
	r := bench.NewReport(bench.KindFanout, 1, nil)
	for _, n := range []int{10, 100} {
		for bus, v := range targets {
			if n == 10 {
				v *= 3
			}
			r.SeriesFor(scenarioName(n), bench.Target{Name: bus}).Add(map[string]float64{"clients": float64(n), bench.CurveMetric: v})
		}
	}
	r.Finish()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func scenarioName(n int) string {
	if n == 10 {
		return "10×20000"
	}
	return "100×2000"
}

func TestRunMergesReports(t *testing.T) {
	servers := saveReport(t, "fanout.json", map[string]float64{"ovbus": 0.1})
	floor := saveReport(t, "floor.json", map[string]float64{"floor-burst": 0.05})
	dir := t.TempDir()
	md, svg := filepath.Join(dir, "curve.md"), filepath.Join(dir, "curve.svg")
	if err := run([]string{servers, floor}, svg, md); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	table := string(b)
	for _, want := range []string{
		"| ovbus: server µs/delivery (min–max), ×100-subscriber | floor-burst: server µs/delivery (min–max), ×100-subscriber |",
		"| 10 | 10×20000 | 0.300 (0.300–0.300), ×3.00 | 0.150 (0.150–0.150), ×3.00 |",
		"| 100 | 100×2000 | 0.100 (0.100–0.100), ×1.00 | 0.050 (0.050–0.050), ×1.00 |",
		// The servers over the floor, at each count.
		"| subscribers | ovbus ÷ floor-burst |",
		"| 10 | ×2.00 |",
		"| 100 | ×2.00 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table has no line\n%s\nin\n%s", want, table)
		}
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "floor-burst") {
		t.Errorf("the chart has no floor-burst line (%v)", err)
	}

	// A target in two reports is an error, not two lines of one name.
	again := saveReport(t, "again.json", map[string]float64{"ovbus": 0.2})
	err = run([]string{servers, again}, "", filepath.Join(dir, "again.md"))
	if err == nil || !strings.Contains(err.Error(), `target "ovbus" is in an earlier report too`) {
		t.Errorf("err = %v, want the repeated target named", err)
	}
}
