package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The cost curve ("cost grows linearly, not worse"): server CPU
// per delivery against the number of subscribers, one line per server, from
// a fan-out report whose scenarios differ in subscribers. Each point is the
// median over the repeats, with their min–max as whiskers; the table also
// gives each point as a ratio to the server's own figure at the reference
// count (100 subscribers, or the nearest one run).

// CurveRef is the subscriber count the curve's ratios refer to.
const CurveRef = 100

// CurveMetric is the metric the curve plots (a fan-out run's server CPU per
// delivery; bench/cmd/fanfloor writes its floors under it too).
const CurveMetric = "server_cpu_us_per_delivery"

// FloorPrefix begins the names of the floors bench/cmd/fanfloor writes
// (floor-burst, floor-relay): the chart draws them dashed.
const FloorPrefix = "floor-"

// logTicks returns the ticks of a logarithmic axis from lo to hi: 1, 2 and
// 5 times the powers of ten, from the last at or below lo to the first at
// or above hi (two at least).
func logTicks(lo, hi float64) []float64 {
	if !(lo > 0) || !(hi >= lo) || math.IsInf(hi, 0) {
		return []float64{0.01, 0.1, 1}
	}
	var all []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi))+1; e++ {
		for _, m := range []float64{1, 2, 5} {
			all = append(all, m*math.Pow(10, e))
		}
	}
	start, end := 0, len(all)-1
	for i, t := range all {
		if t <= lo {
			start = i
		}
		if t >= hi {
			end = i
			break
		}
	}
	return all[start : max(end, start+1)+1]
}

// curvePoint is one server at one subscriber count.
type curvePoint struct {
	clients          int
	scenario         string
	median, min, max float64
}

// curve returns, per server in report order, its points by subscriber
// count (series without the server's CPU are left out), and the subscriber
// counts in increasing order.
func (r *Report) curve() (map[string][]curvePoint, []int) {
	pts := map[string][]curvePoint{}
	var counts []int
	for _, s := range r.Series {
		c, okc := s.Summary["clients"]
		v, okv := s.Summary[CurveMetric]
		if !okc || !okv || v.N == 0 {
			continue
		}
		n := int(c.Median)
		pts[s.Bus] = append(pts[s.Bus], curvePoint{clients: n, scenario: s.Scenario, median: v.Median, min: v.Min, max: v.Max})
		if !slices.Contains(counts, n) {
			counts = append(counts, n)
		}
	}
	slices.Sort(counts)
	for b := range pts {
		slices.SortFunc(pts[b], func(x, y curvePoint) int { return x.clients - y.clients })
	}
	return pts, counts
}

// refCount returns the count of counts nearest CurveRef (on a log scale).
func refCount(counts []int) int {
	best := 0
	for _, c := range counts {
		if best == 0 || math.Abs(math.Log(float64(c)/CurveRef)) < math.Abs(math.Log(float64(best)/CurveRef)) {
			best = c
		}
	}
	return best
}

func pointAt(ps []curvePoint, clients int) (curvePoint, bool) {
	for _, p := range ps {
		if p.clients == clients {
			return p, true
		}
	}
	return curvePoint{}, false
}

// WriteCurveMarkdown writes the cost curve as a markdown table: a row per
// subscriber count, a column per server with its median µs per delivery,
// the min–max of the repeats and the ratio to its own figure at the
// reference count, and the widest ratio per server in the last row.
func (r *Report) WriteCurveMarkdown(w io.Writer) error {
	pts, counts := r.curve()
	if len(counts) == 0 {
		return fmt.Errorf("bench: no series with %s: nothing to draw", CurveMetric)
	}
	ref := refCount(counts)
	buses := r.curveBuses(pts)
	var b strings.Builder
	fmt.Fprintf(&b, "| subscribers | scenario |")
	for _, bus := range buses {
		fmt.Fprintf(&b, " %s: server µs/delivery (min–max), ×%d-subscriber |", bus, ref)
	}
	b.WriteString("\n|---:|---|")
	for range buses {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	worst := map[string]float64{}
	for _, n := range counts {
		scen := ""
		for _, bus := range buses {
			if p, ok := pointAt(pts[bus], n); ok {
				scen = p.scenario
				break
			}
		}
		fmt.Fprintf(&b, "| %d | %s |", n, scen)
		for _, bus := range buses {
			p, ok := pointAt(pts[bus], n)
			if !ok {
				b.WriteString(" – |")
				continue
			}
			ratio := "–"
			if rp, ok := pointAt(pts[bus], ref); ok && rp.median > 0 {
				x := p.median / rp.median
				ratio = fmt.Sprintf("×%.2f", x)
				worst[bus] = max(worst[bus], x, 1/x)
			}
			fmt.Fprintf(&b, " %.3f (%.3f–%.3f), %s |", p.median, p.min, p.max, ratio)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "| widest ratio to %d | |", ref)
	for _, bus := range buses {
		if x, ok := worst[bus]; ok {
			fmt.Fprintf(&b, " ×%.2f |", x)
		} else {
			b.WriteString(" – |")
		}
	}
	b.WriteString("\n")
	writeFloorRatios(&b, pts, counts, buses)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFloorRatios writes, when the curve has floors (bench/cmd/fanfloor),
// a table per floor: each server's median at each count over the floor's
// median there, the floor being what the kernel charges for that fan-out.
func writeFloorRatios(b *strings.Builder, pts map[string][]curvePoint, counts []int, buses []string) {
	var floors, servers []string
	for _, bus := range buses {
		if strings.HasPrefix(bus, FloorPrefix) {
			floors = append(floors, bus)
		} else {
			servers = append(servers, bus)
		}
	}
	if len(floors) == 0 || len(servers) == 0 {
		return
	}
	for _, fl := range floors {
		fmt.Fprintf(b, "\n| subscribers |")
		for _, srv := range servers {
			fmt.Fprintf(b, " %s ÷ %s |", srv, fl)
		}
		b.WriteString("\n|---:|")
		for range servers {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, n := range counts {
			fmt.Fprintf(b, "| %d |", n)
			f, ok := pointAt(pts[fl], n)
			for _, srv := range servers {
				if p, okp := pointAt(pts[srv], n); ok && okp && f.median > 0 {
					fmt.Fprintf(b, " ×%.2f |", p.median/f.median)
				} else {
					b.WriteString(" – |")
				}
			}
			b.WriteString("\n")
		}
	}
}

// curveBuses returns the servers with points, in report order.
func (r *Report) curveBuses(pts map[string][]curvePoint) []string {
	var out []string
	for _, bus := range r.Buses() {
		if len(pts[bus]) > 0 {
			out = append(out, bus)
		}
	}
	return out
}

// WriteCurveSVG draws the cost curve: subscribers on a log scale, server
// µs per delivery on a linear one, a line per server through the medians,
// whiskers for the min–max of the repeats.
func (r *Report) WriteCurveSVG(out io.Writer) error {
	pts, counts := r.curve()
	if len(counts) == 0 {
		return fmt.Errorf("bench: no series with %s: nothing to draw", CurveMetric)
	}
	buses := r.curveBuses(pts)
	const (
		height = 460
		left   = 70
		right  = 30
		top    = 96
		bottom = 56
	)
	plotW, plotH := float64(svgWidth-left-right), float64(height-top-bottom)
	// Both axes are logarithmic: the curve is read as ratios (to the
	// 100-subscriber point, between servers, to the floor), which a log
	// scale shows as distances, whatever the spread of the values.
	minV, maxV := math.Inf(1), 0.0
	for _, ps := range pts {
		for _, p := range ps {
			maxV = max(maxV, p.max, p.median)
			for _, v := range []float64{p.min, p.median} {
				if v > 0 {
					minV = min(minV, v)
				}
			}
		}
	}
	ticks := logTicks(minV, maxV)
	yLo, yHi := math.Log10(ticks[0]), math.Log10(ticks[len(ticks)-1])
	lo, hi := math.Log10(float64(counts[0])), math.Log10(float64(counts[len(counts)-1]))
	if hi-lo < 1 {
		lo, hi = lo-0.5, hi+0.5
	}
	lo, hi = lo-0.15*(hi-lo)/float64(max(len(counts)-1, 1)), hi+0.15*(hi-lo)/float64(max(len(counts)-1, 1))
	x := func(n int) float64 { return left + (math.Log10(float64(n))-lo)/(hi-lo)*plotW }
	y := func(v float64) float64 {
		v = max(v, ticks[0]) // a zero (no CPU time measured) sits on the axis
		return top + plotH - (math.Log10(v)-yLo)/(yHi-yLo)*plotH
	}

	var w svgWriter
	w.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n",
		svgWidth, height, svgWidth, height, fontFamily)
	w.f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w.text(svgMargin, 30, 20, "start", colorText, "bold", "ovbus bench — fan-out cost curve")
	sub := "Server CPU per delivery (µs, median; whiskers: min–max of repeats) against subscribers (log scales)"
	if r.Date != "" {
		sub += " — " + r.Date
	}
	w.text(svgMargin, 52, 12, "start", colorSubtle, "normal", sub)
	// Legend.
	lx := float64(svgMargin)
	for i, bus := range buses {
		c := palette[i%len(palette)]
		w.f(`<rect x="%.1f" y="66" width="14" height="14" fill="%s"/>`+"\n", lx, c)
		w.text(lx+20, 78, 13, "start", colorText, "normal", bus)
		lx += 40 + 8*float64(len(bus))
	}
	// Axes and grid.
	for _, t := range ticks {
		w.line(left, y(t), left+plotW, y(t), colorGrid, 1)
		w.text(left-8, y(t)+4, 11, "end", colorSubtle, "normal", strconv.FormatFloat(t, 'g', -1, 64))
	}
	for _, n := range counts {
		w.line(x(n), top, x(n), top+plotH, colorGrid, 1)
		w.text(x(n), top+plotH+18, 11, "middle", colorSubtle, "normal", fmt.Sprint(n))
	}
	w.line(left, top+plotH, left+plotW, top+plotH, colorAxis, 1)
	w.line(left, top, left, top+plotH, colorAxis, 1)
	w.text(left+plotW/2, top+plotH+40, 12, "middle", colorText, "normal", "subscribers")
	// Lines, points, whiskers.
	for i, bus := range buses {
		c := palette[i%len(palette)]
		ps := pts[bus]
		var path []string
		for _, p := range ps {
			path = append(path, fmt.Sprintf("%.1f,%.1f", x(p.clients), y(p.median)))
		}
		dash := "" // a floor (bench/cmd/fanfloor) is no server: dashed
		if strings.HasPrefix(bus, FloorPrefix) {
			dash = ` stroke-dasharray="6 4"`
		}
		w.f(`<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", c, dash, strings.Join(path, " "))
		for _, p := range ps {
			px := x(p.clients) + float64(i-len(buses)/2)*3 // whiskers side by side
			w.line(px, y(p.min), px, y(p.max), c, 1.5)
			w.f(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s %s: %.3f µs (%.3f–%.3f)</title></circle>`+"\n",
				x(p.clients), y(p.median), c, html.EscapeString(bus), html.EscapeString(p.scenario), p.median, p.min, p.max)
		}
	}
	w.f("</svg>\n")
	_, err := io.WriteString(out, w.b.String())
	return err
}
