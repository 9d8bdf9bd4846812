package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// What a steady run sends and when: the schedule of every sender and the
// size and kind of every frame. Both are pure functions of the scenario, so
// that every server of a comparison, every repeat, the independent client
// and the kernel's floor (bench/cmd/fanfloor -steady) get the same frames at
// the same moments.

// SteadyPlan is the schedule of a steady run: Clients senders share a total
// of Rate frames per second for Duration, spread evenly. Frame g of the run
// (g = 0, 1, 2, …) is due at g ÷ Rate and is sent by client g mod Clients, so
// each client sends every Clients ÷ Rate seconds on its own schedule, offset
// from its neighbour by 1 ÷ Rate, and the frames of all clients together come
// at an even 1 ÷ Rate apart.
type SteadyPlan struct {
	Clients  int
	Rate     float64 // frames per second, all senders together
	Duration time.Duration
}

// Total is the number of frames due within the duration: those with
// g ÷ Rate < Duration.
func (p SteadyPlan) Total() int {
	if p.Clients <= 0 || p.Rate <= 0 || p.Duration <= 0 {
		return 0
	}
	return int(math.Ceil(p.Rate * p.Duration.Seconds()))
}

// Frames is the number of frames client i sends.
func (p SteadyPlan) Frames(i int) int {
	total := p.Total()
	if i < 0 || i >= p.Clients || i >= total {
		return 0
	}
	return (total-1-i)/p.Clients + 1
}

// Due is when client i's frame k is due, from the start of the run.
func (p SteadyPlan) Due(i, k int) time.Duration {
	g := float64(k)*float64(p.Clients) + float64(i)
	return time.Duration(g * float64(time.Second) / p.Rate)
}

// SizeMix is the sizes and kinds of a steady run's frames: OVOS-like JSON
// text of JSONMin to JSONMax bytes, and a share of binary frames (audio, as
// a satellite or the audio service sends it) of BinaryMin to BinaryMax bytes.
// Sizes are uniform in their range.
type SizeMix struct {
	JSONMin, JSONMax     int
	BinaryMin, BinaryMax int
	BinaryShare          float64 // 0 to 1
}

// Defaults of a steady run: OVOS's messages are mostly a few hundred bytes
// to a few KB of JSON; audio moves as binary frames of tens of KB to a MB.
const (
	DefaultSteadyJSONMin   = 200
	DefaultSteadyJSONMax   = 2000
	DefaultSteadyBinaryMin = 64 << 10
	DefaultSteadyBinaryMax = 1 << 20
	DefaultSteadyRate      = 2000
	// DefaultSteadyBinaryShare is the share of binary frames of a steady
	// run's default scenario (steady20).
	DefaultSteadyBinaryShare = 0.01
	DefaultSteadyDuration    = 30 * time.Second
	DefaultSteadySeed        = 1
)

// DefaultSizeMix is the size mix of the steady presets, without binary.
var DefaultSizeMix = SizeMix{
	JSONMin: DefaultSteadyJSONMin, JSONMax: DefaultSteadyJSONMax,
	BinaryMin: DefaultSteadyBinaryMin, BinaryMax: DefaultSteadyBinaryMax,
}

// Check says what is wrong with a mix, or nil.
func (m SizeMix) Check() error {
	switch {
	case m.JSONMin < minSteadyJSON || m.JSONMax < m.JSONMin:
		return fmt.Errorf("JSON sizes %d-%d: want at least %d bytes, the smaller first", m.JSONMin, m.JSONMax, minSteadyJSON)
	case m.BinaryShare < 0 || m.BinaryShare > 1 || math.IsNaN(m.BinaryShare):
		return fmt.Errorf("binary share %v: want 0 to 1", m.BinaryShare)
	case m.BinaryShare > 0 && (m.BinaryMin < steadyBinaryHeader || m.BinaryMax < m.BinaryMin):
		return fmt.Errorf("binary sizes %d-%d: want at least %d bytes, the smaller first", m.BinaryMin, m.BinaryMax, steadyBinaryHeader)
	}
	return nil
}

// Frame returns the size of client i's frame k in a run with the given seed,
// and whether it is binary. It is a hash of (seed, i, k), not a random
// stream: any party can compute any frame's size.
func (m SizeMix) Frame(seed uint64, i, k int) (size int, binary bool) {
	h := splitmix(splitmix(seed^uint64(i)<<40) ^ uint64(k))
	u := float64(h>>11) / (1 << 53) // uniform in [0, 1)
	binary = u < m.BinaryShare
	lo, hi := m.JSONMin, m.JSONMax
	if binary {
		lo, hi = m.BinaryMin, m.BinaryMax
	}
	h = splitmix(h)
	return lo + int(h%uint64(hi-lo+1)), binary
}

// splitmix is SplitMix64's finaliser: a bijection that spreads every input
// bit over the output.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// SteadyScenario is one steady workload: Clients clients that all send and
// all receive, Rate frames per second in total, BinaryShare of them binary.
type SteadyScenario struct {
	Clients     int
	Rate        float64
	BinaryShare float64
}

func (s SteadyScenario) String() string {
	kind := "json"
	if s.BinaryShare > 0 {
		kind = strconv.FormatFloat(100*s.BinaryShare, 'g', 4, 64) + "%bin"
	}
	return fmt.Sprintf("%dc %s/s %s", s.Clients, strconv.FormatFloat(s.Rate, 'g', 6, 64), kind)
}

// SteadyPresets are named sets of steady workloads: an OVOS device's bus
// with 20 clients (core, skills, audio, GUI, PHAL, satellites) at 2 000
// frames/s with 1 % audio, the same without audio, and 10 clients at 500/s
// with audio.
var SteadyPresets = map[string][]SteadyScenario{
	"steady20":      {{20, 2000, 0.01}},
	"steady20-json": {{20, 2000, 0}},
	"steady10":      {{10, 500, 0.01}},
	"steady":        {{20, 2000, 0.01}, {20, 2000, 0}, {10, 500, 0.01}},
}

// IsSteadyPreset reports whether a --preset list names steady workloads (its
// first entry is a steady preset or CLIENTS@RATE).
func IsSteadyPreset(s string) bool {
	first, _, _ := strings.Cut(s, ",")
	first = strings.TrimSpace(first)
	_, ok := SteadyPresets[first]
	return ok || strings.Contains(first, "@")
}

// ParseSteadyScenarios parses a comma-separated list of steady presets
// (steady, steady20, steady20-json, steady10) and CLIENTS@RATE[:SHARE]
// workloads (SHARE the binary share, 0 to 1; 0 when left out), e.g.
// steady10,20@2000:0.05.
func ParseSteadyScenarios(s string) ([]SteadyScenario, error) {
	var out []SteadyScenario
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if p, ok := SteadyPresets[f]; ok {
			out = append(out, p...)
			continue
		}
		bad := fmt.Errorf("steady scenario %q: want steady, steady20, steady20-json, steady10 or CLIENTS@RATE[:BINARY_SHARE]", f)
		c, rest, ok := strings.Cut(f, "@")
		if !ok {
			return nil, bad
		}
		r, share, _ := strings.Cut(rest, ":")
		sc := SteadyScenario{}
		var err error
		if sc.Clients, err = strconv.Atoi(c); err != nil || sc.Clients <= 0 {
			return nil, bad
		}
		if sc.Rate, err = strconv.ParseFloat(r, 64); err != nil || !(sc.Rate > 0) || math.IsInf(sc.Rate, 0) {
			return nil, bad
		}
		if share != "" {
			if sc.BinaryShare, err = strconv.ParseFloat(share, 64); err != nil || !(sc.BinaryShare >= 0 && sc.BinaryShare <= 1) {
				return nil, bad
			}
		}
		out = append(out, sc)
	}
	return out, nil
}

// ParseSizeRange parses MIN-MAX (sizes as ParseSize: bytes, or with a k or m
// suffix), or one size for both.
func ParseSizeRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	if lo, err = ParseSize(a); err == nil {
		hi, err = ParseSize(b)
	}
	if err != nil || lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("%q: want MIN-MAX in bytes (k and m suffixes allowed), the smaller first", s)
	}
	return lo, hi, nil
}

// FormatSizeRange writes MIN-MAX as ParseSizeRange reads it, with k and m
// suffixes where the sizes are whole KiB or MiB.
func FormatSizeRange(lo, hi int) string {
	f := func(n int) string {
		switch {
		case n >= 1<<20 && n%(1<<20) == 0:
			return strconv.Itoa(n>>20) + "m"
		case n >= 1<<10 && n%(1<<10) == 0:
			return strconv.Itoa(n>>10) + "k"
		}
		return strconv.Itoa(n)
	}
	return f(lo) + "-" + f(hi)
}
