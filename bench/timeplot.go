package bench

import (
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// TimeChart is a line chart of quantities over time, such as a soak's
// memory: panels stacked one above the other, each with its own y axis
// from zero (so that a flat line looks flat and a drift is seen at its
// true size), all sharing the time axis, with shaded spans across them
// (phases of the run).
type TimeChart struct {
	Title     string
	Subtitle  string
	Panels    []TimePanel
	Spans     []TimeSpan
	SpanLabel string // what a shaded span is, for the legend
	Footnote  string
}

// TimePanel is one chart of lines that share a unit.
type TimePanel struct {
	Title string
	Unit  string // of the y axis: "MiB", "" for counts
	Lines []TimeLine
}

// TimeLine is one quantity over time.
type TimeLine struct {
	Name   string
	Points []TimePoint
}

// TimePoint is a value at T seconds from the start.
type TimePoint struct{ T, V float64 }

// TimeSpan is a phase of the run, in seconds from the start.
type TimeSpan struct{ From, To float64 }

// Layout of a time chart, in pixels.
const (
	timeTitleH  = 64
	timePanelH  = 250
	timePanelT  = 40 // the panel's title and legend, above its plot
	timePanelB  = 34 // the time ticks, below it
	timeFootH   = 40
	timePlotL   = svgMargin + 62
	timePlotR   = svgWidth - svgMargin - 10
	colorSpan   = "#e8edf3"
	timeMinutes = 600 // seconds from which the time axis counts minutes
)

// WriteTimeSVG draws c as an SVG chart.
func WriteTimeSVG(out io.Writer, c TimeChart) error {
	if len(c.Panels) == 0 {
		return errors.New("time chart: no panels")
	}
	tMax := 0.0
	for _, p := range c.Panels {
		for _, l := range p.Lines {
			for _, pt := range l.Points {
				tMax = math.Max(tMax, pt.T)
			}
		}
	}
	for _, s := range c.Spans {
		tMax = math.Max(tMax, s.To)
	}
	if tMax <= 0 {
		tMax = 1
	}
	// The time axis: minutes for a long run, seconds for a short one, and
	// only the ticks within the run (its end is the right edge).
	unit, div := "s", 1.0
	if tMax >= timeMinutes {
		unit, div = "min", 60
	}
	var tTicks []float64
	for _, t := range niceTicks(tMax / div) {
		if t*div <= tMax*(1+1e-9) {
			tTicks = append(tTicks, t)
		}
	}
	xOf := func(t float64) float64 { return timePlotL + (timePlotR-timePlotL)*t/tMax }

	height := timeTitleH + len(c.Panels)*timePanelH + timeFootH
	var w svgWriter
	w.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n",
		svgWidth, height, svgWidth, height, fontFamily)
	w.f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w.text(svgMargin, 30, 20, "start", colorText, "bold", c.Title)
	w.text(svgMargin, 50, 12, "start", colorSubtle, "normal", c.Subtitle)

	for pi, p := range c.Panels {
		top := float64(timeTitleH + pi*timePanelH)
		plotT, plotB := top+timePanelT, top+timePanelH-timePanelB
		w.text(svgMargin, top+14, 14, "start", colorText, "bold", p.Title)

		// Legend: each line, then (once) the shaded span.
		x := float64(timePlotL)
		for li, l := range p.Lines {
			w.line(x, top+26, x+18, top+26, palette[li%len(palette)], 3)
			w.text(x+24, top+30, 12, "start", colorText, "normal", l.Name)
			x += 24 + 6.8*float64(len([]rune(l.Name))) + 22
		}
		if pi == 0 && len(c.Spans) > 0 && c.SpanLabel != "" {
			w.f(`<rect x="%.1f" y="%.1f" width="18" height="12" fill="%s"/>`+"\n", x, top+20, colorSpan)
			w.text(x+24, top+30, 12, "start", colorSubtle, "normal", c.SpanLabel)
		}

		for _, s := range c.Spans {
			w.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
				xOf(s.From), plotT, xOf(s.To)-xOf(s.From), plotB-plotT, colorSpan)
		}
		vMax := 0.0
		n := 0
		for _, l := range p.Lines {
			for _, pt := range l.Points {
				vMax = math.Max(vMax, pt.V)
				n++
			}
		}
		yOf := w.yAxis(timePlotL, timePlotR, plotT, plotB, vMax*1.05, tickLabel)
		if p.Unit != "" {
			w.text(timePlotL-6, plotT-6, 11, "end", colorSubtle, "normal", p.Unit)
		}
		for _, t := range tTicks {
			w.line(xOf(t*div), plotB, xOf(t*div), plotB+4, colorAxis, 1)
			w.text(xOf(t*div), plotB+16, 11, "middle", colorSubtle, "normal", tickLabel(t)+" "+unit)
		}
		w.line(timePlotL, plotB, timePlotR, plotB, colorAxis, 1)
		w.line(timePlotL, plotT, timePlotL, plotB, colorAxis, 1)
		if n == 0 {
			w.text((timePlotL+timePlotR)/2, (plotT+plotB)/2, 12, "middle", colorSubtle, "normal", "no data")
			continue
		}
		for li, l := range p.Lines {
			if len(l.Points) == 0 {
				continue
			}
			color := palette[li%len(palette)]
			pts := make([]string, len(l.Points))
			for i, pt := range l.Points {
				pts[i] = fmt.Sprintf("%.1f,%.1f", xOf(pt.T), yOf(pt.V))
			}
			w.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"><title>%s</title></polyline>`+"\n",
				strings.Join(pts, " "), color, html.EscapeString(l.Name))
			if len(l.Points) <= 80 { // beyond that the dots hide the line
				for _, pt := range l.Points {
					w.f(`<circle cx="%.1f" cy="%.1f" r="2.2" fill="%s"/>`+"\n", xOf(pt.T), yOf(pt.V), color)
				}
			}
		}
	}
	w.text(svgMargin, float64(height-16), 11, "start", colorSubtle, "normal", c.Footnote)
	w.f("</svg>\n")
	_, err := io.WriteString(out, w.b.String())
	return err
}

// tickLabel prints an axis value without the float noise that adding up a
// step leaves (0.30000000000000004).
func tickLabel(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}
