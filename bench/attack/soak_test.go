//go:build linux

package main

import (
	"testing"
	"time"
)

func TestSoakPhases(t *testing.T) {
	p := phases{busy: 60 * time.Second, quiet: 30 * time.Second}
	for _, c := range []struct {
		at    time.Duration
		quiet bool
	}{{0, false}, {59 * time.Second, false}, {60 * time.Second, true}, {89 * time.Second, true}, {90 * time.Second, false}, {150 * time.Second, true}} {
		if got := p.quietAt(c.at); got != c.quiet {
			t.Errorf("quietAt(%v) = %v, want %v", c.at, got, c.quiet)
		}
	}
	if (phases{busy: time.Minute}).quietAt(time.Hour) {
		t.Error("without quiet phases a moment was quiet")
	}
	spans := p.quietSpans(200)
	want := []span{{"quiet", 60, 90}, {"quiet", 150, 180}}
	if len(spans) != len(want) {
		t.Fatalf("quietSpans(200) = %v, want %v", spans, want)
	}
	for i := range want {
		if spans[i] != want[i] {
			t.Errorf("span %d = %v, want %v", i, spans[i], want[i])
		}
	}
	if s := p.quietSpans(70); len(s) != 1 || s[0].To != 70 {
		t.Errorf("quietSpans(70) = %v, want one span cut at 70", s)
	}

	// The samples: every 10 s, and just inside each end of the quiet phases.
	var at []time.Duration
	for d := time.Duration(0); d < 100*time.Second; {
		d = p.nextSample(d, 10*time.Second)
		at = append(at, d)
	}
	ms := time.Millisecond
	wantAt := []time.Duration{10e3 * ms, 20e3 * ms, 30e3 * ms, 40e3 * ms, 50e3 * ms, 60e3 * ms, 60200 * ms, 70e3 * ms,
		80e3 * ms, 89800 * ms, 90e3 * ms, 100e3 * ms}
	if len(at) != len(wantAt) {
		t.Fatalf("samples at %v, want %v", at, wantAt)
	}
	for i := range at {
		if at[i] != wantAt[i] {
			t.Fatalf("samples at %v, want %v", at, wantAt)
		}
	}
	for _, d := range []time.Duration{60200 * ms, 89800 * ms} {
		if !p.quietAt(d) {
			t.Errorf("the edge sample at %v is not in a quiet phase", d)
		}
	}
}

// The flat rule catches memory kept through quiet phases and swept away by
// the next busy one, which the halves' peaks alone do not.
func TestSoakDrift(t *testing.T) {
	quiet := []span{{"quiet", 60, 120}, {"quiet", 180, 240}}
	series := func(v func(at float64) float64) []sample {
		var s []sample
		for at := 0.0; at <= 300; at += 10 {
			s = append(s, sample{at, v(at)})
		}
		return s
	}
	inQuiet := func(at float64) (float64, bool) {
		for _, q := range quiet {
			if at >= q.From && at <= q.To {
				return at - q.From, true
			}
		}
		return 0, false
	}
	sawtooth := series(func(at float64) float64 { // 0.5 MiB/s kept while quiet
		if d, ok := inQuiet(at); ok {
			return 10 + d/2
		}
		return 10
	})
	steady := series(func(at float64) float64 { return 10 + float64(int(at)%20)/10 })
	rising := series(func(at float64) float64 { return 10 + at/10 })
	for _, c := range []struct {
		name   string
		s      []sample
		flat   bool
		growth float64
	}{{"sawtooth", sawtooth, false, 30}, {"steady", steady, true, 0}, {"rising", rising, false, 6}} {
		d := measureDrift(c.s, quiet)
		if d.flat(liveSlackMiB) != c.flat {
			t.Errorf("%s: flat = %v, want %v (%+v)", c.name, !c.flat, c.flat, d)
		}
		if d.quietGrowth != c.growth {
			t.Errorf("%s: quiet growth %.2f, want %.2f", c.name, d.quietGrowth, c.growth)
		}
	}
	if d := measureDrift(sawtooth, quiet); d.firstHalf != d.secondHalf {
		t.Errorf("sawtooth: the halves' peaks differ (%+v): the test no longer shows why the quiet rule is needed", d)
	}
	if d := measureDrift(steady, nil); d.quietFrom != -1 || !d.flat(liveSlackMiB) {
		t.Errorf("no quiet phase: %+v", d)
	}
}
