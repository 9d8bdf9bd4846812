//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/ovbus/ovbus/bench"
)

// writeSoakSVG draws the soak of rep, its server's memory and connections
// over time with the quiet phases shaded, into the file path.
func writeSoakSVG(path string, rep report) error {
	var soak *result
	for _, r := range rep.Results {
		if r.Scenario == "soak" && len(r.Series) > 0 {
			soak = r
		}
	}
	if soak == nil {
		return errors.New("-svg: no soak with samples among the results")
	}
	var b bytes.Buffer
	if err := bench.WriteTimeSVG(&b, soakChart(soak)); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// soakChart is the soak's chart: memory above, connections below.
func soakChart(r *result) bench.TimeChart {
	line := func(name, series string) bench.TimeLine {
		l := bench.TimeLine{Name: name}
		for _, p := range r.Series[series] {
			l.Points = append(l.Points, bench.TimePoint{T: p.T, V: p.V})
		}
		return l
	}
	live := "live heap (after GC)"
	if r.textFigure("live heap from") == liveHeapEstimate {
		live = "live heap (estimate: heap goal ÷ 2)"
	}
	counts := []bench.TimeLine{line("connections", "connections"), line("goroutines", "goroutines")}
	if _, ok := r.Series["departed writers"]; ok {
		counts = append(counts, line("departed writers", "departed writers"))
	}
	sub := r.Started.Format("2006-01-02 15:04 UTC")
	if r.Ovbus != "" {
		sub += " · ovbus " + shortCommit(r.Ovbus)
	}
	sub += fmt.Sprintf(" · %s churn cycles (four ways of leaving), %s messages sent, %s lost · target met: %s",
		formatValue(r.figureValue("churn cycles")), formatValue(r.figureValue("messages sent by the healthy senders")),
		formatValue(r.figureValue("messages lost by healthy readers")), metText(r))
	c := bench.TimeChart{
		Title:    "ovbus soak: the server's memory over time",
		Subtitle: sub,
		Panels: []bench.TimePanel{
			{Title: "Memory", Unit: "MiB", Lines: []bench.TimeLine{line("RSS", "RSS MiB"), line(live, "live heap MiB"), line("heap in use", "heap in use MiB")}},
			{Title: "Connections and goroutines", Lines: counts},
		},
		SpanLabel: "quiet phase: nothing published",
		Footnote:  "RSS from /proc; the rest from the server's /metrics. Churn, slow and bad clients go on in every phase.",
	}
	for _, s := range r.Spans {
		c.Spans = append(c.Spans, bench.TimeSpan{From: s.From, To: s.To})
	}
	return c
}

// shortCommit shortens a commit hash to 7 digits, keeping a "-dirty" mark.
func shortCommit(c string) string {
	if len(c) < 40 {
		return c
	}
	return c[:7] + c[40:]
}

// figureValue returns the value of the figure called name, 0 without one.
func (r *result) figureValue(name string) float64 {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value
		}
	}
	return 0
}

// textFigure returns the text of the figure called name, "" without one.
func (r *result) textFigure(name string) string {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Text
		}
	}
	return ""
}
