// Command curve draws the fan-out cost curve (server CPU per delivery
// against subscribers, issue 13) from a report saved by
// `ovbus bench --save-json`: a markdown table on stdout (or --md FILE) and an
// SVG chart (--svg FILE). bench/curve.sh runs the scenarios and calls it.
//
//	go run ./bench/cmd/curve --svg curve.svg [--md curve.md] fanout.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ovbus/ovbus/bench"
)

func main() {
	svg := flag.String("svg", "", "write the SVG chart to `FILE`")
	md := flag.String("md", "", "write the markdown table to `FILE` instead of stdout")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: curve [--svg FILE] [--md FILE] REPORT.json")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *svg, *md); err != nil {
		fmt.Fprintln(os.Stderr, "curve:", err)
		os.Exit(1)
	}
}

func run(from, svg, md string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	if rep.Kind != bench.KindFanout {
		return fmt.Errorf("%s: a %q report, not a fan-out one", from, rep.Kind)
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
