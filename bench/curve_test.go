package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// curveReport is a fan-out report of two servers at 10, 100 and 1000
// subscribers; cpu gives each run's server µs per delivery.
func curveReport(cpu func(bus string, clients, run int) float64) *Report {
	r := NewReport(KindFanout, 3, nil)
	for _, n := range []int{1000, 10, 100} { // out of order on purpose
		for _, bus := range []string{"a", "b"} {
			s := r.SeriesFor(fmt.Sprintf("%d×%d", n, 200000/n), Target{Name: bus, URL: "ws://" + bus})
			for k := range 3 {
				s.Add(map[string]float64{"clients": float64(n), CurveMetric: cpu(bus, n, k)})
			}
		}
	}
	r.Finish()
	return r
}

func TestCurve(t *testing.T) {
	r := curveReport(func(bus string, n, k int) float64 {
		base := map[int]float64{10: 0.3, 100: 0.1, 1000: 0.15}[n]
		if bus == "b" {
			base *= 2
		}
		return base + 0.01*float64(k-1) // median base, min and max ±0.01
	})
	var md, svg bytes.Buffer
	if err := r.WriteCurveMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(md.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), md.String())
	}
	for i, want := range []string{
		"| 10 | 10×20000 | 0.300 (0.290–0.310), ×3.00 | 0.600 (0.590–0.610), ×3.00 |",
		"| 100 | 100×2000 | 0.100 (0.090–0.110), ×1.00 | 0.200 (0.190–0.210), ×1.00 |",
		"| 1000 | 1000×200 | 0.150 (0.140–0.160), ×1.50 | 0.300 (0.290–0.310), ×1.50 |",
		"| widest ratio to 100 | | ×3.00 | ×3.00 |",
	} {
		if lines[2+i] != want {
			t.Errorf("line %d: %s\nwant  %s", 2+i, lines[2+i], want)
		}
	}
	if err := r.WriteCurveSVG(&svg); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg.Bytes(), "a", "b", "subscribers", "1000×200: 0.150")
	if n := strings.Count(svg.String(), "<polyline"); n != 2 {
		t.Errorf("%d lines in the chart, want one per server", n)
	}

	// Without the server's CPU there is nothing to draw.
	empty := NewReport(KindFanout, 1, nil)
	empty.SeriesFor("5×200", Target{Name: "a"}).Add(map[string]float64{"clients": 5})
	empty.Finish()
	if err := empty.WriteCurveMarkdown(&md); err == nil {
		t.Error("a curve from a report without server CPU")
	}
	if err := empty.WriteCurveSVG(&svg); err == nil {
		t.Error("a chart from a report without server CPU")
	}
}

func TestRefCount(t *testing.T) {
	for _, c := range []struct {
		counts []int
		want   int
	}{{[]int{10, 100, 1000}, 100}, {[]int{5, 50, 1000}, 50}, {[]int{200}, 200}, {[]int{10, 1000}, 10}} {
		if got := refCount(c.counts); got != c.want {
			t.Errorf("refCount(%v) = %d, want %d", c.counts, got, c.want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{0.066, 10.378, "[0.05 0.1 0.2 0.5 1 2 5 10 20]"},
		{0.3, 0.45, "[0.2 0.5]"},
		{0.1, 0.1, "[0.1 0.2]"},
		{0.5, 0.5, "[0.5 1]"},
		{0, 1, "[0.01 0.1 1]"}, // nothing above zero: a default axis
	} {
		if got := fmt.Sprint(logTicks(c.lo, c.hi)); got != c.want {
			t.Errorf("logTicks(%v, %v) = %s, want %s", c.lo, c.hi, got, c.want)
		}
	}
}

func TestCurveFloorDashed(t *testing.T) {
	r := NewReport(KindFanout, 1, nil)
	for _, n := range []int{10, 100} {
		for _, bus := range []string{"ovbus", FloorPrefix + "burst"} {
			r.SeriesFor(fmt.Sprint(n), Target{Name: bus}).Add(map[string]float64{"clients": float64(n), CurveMetric: 0.1})
		}
	}
	r.Finish()
	var svg bytes.Buffer
	if err := r.WriteCurveSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(svg.String(), "stroke-dasharray"); n != 1 {
		t.Errorf("%d dashed lines, want the floor's only", n)
	}
}
