package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
)

// steady is `ovbus bench --steady` written again on gobwas/ws, to check its
// figures with a client that shares none of its code: N clients that all
// send and all receive, a total rate spread evenly (frame g of the run is due
// at g ÷ rate from client g mod N), JSON frames of a size range and a share
// of binary frames, for a duration. Latency runs from each frame's due time
// (stamped in the frame) to its arrival, every delivery kept and sorted for
// exact nearest-rank percentiles. A frame's size and kind come from the same
// hash of (seed, client, frame) as ovbus bench's, so both send the same
// frames.

// steadyScenario is one steady workload.
type steadyScenario struct {
	clients int
	rate    float64
	share   float64
}

func (s steadyScenario) String() string {
	kind := "json"
	if s.share > 0 {
		kind = strconv.FormatFloat(100*s.share, 'g', 4, 64) + "%bin"
	}
	return fmt.Sprintf("%dc %s/s %s", s.clients, strconv.FormatFloat(s.rate, 'g', 6, 64), kind)
}

// steadyPresets are ovbus bench's steady presets.
var steadyPresets = map[string][]steadyScenario{
	"steady20":      {{20, 2000, 0.01}},
	"steady20-json": {{20, 2000, 0}},
	"steady10":      {{10, 500, 0.01}},
	"steady":        {{20, 2000, 0.01}, {20, 2000, 0}, {10, 500, 0.01}},
}

type steadyConfig struct {
	steadyScenario
	duration         time.Duration
	jsonMin, jsonMax int
	binMin, binMax   int
	seed             uint64
	timeout          time.Duration
	readBuf          int
}

func steadyMain(args []string) error {
	fs := flag.NewFlagSet("client steady", flag.ExitOnError)
	clients := fs.Int("clients", 20, "clients that all send and all receive")
	rate := fs.Float64("rate", 2000, "frames per second, all clients together")
	share := fs.Float64("binary-share", 0.01, "share of binary frames, 0 to 1")
	preset := fs.String("preset", "", "scenarios instead of -clients/-rate/-binary-share: steady, steady20, steady20-json, steady10, comma-separated")
	duration := fs.Duration("duration", 30*time.Second, "how long the clients send")
	jsonSize := fs.String("json-size", "200-2000", "JSON frame sizes, MIN-MAX bytes")
	binSize := fs.String("binary-size", "65536-1048576", "binary frame sizes, MIN-MAX bytes")
	seed := fs.Uint64("seed", 1, "picks the frames' sizes (the same as ovbus bench --seed)")
	repeat := fs.Int("repeat", 3, "runs of every scenario and target, interleaved")
	pause := fs.Duration("pause", 500*time.Millisecond, "pause between runs")
	timeout := fs.Duration("timeout", 5*time.Second, "bounds the greeting, the warm-up and the wait for the last deliveries")
	jsonOut := fs.String("json", "", "also write every run and the medians to `FILE`")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: client steady [flags] NAME=URL[@PID] ...")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	targets, err := parseTargets(fs)
	if err != nil {
		return err
	}
	base := steadyConfig{duration: *duration, seed: *seed, timeout: *timeout, readBuf: 64 << 10}
	if base.jsonMin, base.jsonMax, err = sizeRange(*jsonSize); err != nil {
		return fmt.Errorf("-json-size: %w", err)
	}
	if base.binMin, base.binMax, err = sizeRange(*binSize); err != nil {
		return fmt.Errorf("-binary-size: %w", err)
	}
	if base.jsonMin < 150 || base.binMin < 24 {
		return fmt.Errorf("frames too small: JSON at least 150 bytes, binary at least 24")
	}
	scenarios := []steadyScenario{{*clients, *rate, *share}}
	if *preset != "" {
		scenarios = nil
		for _, p := range strings.Split(*preset, ",") {
			sc, ok := steadyPresets[strings.TrimSpace(p)]
			if !ok {
				return fmt.Errorf("-preset: %q is not steady, steady20, steady20-json or steady10", p)
			}
			scenarios = append(scenarios, sc...)
		}
	}
	for _, sc := range scenarios {
		if sc.clients <= 0 || !(sc.rate > 0) || sc.share < 0 || sc.share > 1 {
			return fmt.Errorf("scenario %v: want clients > 0, rate > 0, a share of 0 to 1", sc)
		}
	}
	rep := steadyRuns(os.Stdout, os.Stderr, targets, scenarios, base, *repeat, *pause)
	rep.Command = "client steady " + strings.Join(args, " ")
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			return err
		}
	}
	if rep.completed == 0 {
		return fmt.Errorf("no run completed")
	}
	return nil
}

func sizeRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("%q: want MIN-MAX in bytes, the smaller first", s)
	}
	return lo, hi, nil
}

// steadyColumns are the figures of a run, in table order.
var steadyColumns = []struct{ key, title string }{
	{"deliveries_per_sec", "deliveries/s"}, {"lost", "lost"}, {"reordered", "reordered"}, {"duplicates", "duplicates"},
	{"p50_ms", "p50 ms"}, {"p90_ms", "p90 ms"}, {"p99_ms", "p99 ms"}, {"p999_ms", "p99.9 ms"}, {"max_ms", "max ms"},
	{"send_lag_p99_ms", "send lag p99 ms"}, {"from_send_p99_ms", "p99 from send ms"}, {"from_send_p999_ms", "p99.9 from send ms"},
	{"client_cores", "client CPU"}, {"server_cores", "server CPU"},
	{"server_us_per_frame", "server µs/frame"}, {"server_us_per_delivery", "server µs/delivery"},
}

// steadyReport is what -json writes.
type steadyReport struct {
	Command  string      `json:"command"`
	Date     string      `json:"date"`
	Duration string      `json:"duration"`
	Repeat   int         `json:"repeat"`
	Runs     []steadyRow `json:"runs"`
	Medians  []steadyRow `json:"medians"`
	// Pooled has each scenario and target's latency over every delivery
	// of its runs together (pooled.go), when it ran more than once.
	Pooled    []steadyRow    `json:"pooled,omitempty"`
	Failures  []string       `json:"failures,omitempty"`
	Settings  map[string]any `json:"settings"`
	completed int
}

type steadyRow struct {
	Scenario string             `json:"scenario"`
	Target   string             `json:"target"`
	Run      int                `json:"run,omitempty"`
	Figures  map[string]float64 `json:"figures"`
}

// steadyRuns runs every scenario against every target repeat times, the
// targets interleaved and rotated as ovbus bench does, and writes a markdown
// table of every run and of the medians to out; failures go to errs too and
// the others go on.
func steadyRuns(out, errs io.Writer, targets []target, scenarios []steadyScenario, base steadyConfig, repeat int, pause time.Duration) *steadyReport {
	rep := &steadyReport{Date: time.Now().UTC().Format(time.RFC3339), Duration: base.duration.String(), Repeat: repeat,
		Settings: map[string]any{"json_size": fmt.Sprintf("%d-%d", base.jsonMin, base.jsonMax),
			"binary_size": fmt.Sprintf("%d-%d", base.binMin, base.binMax), "seed": base.seed}}
	header := "| scenario | target | run |"
	for _, c := range steadyColumns {
		header += " " + c.title + " |"
	}
	fmt.Fprintln(out, header)
	fmt.Fprintln(out, "|---|---|---|"+strings.Repeat("---:|", len(steadyColumns)))
	pools := map[string]*latencyPool{} // by scenario and target
	for _, sc := range scenarios {
		cfg := base
		cfg.steadyScenario = sc
		for r := range repeat {
			for j := range targets {
				t := targets[(j+r)%len(targets)]
				if len(rep.Runs)+len(rep.Failures) > 0 {
					time.Sleep(pause)
				}
				key := sc.String() + "\x00" + t.name
				if pools[key] == nil {
					pools[key] = new(latencyPool)
				}
				res, err := runSteady(t, cfg, pools[key])
				if err != nil {
					msg := fmt.Sprintf("%s %s run %d: %v", t.name, sc, r+1, err)
					rep.Failures = append(rep.Failures, msg)
					fmt.Fprintf(out, "| %s | %s | %d | failed: %v |\n", sc, t.name, r+1, err)
					fmt.Fprintf(errs, "client: %s\n", msg)
					continue
				}
				row := steadyRow{Scenario: sc.String(), Target: t.name, Run: r + 1, Figures: res}
				rep.Runs = append(rep.Runs, row)
				fmt.Fprint(out, row.line(strconv.Itoa(r+1)))
			}
		}
	}
	rep.completed = len(rep.Runs)
	fmt.Fprintf(out, "\nmedians of %d runs, %s each (exact nearest-rank percentiles from the due time; ! client above 80 %% of a core)\n\n", repeat, base.duration)
	fmt.Fprintln(out, header)
	fmt.Fprintln(out, "|---|---|---|"+strings.Repeat("---:|", len(steadyColumns)))
	for _, sc := range scenarios {
		for _, t := range targets {
			var runs []map[string]float64
			for _, row := range rep.Runs {
				if row.Scenario == sc.String() && row.Target == t.name {
					runs = append(runs, row.Figures)
				}
			}
			if len(runs) == 0 {
				fmt.Fprintf(out, "| %s | %s | median | no run completed |\n", sc, t.name)
				continue
			}
			row := steadyRow{Scenario: sc.String(), Target: t.name, Figures: medianFigures(runs)}
			rep.Medians = append(rep.Medians, row)
			fmt.Fprint(out, row.line(fmt.Sprintf("median of %d", len(runs))))
			if p := pools[sc.String()+"\x00"+t.name]; p != nil && p.runs > 1 {
				rep.Pooled = append(rep.Pooled, steadyRow{Scenario: sc.String(), Target: t.name, Figures: p.figures()})
			}
		}
	}
	writePooled(out, rep.Pooled)
	return rep
}

func (row steadyRow) line(run string) string {
	s := fmt.Sprintf("| %s | %s | %s |", row.Scenario, row.Target, run)
	for _, c := range steadyColumns {
		v, ok := row.Figures[c.key]
		switch {
		case !ok:
			s += " - |"
		case strings.HasSuffix(c.key, "_cores"):
			flag := ""
			if c.key == "client_cores" && v > 0.8 {
				flag = "!"
			}
			s += fmt.Sprintf(" %.0f%%%s |", 100*v, flag)
		case strings.HasSuffix(c.key, "_ms"):
			s += " " + strconv.FormatFloat(v, 'g', 3, 64) + " |"
		case c.key == "deliveries_per_sec" || c.key == "lost" || c.key == "reordered" || c.key == "duplicates":
			s += fmt.Sprintf(" %.0f |", v)
		default:
			s += fmt.Sprintf(" %.2f |", v)
		}
	}
	return s + "\n"
}

// medianFigures takes each figure's median over the runs on its own.
func medianFigures(runs []map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k := range runs[0] {
		var v []float64
		for _, r := range runs {
			if x, ok := r[k]; ok {
				v = append(v, x)
			}
		}
		slices.Sort(v)
		if n := len(v); n%2 == 1 {
			out[k] = v[n/2]
		} else {
			out[k] = (v[n/2-1] + v[n/2]) / 2
		}
	}
	return out
}

// frameOf is a frame's size and kind: SplitMix64 over (seed, client, frame),
// as ovbus bench's SizeMix.Frame, so both clients send the same frames.
func (c steadyConfig) frameOf(i, k int) (size int, bin bool) {
	mix := func(x uint64) uint64 {
		x += 0x9e3779b97f4a7c15
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		return x ^ x>>31
	}
	h := mix(mix(c.seed^uint64(i)<<40) ^ uint64(k))
	bin = float64(h>>11)/(1<<53) < c.share
	lo, hi := c.jsonMin, c.jsonMax
	if bin {
		lo, hi = c.binMin, c.binMax
	}
	return lo + int(mix(h)%uint64(hi-lo+1)), bin
}

// The frames: {"type":"x.steady","data":{"from":F,"seq":S,"t":T,"pad":"…"},"context":{}}
// (x.steady.warm for the warm-up) and binary frames "XSTD", from (uint32),
// seq (uint64), t (int64), little-endian, then filler.
const (
	steadyText = `{"type":"x.steady","data":{"from":`
	steadyWarm = `{"type":"x.steady.warm","data":{"from":`
	binMagic   = "XSTD"
)

func textFrame(dst []byte, warm bool, from, seq int, t int64, size int) []byte {
	dst = dst[:0]
	if warm {
		dst = append(dst, steadyWarm...)
	} else {
		dst = append(dst, steadyText...)
	}
	dst = strconv.AppendInt(dst, int64(from), 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"t":`...)
	dst = strconv.AppendInt(dst, t, 10)
	dst = append(dst, `,"pad":"`...)
	const tail = `"},"context":{}}`
	for len(dst)+len(tail) < size {
		dst = append(dst, 'p')
	}
	return append(dst, tail...)
}

// parseFrame returns a frame's kind (0 foreign, 1 timed, 2 warm-up), sender,
// number and due time.
func parseFrame(op ws.OpCode, b []byte) (kind, from, seq int, t int64) {
	if op == ws.OpBinary {
		if len(b) < 24 || string(b[:4]) != binMagic {
			return 0, 0, 0, 0
		}
		return 1, int(binary.LittleEndian.Uint32(b[4:])), int(binary.LittleEndian.Uint64(b[8:])), int64(binary.LittleEndian.Uint64(b[16:]))
	}
	switch {
	case bytes.HasPrefix(b, []byte(steadyText)):
		kind, b = 1, b[len(steadyText):]
	case bytes.HasPrefix(b, []byte(steadyWarm)):
		kind, b = 2, b[len(steadyWarm):]
	default:
		return 0, 0, 0, 0
	}
	var nums [3]int64
	for i, key := range []string{"", `,"seq":`, `,"t":`} {
		if !bytes.HasPrefix(b, []byte(key)) {
			return 0, 0, 0, 0
		}
		b = b[len(key):]
		n := 0
		for n < len(b) && b[n] >= '0' && b[n] <= '9' {
			nums[i] = nums[i]*10 + int64(b[n]-'0')
			n++
		}
		if n == 0 {
			return 0, 0, 0, 0
		}
		b = b[n:]
	}
	return kind, int(nums[0]), int(nums[1]), nums[2]
}

// steadyConn is one client.
type steadyConn struct {
	id   int
	conn net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	seen [][]bool // [sender][seq]
	top  []int    // highest seq seen per sender, −1 before any
	lat  []int64  // ns, every first delivery
	lag  []int64  // ns, how late each frame left
	// sentAt is when this client began to write each of its frames (ns
	// since the run's start), for the receivers; fromSend is every first
	// delivery's receive time − that (ns).
	sentAt   []atomic.Int64
	fromSend []int64
	got      int
	dups     int
	reord    int
	last     time.Time
	warm     []bool
	nWarm    int
	warmC    chan struct{}
	sent     int
	// sendErr is the sender's failure, recvErr the receiver's.
	sendErr, recvErr error
}

func (c *steadyConn) write(op ws.OpCode, b []byte) error {
	f := ws.MaskFrameInPlace(ws.NewFrame(op, true, b))
	if err := ws.WriteFrame(c.bw, f); err != nil {
		return err
	}
	return c.bw.Flush()
}

// runSteady makes one steady run against t and returns its figures; a
// completed run's latencies go into pool too, unless it is nil.
func runSteady(t target, cfg steadyConfig, pool *latencyPool) (map[string]float64, error) {
	n := cfg.clients
	total := int(math.Ceil(cfg.rate * cfg.duration.Seconds()))
	frames := func(i int) int { // frames client i sends: g = i, i+n, … below total
		if i >= total {
			return 0
		}
		return (total-1-i)/n + 1
	}
	due := func(i, k int) time.Duration {
		return time.Duration((float64(k)*float64(n) + float64(i)) * 1e9 / cfg.rate)
	}

	conns := make([]*steadyConn, n)
	var wg sync.WaitGroup
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.conn.Close()
			}
		}
		wg.Wait()
	}()
	for i := range conns {
		conn, br, err := dial(context.Background(), t.url, cfg.readBuf)
		if err != nil {
			return nil, fmt.Errorf("client %d: %w", i, err)
		}
		c := &steadyConn{id: i, conn: conn, br: br, bw: bufio.NewWriterSize(conn, 4096), seen: make([][]bool, n),
			top: make([]int, n), warm: make([]bool, n), warmC: make(chan struct{}), sentAt: make([]atomic.Int64, frames(i))}
		conns[i] = c
		for j := range n {
			c.seen[j], c.top[j] = make([]bool, frames(j)), -1
		}
		conn.SetReadDeadline(time.Now().Add(cfg.timeout))
		if _, _, err := readFrame(br, nil); err != nil {
			return nil, fmt.Errorf("client %d: greeting: %w", i, err)
		}
		conn.SetReadDeadline(time.Time{})
	}
	start := time.Now()
	var t0 time.Duration // the schedule's start, on start's clock
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.receive(start, total, conns)
		}()
	}

	// Warm-up: every client's warm-up frame, again every 20 ms, until
	// every client has one from every client.
	var msg []byte
	deadline := time.Now().Add(cfg.timeout)
	for _, c := range conns {
		for waiting := true; waiting; {
			for _, s := range conns {
				if err := s.write(ws.OpText, textFrame(msg, true, s.id, 0, 0, cfg.jsonMin)); err != nil {
					return nil, fmt.Errorf("client %d: warm-up: %w", s.id, err)
				}
			}
			select {
			case <-c.warmC:
				waiting = false
			case <-time.After(20 * time.Millisecond):
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("warm-up: client %d lacks a client's warm-up frame after %v", c.id, cfg.timeout)
				}
			}
		}
	}

	t0 = time.Since(start) + 10*time.Millisecond
	// The server first: reading its /proc files is this process's work,
	// outside the phase measured.
	srv0, srvOK := serverCPU(t.pid)
	cpu0 := selfCPU()
	var sending sync.WaitGroup
	for _, c := range conns {
		sending.Add(1)
		go func() {
			defer sending.Done()
			c.send(start, t0, cfg, frames(c.id), due)
		}()
	}
	sending.Wait()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.timeout):
		for _, c := range conns {
			c.conn.SetReadDeadline(time.Now())
		}
		<-done
	}
	end := time.Since(start)
	cpu1 := selfCPU()
	srv1, ok1 := serverCPU(t.pid)

	var lat, lag, fromSend []int64
	var sent, delivered, reord, dups int
	var last time.Time
	for _, c := range conns {
		if err := firstErr(c.sendErr, c.recvErr); err != nil {
			return nil, fmt.Errorf("client %d: %w", c.id, err)
		}
		sent += c.sent
		delivered += c.got
		reord += c.reord
		dups += c.dups
		lat = append(lat, c.lat...)
		lag = append(lag, c.lag...)
		fromSend = append(fromSend, c.fromSend...)
		if c.last.After(last) {
			last = c.last
		}
	}
	slices.Sort(lat)
	slices.Sort(lag)
	slices.Sort(fromSend)
	if pool != nil {
		pool.add(lat, fromSend)
	}
	rank := func(v []int64, q float64) float64 { // nearest rank, in ms
		if len(v) == 0 {
			return 0
		}
		r := int(math.Ceil(q * float64(len(v))))
		return float64(v[min(max(r, 1), len(v))-1]) / 1e6
	}
	wall := end - t0
	f := map[string]float64{
		"sent": float64(sent), "delivered": float64(delivered), "lost": float64(sent*n - delivered),
		"reordered": float64(reord), "duplicates": float64(dups),
		"p50_ms": rank(lat, 0.5), "p90_ms": rank(lat, 0.9), "p99_ms": rank(lat, 0.99), "p999_ms": rank(lat, 0.999), "max_ms": rank(lat, 1),
		"send_lag_p99_ms": rank(lag, 0.99), "from_send_p99_ms": rank(fromSend, 0.99), "from_send_p999_ms": rank(fromSend, 0.999),
		"client_cores": (cpu1 - cpu0).Seconds() / wall.Seconds(),
	}
	if el := last.Sub(start) - t0; el > 0 {
		f["deliveries_per_sec"] = float64(delivered) / el.Seconds()
	}
	if srvOK && ok1 {
		srv := srv1 - srv0
		f["server_cores"] = srv.Seconds() / wall.Seconds()
		f["server_us_per_frame"] = float64(srv.Nanoseconds()) / 1e3 / float64(max(sent, 1))
		f["server_us_per_delivery"] = float64(srv.Nanoseconds()) / 1e3 / float64(max(delivered, 1))
	}
	return f, nil
}

// send sends client c's frames, each at its due time or as soon after as it
// can, stamped with the due time.
func (c *steadyConn) send(start time.Time, t0 time.Duration, cfg steadyConfig, n int, due func(i, k int) time.Duration) {
	var text, bin []byte
	for k := range n {
		d := t0 + due(c.id, k)
		if wait := d - time.Since(start); wait > 0 {
			sleep(wait)
		}
		now := time.Since(start)
		c.lag = append(c.lag, int64(now-d))
		c.sentAt[k].Store(int64(now))
		size, isBin := cfg.frameOf(c.id, k)
		var err error
		if isBin {
			if len(bin) < size {
				bin = make([]byte, cfg.binMax)
			}
			b := bin[:size]
			copy(b, binMagic)
			binary.LittleEndian.PutUint32(b[4:], uint32(c.id))
			binary.LittleEndian.PutUint64(b[8:], uint64(k))
			binary.LittleEndian.PutUint64(b[16:], uint64(d))
			err = c.write(ws.OpBinary, b)
		} else {
			text = textFrame(text, false, c.id, k, int64(d), size)
			err = c.write(ws.OpText, text)
		}
		if err != nil {
			c.sendErr = fmt.Errorf("send frame %d: %w", k, err)
			return
		}
		c.sent++
	}
}

// receive reads until the client has every frame of the run (total), or its
// read deadline passes.
func (c *steadyConn) receive(start time.Time, total int, conns []*steadyConn) {
	defer func() {
		if c.nWarm < len(c.warm) {
			close(c.warmC)
		}
	}()
	var buf []byte
	for c.got < total {
		b, op, err := readFrame(c.br, buf)
		now := time.Since(start)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				c.recvErr = fmt.Errorf("receive: %w", err)
			}
			return
		}
		buf = b
		kind, from, seq, t := parseFrame(op, b)
		if kind == 0 || from < 0 || from >= len(c.seen) {
			continue
		}
		if kind == 2 {
			if !c.warm[from] {
				c.warm[from] = true
				if c.nWarm++; c.nWarm == len(c.warm) {
					close(c.warmC)
				}
			}
			continue
		}
		if seq < 0 || seq >= len(c.seen[from]) {
			continue
		}
		if c.seen[from][seq] {
			c.dups++
			continue
		}
		c.seen[from][seq] = true
		if seq < c.top[from] {
			c.reord++
		} else {
			c.top[from] = seq
		}
		c.got++
		c.lat = append(c.lat, int64(now)-t)
		if sent := conns[from].sentAt[seq].Load(); sent != 0 {
			c.fromSend = append(c.fromSend, int64(now)-sent)
		}
		c.last = start.Add(now)
	}
}

// firstErr returns the first error that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
