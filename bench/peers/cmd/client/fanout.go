package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"
)

func fanoutMain(args []string) error {
	fs := flag.NewFlagSet("client fanout", flag.ExitOnError)
	clients := fs.Int("clients", 100, "subscribers (M)")
	messages := fs.Int("messages", 2000, "timed messages the sender sends (N)")
	size := fs.Int("size", 256, "message size in bytes")
	warmup := fs.Int("warmup", 10, "warm-up messages")
	repeat := fs.Int("repeat", 3, "runs of every target, interleaved")
	pause := fs.Duration("pause", 500*time.Millisecond, "pause between runs")
	timeout := fs.Duration("timeout", 5*time.Second, "a subscriber ends after this long without a message")
	readBuf := fs.Int("read-buffer", 64<<10, "bufio.Reader size per subscriber")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: client fanout [flags] NAME=URL[@PID] ...")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	targets, err := parseTargets(fs)
	if err != nil {
		return err
	}
	cfg := fanoutConfig{clients: *clients, messages: *messages, size: *size, warmup: max(*warmup, 1),
		timeout: *timeout, readBuf: *readBuf}

	return fanoutRuns(os.Stdout, os.Stderr, targets, cfg, *repeat, *pause)
}

// fanoutRuns runs every target repeat times, interleaved as ovbus bench
// does (A B C, then B C A, …), and writes a row per run and the medians to
// out. A run that fails (a server that drops its clients, say) is a row
// saying so, on errs too, and the others go on: one server's failure does
// not cost the comparison of the rest; the medians are of the runs that
// completed. It fails only when no run of any target completed.
func fanoutRuns(out, errs io.Writer, targets []target, cfg fanoutConfig, repeat int, pause time.Duration) error {
	results := make([][]figures, len(targets))
	failed := make([]int, len(targets))
	fmt.Fprintf(out, rowFormat, "run", "target", "deliveries/s", "dropped", "client CPU", "server CPU", "server µs/delivery", "client µs/delivery")
	var lastErr error
	for r := range repeat {
		for j := range targets {
			i := (j + r) % len(targets)
			t := targets[i]
			if r+j > 0 {
				time.Sleep(pause)
			}
			res, err := runFanout(t, cfg)
			if err != nil {
				failed[i]++
				lastErr = fmt.Errorf("%s: %w", t.name, err)
				fmt.Fprintf(out, "%-6s  %-10s  failed: %v\n", strconv.Itoa(r+1), t.name, err)
				fmt.Fprintf(errs, "client: %v\n", lastErr)
				continue
			}
			results[i] = append(results[i], res.figures())
			fmt.Fprint(out, res.figures().row(strconv.Itoa(r+1), t.name))
		}
	}
	fmt.Fprintf(out, "\nmedians of %d runs, %d×%d, %d B messages (! client above 80 %% of a core)\n", repeat, cfg.clients, cfg.messages, cfg.size)
	completed := 0
	for i, t := range targets {
		completed += len(results[i])
		if len(results[i]) == 0 {
			fmt.Fprintf(out, "%-6s  %-10s  no run completed (%d failed)\n", "median", t.name, failed[i])
			continue
		}
		row := median(results[i]).row("median", t.name)
		if failed[i] > 0 {
			row = strings.TrimSuffix(row, "\n") + fmt.Sprintf("  (of %d runs: %d failed)\n", repeat, failed[i])
		}
		fmt.Fprint(out, row)
	}
	if completed == 0 {
		return fmt.Errorf("no run completed; the last failure: %w", lastErr)
	}
	return nil
}

type fanoutConfig struct {
	clients, messages, size, warmup int
	timeout                         time.Duration
	readBuf                         int
}

type fanoutResult struct {
	delivered, expected int64
	elapsed             time.Duration // first send → last delivery
	clientCPU           time.Duration // this process, over first send → all done
	serverCPU           time.Duration
	serverOK            bool
	wall                time.Duration
}

// figures are what a run reports.
type figures struct {
	rate, dropped, cores, serverCores, serverUs, clientUs float64 // serverUs < 0: unknown
}

func (r fanoutResult) figures() figures {
	f := figures{dropped: float64(r.expected - r.delivered), serverUs: -1}
	if r.elapsed > 0 {
		f.rate = float64(r.delivered) / r.elapsed.Seconds()
	}
	if r.wall > 0 {
		f.cores = r.clientCPU.Seconds() / r.wall.Seconds()
		f.serverCores = r.serverCPU.Seconds() / r.wall.Seconds()
	}
	d := float64(max(r.delivered, 1))
	f.clientUs = float64(r.clientCPU.Nanoseconds()) / 1e3 / d
	if r.serverOK {
		f.serverUs = float64(r.serverCPU.Nanoseconds()) / 1e3 / d
	}
	return f
}

const rowFormat = "%-6s  %-10s  %12s  %7s  %10s  %10s  %18s  %18s\n"

func (f figures) row(run, name string) string {
	srv := "-"
	if f.serverUs >= 0 {
		srv = fmt.Sprintf("%.3f", f.serverUs)
	}
	flag := ""
	if f.cores > 0.8 {
		flag = "!"
	}
	return fmt.Sprintf(rowFormat, run, name, fmt.Sprintf("%.3gM", f.rate/1e6), fmt.Sprintf("%.0f", f.dropped),
		fmt.Sprintf("%.0f%%%s", 100*f.cores, flag), fmt.Sprintf("%.0f%%", 100*f.serverCores), srv, fmt.Sprintf("%.3f", f.clientUs))
}

// median takes each figure's median over the runs on its own.
func median(rs []figures) figures {
	mid := func(get func(figures) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return figures{
		rate:        mid(func(f figures) float64 { return f.rate }),
		dropped:     mid(func(f figures) float64 { return f.dropped }),
		cores:       mid(func(f figures) float64 { return f.cores }),
		serverCores: mid(func(f figures) float64 { return f.serverCores }),
		serverUs:    mid(func(f figures) float64 { return f.serverUs }),
		clientUs:    mid(func(f figures) float64 { return f.clientUs }),
	}
}

// sub is one subscriber.
type sub struct {
	conn  net.Conn
	br    *bufio.Reader
	seen  []bool
	got   int
	last  time.Time
	warm  chan struct{}
	wOnce sync.Once
	err   error
}

func dial(ctx context.Context, url string, readBuf int) (net.Conn, *bufio.Reader, error) {
	d := ws.Dialer{Timeout: 10 * time.Second}
	conn, br, _, err := d.Dial(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	if br == nil {
		br = bufio.NewReaderSize(conn, readBuf)
	} else {
		// Bytes the server sent right behind its handshake answer (the
		// greeting) are in br; read them first, then the socket.
		br = bufio.NewReaderSize(io.MultiReader(br, conn), readBuf)
	}
	return conn, br, nil
}

// readFrame reads one whole data message into buf, skipping control frames.
func readFrame(br *bufio.Reader, buf []byte) ([]byte, ws.OpCode, error) {
	buf = buf[:0]
	var op ws.OpCode
	for {
		h, err := ws.ReadHeader(br)
		if err != nil {
			return buf, 0, err
		}
		n := int(h.Length)
		if h.OpCode.IsControl() {
			if _, err := br.Discard(n); err != nil {
				return buf, 0, err
			}
			if h.OpCode == ws.OpClose {
				return buf, 0, io.EOF
			}
			continue
		}
		if h.OpCode != ws.OpContinuation {
			op = h.OpCode
		}
		buf = slices.Grow(buf, n)
		start := len(buf)
		buf = buf[:start+n]
		if _, err := io.ReadFull(br, buf[start:]); err != nil {
			return buf, 0, err
		}
		if h.Masked {
			ws.Cipher(buf[start:], h.Mask, 0)
		}
		if h.Fin {
			return buf, op, nil
		}
	}
}

// message is {"type":"x.bench","data":{"seq":S,"pad":"…"},"context":{}},
// or x.warm for a warm-up message, padded to size.
func message(dst []byte, warm bool, seq, size int) []byte {
	typ := "x.bench"
	if warm {
		typ = "x.warm"
	}
	dst = append(dst[:0], `{"type":"`+typ+`","data":{"seq":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"pad":"`...)
	const tail = `"},"context":{}}`
	for len(dst)+len(tail) < size {
		dst = append(dst, 'x')
	}
	return append(dst, tail...)
}

var seqKey = []byte(`"seq":`)

// parse returns whether b is a timed (not warm-up) message and its seq;
// ok is false for anything else (the greeting, other traffic).
func parse(b []byte) (timed bool, seq int, ok bool) {
	switch {
	case bytes.HasPrefix(b, []byte(`{"type":"x.bench"`)):
		timed = true
	case bytes.HasPrefix(b, []byte(`{"type":"x.warm"`)):
	default:
		return false, 0, false
	}
	i := bytes.Index(b, seqKey)
	if i < 0 {
		return false, 0, false
	}
	for _, c := range b[i+len(seqKey):] {
		if c < '0' || c > '9' {
			break
		}
		seq = seq*10 + int(c-'0')
	}
	return timed, seq, true
}

func runFanout(t target, cfg fanoutConfig) (fanoutResult, error) {
	ctx := context.Background()
	subs := make([]*sub, cfg.clients)
	var conns []net.Conn
	var wg sync.WaitGroup
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait() // a failed run's subscribers end before the next run
	}()
	for i := range subs {
		conn, br, err := dial(ctx, t.url, cfg.readBuf)
		if err != nil {
			return fanoutResult{}, fmt.Errorf("subscriber %d: %w", i, err)
		}
		conns = append(conns, conn)
		conn.SetReadDeadline(time.Now().Add(cfg.timeout))
		if _, _, err := readFrame(br, nil); err != nil {
			return fanoutResult{}, fmt.Errorf("subscriber %d: greeting: %w", i, err)
		}
		subs[i] = &sub{conn: conn, br: br, seen: make([]bool, cfg.messages), warm: make(chan struct{})}
	}
	sender, sbr, err := dial(ctx, t.url, 4096)
	if err != nil {
		return fanoutResult{}, fmt.Errorf("sender: %w", err)
	}
	conns = append(conns, sender)
	sender.SetReadDeadline(time.Now().Add(cfg.timeout))
	if _, _, err := readFrame(sbr, nil); err != nil {
		return fanoutResult{}, fmt.Errorf("sender: greeting: %w", err)
	}
	sender.SetReadDeadline(time.Time{})
	bw := bufio.NewWriterSize(sender, 2*cfg.size+64)
	send := func(b []byte) error {
		f := ws.MaskFrameInPlace(ws.NewTextFrame(b))
		if err := ws.WriteFrame(bw, f); err != nil {
			return err
		}
		return bw.Flush() // one write per message, as a client sends them
	}

	for _, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.wOnce.Do(func() { close(s.warm) })
			buf := make([]byte, 0, cfg.size+64)
			lastSet := time.Now()
			for s.got < cfg.messages {
				b, _, err := readFrame(s.br, buf)
				now := time.Now()
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						s.err = err
					}
					return
				}
				buf = b
				timed, seq, ok := parse(b)
				switch {
				case !ok:
				case !timed:
					if seq == cfg.warmup-1 {
						s.wOnce.Do(func() { close(s.warm) })
					}
				case seq < len(s.seen) && !s.seen[seq]:
					s.seen[seq] = true
					s.got++
					s.last = now
				}
				if now.Sub(lastSet) > 50*time.Millisecond {
					lastSet = now
					s.conn.SetReadDeadline(now.Add(cfg.timeout))
				}
			}
		}()
	}

	// Warm-up: the last warm-up message again every 20 ms until every
	// subscriber has it (a bus may greet before the client is in its fan-out).
	msg := make([]byte, 0, cfg.size+32)
	for i := range cfg.warmup {
		if err := send(message(msg, true, i, cfg.size)); err != nil {
			return fanoutResult{}, fmt.Errorf("sender: %w", err)
		}
	}
	deadline := time.Now().Add(cfg.timeout)
	for _, s := range subs {
	wait:
		for {
			select {
			case <-s.warm:
				break wait
			case <-time.After(20 * time.Millisecond):
				if time.Now().After(deadline) {
					return fanoutResult{}, fmt.Errorf("warm-up: a subscriber did not get the warm-up within %v", cfg.timeout)
				}
				if err := send(message(msg, true, cfg.warmup-1, cfg.size)); err != nil {
					return fanoutResult{}, fmt.Errorf("sender: %w", err)
				}
			}
		}
	}

	// The server first: reading its /proc files is this process's work,
	// outside the phase measured.
	srv0, srvOK := serverCPU(t.pid)
	cpu0 := selfCPU()
	first := time.Now()
	for i := range cfg.messages {
		if err := send(message(msg, false, i, cfg.size)); err != nil {
			return fanoutResult{}, fmt.Errorf("sender: message %d: %w", i, err)
		}
	}
	wg.Wait()
	end := time.Now()
	cpu1 := selfCPU()
	srv1, ok1 := serverCPU(t.pid)

	res := fanoutResult{expected: int64(cfg.clients) * int64(cfg.messages), wall: end.Sub(first),
		clientCPU: cpu1 - cpu0, serverCPU: srv1 - srv0, serverOK: srvOK && ok1}
	var last time.Time
	for _, s := range subs {
		res.delivered += int64(s.got)
		if s.last.After(last) {
			last = s.last
		}
		if s.err != nil {
			fmt.Fprintf(os.Stderr, "%s: subscriber: %v\n", t.name, s.err)
		}
	}
	res.elapsed = last.Sub(first)
	return res, nil
}
