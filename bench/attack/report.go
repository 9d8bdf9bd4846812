//go:build linux

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// report is the combined file bench/attack.sh writes: the run's facts and
// every scenario's result.
type report struct {
	Meta    map[string]string `json:"meta"`
	Results []*result         `json:"results"`
}

// runReport merges result files into one JSON file and a markdown table.
func runReport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("attack report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	md := fs.String("md", "", "write the markdown report here (default: stdout)")
	js := fs.String("json", "", "write the combined JSON here")
	meta := fs.String("meta", "", "a JSON object of strings (commit, command, load…) to put at the top")
	svg := fs.String("svg", "", "draw the soak's memory and connections over time here (SVG), linked from the markdown")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	rep := report{Meta: map[string]string{}}
	if *meta != "" {
		b, err := os.ReadFile(*meta)
		if err == nil {
			err = json.Unmarshal(b, &rep.Meta)
		}
		if err != nil {
			fmt.Fprintln(stderr, "attack report:", err)
			return 1
		}
	}
	for _, p := range fs.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintln(stderr, "attack report:", err)
			return 1
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			fmt.Fprintf(stderr, "attack report: %s: %v\n", p, err)
			return 1
		}
		rep.Results = append(rep.Results, &r)
	}
	if *js != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*js, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "attack report:", err)
			return 1
		}
	}
	plot := ""
	if *svg != "" {
		if err := writeSoakSVG(*svg, rep); err != nil {
			fmt.Fprintln(stderr, "attack report:", err)
			return 1
		}
		plot = *svg
		if *md != "" {
			if rel, err := filepath.Rel(filepath.Dir(*md), *svg); err == nil {
				plot = rel
			}
		}
	}
	w := stdout
	if *md != "" {
		f, err := os.Create(*md)
		if err != nil {
			fmt.Fprintln(stderr, "attack report:", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	writeMarkdown(w, rep, plot)
	return 0
}

// writeMarkdown writes the report; plot, when set, is the soak's chart,
// linked from its section.
func writeMarkdown(w io.Writer, rep report, plot string) {
	fmt.Fprintln(w, "# Limits under attack: harness results")
	fmt.Fprintln(w)
	keys := make([]string, 0, len(rep.Meta))
	for k := range rep.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "- %s: %s\n", k, rep.Meta[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | target | met | load at start | seconds |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f |\n", r.Scenario, r.Target, metText(r), r.Load, r.Seconds)
	}
	for _, r := range rep.Results {
		fmt.Fprintf(w, "\n## %s\n\n%s.\n\n", r.Scenario, r.Doc)
		fmt.Fprintf(w, "- command: `%s`\n- target: %s — **%s**\n- load average at start: %s\n", r.Command, r.Target, metText(r), r.Load)
		if r.Ovbus != "" {
			fmt.Fprintf(w, "- ovbus commit: %s, harness commit: %s\n", r.Ovbus, r.Harness)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "- error: %s\n", r.Error)
		}
		if plot != "" && r.Scenario == "soak" {
			fmt.Fprintf(w, "- plot: [%s](%s)\n", filepath.Base(plot), plot)
		}
		labels := make([]string, 0, len(r.Configs))
		for l := range r.Configs {
			labels = append(labels, l)
		}
		sort.Strings(labels)
		for _, l := range labels {
			b, _ := json.Marshal(r.Configs[l])
			fmt.Fprintf(w, "- config %s: `%s`\n", l, b)
		}
		fmt.Fprintln(w, "\n| figure | value |\n|---|---|")
		for _, f := range r.Figures {
			v := f.Text
			if v == "" {
				v = formatValue(f.Value) + " " + f.Unit
			}
			fmt.Fprintf(w, "| %s | %s |\n", f.Name, strings.ReplaceAll(strings.TrimSpace(v), "|", "\\|"))
		}
		series := make([]string, 0, len(r.Series))
		for n := range r.Series {
			series = append(series, n)
		}
		sort.Strings(series)
		for _, n := range series {
			fmt.Fprintf(w, "\n%s over time: %s\n", n, seriesText(r.Series[n]))
		}
		if len(r.Notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range r.Notes {
				fmt.Fprintf(w, "- note: %s\n", n)
			}
		}
	}
}

func metText(r *result) string {
	switch {
	case r.Error != "":
		return "error"
	case r.Met == nil:
		return "n/a"
	case *r.Met:
		return "yes"
	}
	return "no"
}

func formatValue(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1 || v <= -1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// seriesText prints at most 20 points of a series, "t=1s 12.3".
func seriesText(s []sample) string {
	step := max(len(s)/20, 1)
	var b strings.Builder
	for i := 0; i < len(s); i += step {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.1fs %s", s[i].T, formatValue(s[i].V))
	}
	return b.String()
}
