// Command curve draws the fan-out cost curve (server CPU per delivery
// against subscribers) from reports saved by
// `ovbus bench --save-json` (and `bench/cmd/fanfloor -json`, whose floors
// then stand beside the servers): a markdown table on stdout (or --md FILE)
// and an SVG chart (--svg FILE). Several reports are drawn as one, their
// targets in the order of the files. bench/curve.sh runs the scenarios and
// calls it.
//
//	go run ./bench/cmd/curve --svg curve.svg [--md curve.md] fanout.json [floor.json ...]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/ovbus/ovbus/bench"
)

func main() {
	svg := flag.String("svg", "", "write the SVG chart to `FILE`")
	md := flag.String("md", "", "write the markdown table to `FILE` instead of stdout")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: curve [--svg FILE] [--md FILE] REPORT.json [REPORT.json ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Args(), *svg, *md); err != nil {
		fmt.Fprintln(os.Stderr, "curve:", err)
		os.Exit(1)
	}
}

func run(from []string, svg, md string) error {
	var rep bench.Report
	for i, name := range from {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var r bench.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if r.Kind != bench.KindFanout {
			return fmt.Errorf("%s: a %q report, not a fan-out one", name, r.Kind)
		}
		if i == 0 {
			rep = r // its date and machine head the chart
			continue
		}
		for _, bus := range r.Buses() {
			if slices.Contains(rep.Buses(), bus) {
				return fmt.Errorf("%s: target %q is in an earlier report too", name, bus)
			}
		}
		rep.Series = append(rep.Series, r.Series...)
	}
	out := io.Writer(os.Stdout)
	if md != "" {
		f, err := os.Create(md)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	if err := rep.WriteCurveMarkdown(out); err != nil {
		return err
	}
	if svg == "" {
		return nil
	}
	f, err := os.Create(svg)
	if err != nil {
		return err
	}
	if err := rep.WriteCurveSVG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
