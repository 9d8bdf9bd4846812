package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// The chart is plain SVG written with the standard library: a grouped bar
// chart of throughput per scenario and server (median, with the min–max of
// the repeats as whiskers), and one small log-scale chart per scenario of
// the latency percentiles, a line per server.

// palette is Tableau 10: distinct in colour and in lightness.
var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

const (
	svgWidth    = 980
	svgMargin   = 20
	fontFamily  = "Helvetica, Arial, sans-serif"
	colorAxis   = "#444"
	colorGrid   = "#e3e3e3"
	colorText   = "#222"
	colorSubtle = "#666"
)

type svgWriter struct {
	b strings.Builder
}

func (w *svgWriter) f(format string, a ...any) { fmt.Fprintf(&w.b, format, a...) }

func (w *svgWriter) text(x, y float64, size int, anchor, fill, weight, s string) {
	w.f(`<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s" fill="%s" font-weight="%s">%s</text>`+"\n",
		x, y, size, anchor, fill, weight, html.EscapeString(s))
}

func (w *svgWriter) line(x1, y1, x2, y2 float64, stroke string, width float64) {
	w.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", x1, y1, x2, y2, stroke, width)
}

// WriteSVG draws the report as an SVG chart.
func (r *Report) WriteSVG(out io.Writer) error {
	buses := r.Buses()
	scen := r.Scenarios()
	color := func(bus string) string {
		for i, b := range buses {
			if b == bus {
				return palette[i%len(palette)]
			}
		}
		return colorSubtle
	}
	thrKey, thrTitle, latPrefix, latTitle := "deliveries_per_sec", "Throughput: deliveries/s (median; whiskers: min–max of repeats)", "latency", "Latency percentiles (receive − send), log scale"
	title := "ovbus bench — OVOS fan-out"
	unit := "clients × messages"
	value := FormatRate
	pcts := []struct{ key, label string }{{"min", "min"}, {"p50", "p50"}, {"p95", "p95"}, {"p99", "p99"}, {"max", "max"}}
	switch r.Kind {
	case KindLoad:
		thrKey, thrTitle, latPrefix, latTitle = "msg_per_sec", "Throughput: echoes/s (median; whiskers: min–max of repeats)", "rtt", "Round-trip time percentiles, log scale"
		title, unit = "ovbus loadtest — echo", "connections × payload (window)"
	case KindSteady:
		// At a fixed rate every server delivers the same: the bars are
		// what each one spends on it.
		thrKey, thrTitle = "server_cpu_us_per_frame", "Server CPU per frame, µs (median; whiskers: min–max of repeats; lower is better)"
		latTitle = "Latency percentiles (from the scheduled send time), log scale"
		title, unit = "ovbus bench --steady — steady traffic", "clients, frames/s in total, binary share"
		value = func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }
		pcts = []struct{ key, label string }{{"p50", "p50"}, {"p90", "p90"}, {"p99", "p99"}, {"p999", "p99.9"}, {"max", "max"}}
	}

	// Layout.
	const (
		titleH   = 64
		legendH  = 34
		barH     = 300
		gap      = 56
		smallH   = 230
		smallGap = 24
	)
	cols := min(3, max(len(scen), 1))
	rows := (len(scen) + cols - 1) / cols
	height := titleH + legendH + barH + gap + rows*(smallH+smallGap) + 24

	var w svgWriter
	w.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n",
		svgWidth, height, svgWidth, height, fontFamily)
	w.f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w.text(svgMargin, 30, 20, "start", colorText, "bold", title)
	sub := fmt.Sprintf("%s · %s %s · %s", r.Date, r.Machine.cpusText(), r.Machine.CPUModel, r.Machine.GoVersion)
	if r.Repeat > 1 {
		sub += fmt.Sprintf(" · median of %d runs", r.Repeat)
	}
	w.text(svgMargin, 50, 12, "start", colorSubtle, "normal", sub)

	// Legend.
	x := float64(svgMargin)
	ly := float64(titleH + 14)
	for _, b := range buses {
		w.f(`<rect x="%.1f" y="%.1f" width="14" height="14" rx="2" fill="%s"/>`+"\n", x, ly-11, color(b))
		w.text(x+20, ly, 13, "start", colorText, "normal", b)
		x += 20 + 7.5*float64(len([]rune(b))) + 26
	}

	// Throughput bars.
	top := float64(titleH + legendH)
	w.text(svgMargin, top+4, 14, "start", colorText, "bold", thrTitle)
	plotL, plotR := float64(svgMargin+62), float64(svgWidth-svgMargin)
	plotT, plotB := top+22, top+barH-34
	maxV := 0.0
	for _, s := range r.Series {
		if sp, ok := s.Summary[thrKey]; ok {
			maxV = math.Max(maxV, math.Max(sp.Max, sp.Median))
		}
	}
	yOf := w.yAxis(plotL, plotR, plotT, plotB, maxV*1.12, value) // headroom for the value labels
	w.line(plotL, plotB, plotR, plotB, colorAxis, 1)
	w.line(plotL, plotT, plotL, plotB, colorAxis, 1)
	if len(scen) > 0 && len(buses) > 0 {
		groupW := (plotR - plotL) / float64(len(scen))
		barW := math.Min(36, groupW*0.8/float64(len(buses)))
		for si, sc := range scen {
			gx := plotL + groupW*float64(si) + (groupW-barW*float64(len(buses)))/2
			for bi, b := range buses {
				s := r.find(sc, b)
				bx := gx + barW*float64(bi)
				if s == nil {
					continue
				}
				sp, ok := s.Summary[thrKey]
				if !ok || sp.N == 0 {
					w.text(bx+barW/2, plotB-4, 10, "middle", colorSubtle, "normal", "×")
					continue
				}
				y := yOf(sp.Median)
				opacity := "1"
				if !s.valid() {
					opacity = "0.35" // lost messages: shown faded
				}
				w.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%s"><title>%s %s: %s/s</title></rect>`+"\n",
					bx+1, y, barW-2, plotB-y, color(b), opacity, html.EscapeString(b), html.EscapeString(sc), FormatRate(sp.Median))
				if sp.N > 1 {
					cx := bx + barW/2
					w.line(cx, yOf(sp.Min), cx, yOf(sp.Max), colorAxis, 1)
					w.line(cx-3, yOf(sp.Min), cx+3, yOf(sp.Min), colorAxis, 1)
					w.line(cx-3, yOf(sp.Max), cx+3, yOf(sp.Max), colorAxis, 1)
				}
				if barW >= 14 {
					ty := math.Min(yOf(math.Max(sp.Max, sp.Median)), y) - 4
					w.f(`<text x="%.1f" y="%.1f" font-size="9" text-anchor="start" fill="%s" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
						bx+barW/2+3, ty, colorSubtle, bx+barW/2+3, ty, value(sp.Median))
				}
			}
			w.text(plotL+groupW*(float64(si)+0.5), plotB+18, 12, "middle", colorText, "normal", sc)
		}
	}
	w.text((plotL+plotR)/2, plotB+32, 11, "middle", colorSubtle, "normal", unit)

	// Latency small multiples.
	top = float64(titleH+legendH+barH+gap) - 12
	w.text(svgMargin, top, 14, "start", colorText, "bold", latTitle)
	cellW := float64(svgWidth-2*svgMargin) / float64(cols)
	for si, sc := range scen {
		cx := float64(svgMargin) + cellW*float64(si%cols)
		cy := top + 12 + float64(si/cols)*(smallH+smallGap)
		l, rgt := cx+52, cx+cellW-14
		t, b := cy+24, cy+smallH-36
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range r.Series {
			if s.Scenario != sc {
				continue
			}
			for _, p := range pcts {
				if sp, ok := s.Summary[latPrefix+"_"+p.key+"_ms"]; ok && sp.N > 0 && sp.Median > 0 {
					lo, hi = math.Min(lo, sp.Median), math.Max(hi, sp.Median)
				}
			}
		}
		w.text((l+rgt)/2, cy+12, 13, "middle", colorText, "bold", sc)
		if math.IsInf(lo, 1) {
			w.text((l+rgt)/2, (t+b)/2, 11, "middle", colorSubtle, "normal", "no data")
			continue
		}
		dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if dHi <= dLo {
			dHi = dLo + 1
		}
		ly := func(v float64) float64 {
			return b - (b-t)*(math.Log10(v)-dLo)/(dHi-dLo)
		}
		w.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fafafa" stroke="%s" stroke-width="0.5"/>`+"\n", l, t, rgt-l, b-t, colorGrid)
		for d := dLo; d <= dHi; d++ {
			y := ly(math.Pow(10, d))
			w.line(l, y, rgt, y, colorGrid, 1)
			w.text(l-5, y+4, 10, "end", colorSubtle, "normal", decadeLabel(int(d)))
			if d < dHi && dHi-dLo <= 4 {
				for _, m := range []float64{2, 5} {
					y := ly(m * math.Pow(10, d))
					w.line(l, y, rgt, y, "#f0f0f0", 0.8)
				}
			}
		}
		xOf := func(i int) float64 { return l + (rgt-l)*(float64(i)+0.5)/float64(len(pcts)) }
		for i, p := range pcts {
			w.text(xOf(i), b+15, 10, "middle", colorSubtle, "normal", p.label)
		}
		w.line(l, b, rgt, b, colorAxis, 1)
		w.line(l, t, l, b, colorAxis, 1)
		for _, bus := range buses {
			s := r.find(sc, bus)
			if s == nil {
				continue
			}
			var pts []string
			for i, p := range pcts {
				if sp, ok := s.Summary[latPrefix+"_"+p.key+"_ms"]; ok && sp.N > 0 && sp.Median > 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(i), ly(sp.Median)))
				}
			}
			if len(pts) == 0 {
				continue
			}
			dash := ""
			if !s.valid() {
				dash = ` stroke-dasharray="4 3"`
			}
			w.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s><title>%s</title></polyline>`+"\n",
				strings.Join(pts, " "), color(bus), dash, html.EscapeString(bus))
			for _, pt := range pts {
				xy := strings.SplitN(pt, ",", 2)
				w.f(`<circle cx="%s" cy="%s" r="2.6" fill="%s"/>`+"\n", xy[0], xy[1], color(bus))
			}
		}
	}
	foot := "Faded bars and dashed lines: the server lost messages or connections in some run."
	w.text(svgMargin, float64(height-14), 11, "start", colorSubtle, "normal", foot)
	w.f("</svg>\n")
	_, err := io.WriteString(out, w.b.String())
	return err
}

// yAxis draws the grid of a linear y axis from 0 to at least maxV between
// plotT and plotB, labelled left of plotL, and returns where a value falls.
func (w *svgWriter) yAxis(plotL, plotR, plotT, plotB, maxV float64, label func(float64) string) func(float64) float64 {
	ticks := niceTicks(maxV)
	yMax := ticks[len(ticks)-1]
	yOf := func(v float64) float64 { return plotB - (plotB-plotT)*v/yMax }
	for _, t := range ticks {
		y := yOf(t)
		w.line(plotL, y, plotR, y, colorGrid, 1)
		w.text(plotL-6, y+4, 11, "end", colorSubtle, "normal", label(t))
	}
	return yOf
}

// decadeLabel names 10^d milliseconds: 10µs, 100µs, 1ms, …, 10s.
func decadeLabel(d int) string {
	switch {
	case d < -3:
		return fmt.Sprintf("1e%dms", d)
	case d < 0:
		return fmt.Sprintf("%dµs", int(math.Round(math.Pow(10, float64(d+3)))))
	case d < 3:
		return fmt.Sprintf("%dms", int(math.Round(math.Pow(10, float64(d)))))
	}
	return fmt.Sprintf("%ds", int(math.Round(math.Pow(10, float64(d-3)))))
}

func (r *Report) find(scenario, bus string) *Series {
	for _, s := range r.Series {
		if s.Scenario == scenario && s.Bus == bus {
			return s
		}
	}
	return nil
}

// niceTicks returns 0 and evenly spaced round values up to at least max
// (1, 2 or 5 times a power of ten apart, 4 to 8 of them).
func niceTicks(maxV float64) []float64 {
	if maxV <= 0 || math.IsNaN(maxV) || math.IsInf(maxV, 0) {
		return []float64{0, 1}
	}
	raw := maxV / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for v := 0.0; ; v += step {
		ticks = append(ticks, v)
		if v >= maxV*1.04 {
			break
		}
	}
	return ticks
}
