package bench

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
)

// Target is one server under test.
type Target struct {
	Name string
	URL  string
	// PID is the server process whose CPU time is measured: 0 means look
	// it up from the URL's port (local URLs only), negative means none.
	PID int
	// PIDs are the processes of the other URLs of a URL list (the nodes
	// of a cluster), looked up with PID; their CPU time is added.
	PIDs []int
}

// ParseTarget parses NAME=URL; a bare URL is named after its host and port.
func ParseTarget(s string) (Target, error) {
	name, u, ok := strings.Cut(s, "=")
	if !ok || strings.Contains(name, "://") {
		name, u = "", s
	}
	var pu *url.URL
	for i, part := range strings.Split(u, ",") {
		p, err := url.Parse(strings.TrimSpace(part))
		if err != nil || (p.Scheme != "ws" && p.Scheme != "wss") || p.Host == "" {
			return Target{}, fmt.Errorf("%q: want NAME=ws://HOST:PORT/PATH (or several, comma-separated: the nodes of a cluster)", s)
		}
		if i == 0 {
			pu = p
		}
	}
	if name == "" {
		name = pu.Host
	}
	return Target{Name: name, URL: u}, nil
}

// ResolvePID returns the pid of the local process listening on the URL's
// port, or 0 when the URL is not local or no process is found (another
// user's process, a container).
func ResolvePID(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	host := u.Hostname()
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !(ip.IsLoopback() || ip.IsUnspecified() || isLocalIP(ip)) {
			return 0
		}
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		switch u.Scheme {
		case "ws":
			port = 80
		case "wss":
			port = 443
		default:
			return 0
		}
	}
	pid, err := stats.ListeningPID(port)
	if err != nil {
		return 0
	}
	return pid
}

func isLocalIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// Scenario is one fan-out workload: Clients subscribers, Messages messages.
type Scenario struct {
	Clients, Messages int
}

func (s Scenario) String() string { return fmt.Sprintf("%d×%d", s.Clients, s.Messages) }

// SeedScenarios are the four scenarios of the upstream benchmark's published
// figures (5×200, 20×1000, 50×2000, 100×500) plus 1000 subscribers × 100
// messages.
var SeedScenarios = []Scenario{{5, 200}, {20, 1000}, {50, 2000}, {100, 500}, {1000, 100}}

// ParseScenarios parses "seeds" or a comma-separated list of CLIENTSxMESSAGES.
func ParseScenarios(s string) ([]Scenario, error) {
	if s == "seeds" {
		return append([]Scenario(nil), SeedScenarios...), nil
	}
	var out []Scenario
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		a, b, ok := cutX(f)
		if !ok {
			return nil, fmt.Errorf("scenario %q: want seeds or CLIENTSxMESSAGES[,...]", f)
		}
		m, err1 := strconv.Atoi(a)
		n, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || m <= 0 || n <= 0 {
			return nil, fmt.Errorf("scenario %q: want positive CLIENTSxMESSAGES", f)
		}
		out = append(out, Scenario{m, n})
	}
	return out, nil
}

// LoadScenario is one echo workload.
type LoadScenario struct {
	Conns, Payload, Window int
}

func (s LoadScenario) String() string {
	str := fmt.Sprintf("%d×%s", s.Conns, sizeString(s.Payload))
	if s.Window > 1 {
		str += fmt.Sprintf(" w%d", s.Window)
	}
	return str
}

// LoadPresets are named sets of echo workloads.
var LoadPresets = map[string][]LoadScenario{
	// std: latency of one connection, small and large messages over many
	// connections, and a pipelined window.
	"std": {{1, 64, 1}, {10, 1024, 1}, {100, 1024, 1}, {10, 64 << 10, 1}, {10, 1024, 64}},
	// echo: the echo workloads compared with uWebSockets: one connection's
	// ping-pong and pipelined window of small messages, one connection's
	// 1 MiB messages, and 100 connections with a window of 16.
	"echo": {{1, 300, 1}, {1, 300, 64}, {1, 1 << 20, 1}, {100, 1024, 16}},
}

// ParseLoadScenarios parses a preset name or a comma-separated list of
// CONNSxPAYLOAD[wWINDOW] (payload in bytes, or with a k/m suffix).
func ParseLoadScenarios(s string) ([]LoadScenario, error) {
	if p, ok := LoadPresets[s]; ok {
		return append([]LoadScenario(nil), p...), nil
	}
	var out []LoadScenario
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		a, b, ok := cutX(f)
		if !ok {
			return nil, fmt.Errorf("scenario %q: want a preset (std, echo) or CONNSxPAYLOAD[wWINDOW][,...]", f)
		}
		w := 1
		if i := strings.IndexByte(b, 'w'); i >= 0 {
			var err error
			if w, err = strconv.Atoi(b[i+1:]); err != nil || w <= 0 {
				return nil, fmt.Errorf("scenario %q: bad window", f)
			}
			b = b[:i]
		}
		c, err1 := strconv.Atoi(a)
		p, err2 := ParseSize(b)
		if err1 != nil || err2 != nil || c <= 0 || p < 0 {
			return nil, fmt.Errorf("scenario %q: want CONNSxPAYLOAD[wWINDOW]", f)
		}
		out = append(out, LoadScenario{c, p, w})
	}
	return out, nil
}

func cutX(s string) (string, string, bool) {
	for _, sep := range []string{"x", "×", "X"} {
		if a, b, ok := strings.Cut(s, sep); ok {
			return a, b, true
		}
	}
	return "", "", false
}

// ParseSize parses a byte count with an optional k or m suffix (KiB, MiB).
func ParseSize(s string) (int, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	mul := 1
	switch {
	case strings.HasSuffix(s, "k"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m"):
		mul, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	return n * mul, nil
}

func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Step is one run in an interleaved schedule.
type Step struct {
	Scenario, Repeat, Target int
}

// Schedule lists the runs of scenarios × repeats × targets with the targets
// interleaved inside every repeat (A B A B …), so that slow drift of the
// machine (other load, thermal state) spreads over every target alike
// instead of favouring the one measured first. The order of the targets is
// rotated from one repeat to the next, so no target always runs right after
// the same neighbour.
func Schedule(scenarios, repeats, targets int) []Step {
	var out []Step
	for s := 0; s < scenarios; s++ {
		for r := 0; r < repeats; r++ {
			for i := 0; i < targets; i++ {
				out = append(out, Step{Scenario: s, Repeat: r, Target: (i + r) % targets})
			}
		}
	}
	return out
}

// RunSchedule runs run for every step, pausing between runs so the servers
// settle (closing connections, collecting garbage). It stops at the first
// error of ctx.
func RunSchedule(ctx context.Context, steps []Step, pause time.Duration, run func(i int, st Step) error) error {
	for i, st := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if i > 0 && pause > 0 {
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := run(i, st); err != nil {
			return err
		}
	}
	return nil
}
