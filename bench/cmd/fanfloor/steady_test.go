//go:build linux

package main

import (
	"testing"
	"time"

	"github.com/ovbus/ovbus/bench"
)

// The writer finds frame boundaries with frameLen in what the reader writes
// with appendHeader: they must agree at every size a steady run sends, and a
// frame is not whole until its last byte is there.
func TestSteadyFraming(t *testing.T) {
	for _, n := range []int{126, 200, 2000, 65535, 65536, 1 << 20} {
		for _, bin := range []bool{false, true} {
			f := appendHeader(nil, bin, n)
			f = append(f, make([]byte, n)...)
			if len(f) != frameBytes(n) || frameLen(f) != len(f) {
				t.Errorf("payload %d: %d bytes, frameBytes %d, frameLen %d", n, len(f), frameBytes(n), frameLen(f))
			}
			if op := f[0]; (op == 0x82) != bin || op&0x80 == 0 || f[1]&0x80 != 0 {
				t.Errorf("payload %d binary %v: header % x", n, bin, f[:2])
			}
			if frameLen(f[:3]) != 0 || (n >= 1<<16 && frameLen(f[:9]) != 0) {
				t.Errorf("payload %d: a partial header has a length", n)
			}
		}
	}
}

// runBytes counts what every client receives: every frame of the plan.
func TestRunBytes(t *testing.T) {
	sc := bench.SteadyScenario{Clients: 3, Rate: 100, BinaryShare: 0.5}
	frames, bytes := runBytes(sc, time.Second)
	plan := bench.SteadyPlan{Clients: 3, Rate: 100, Duration: time.Second}
	want := 0
	for i := range 3 {
		for k := range plan.Frames(i) {
			size, _ := mixOf(sc).Frame(bench.DefaultSteadySeed, i, k)
			want += frameBytes(size)
		}
	}
	if frames != 100 || bytes != want {
		t.Errorf("%d frames, %d bytes; want 100, %d", frames, bytes, want)
	}
	if arg := steadyScenarioArg(sc); arg != "3@100:0.5" {
		t.Errorf("scenario argument %q", arg)
	}
	if scs, err := bench.ParseSteadyScenarios(steadyScenarioArg(sc)); err != nil || scs[0] != sc {
		t.Errorf("the argument does not parse back: %v %v", scs, err)
	}
}
