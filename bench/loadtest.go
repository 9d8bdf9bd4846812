package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
	"github.com/ovbus/ovbus/ws"
)

// Defaults of LoadConfig's zero fields.
const (
	DefaultLoadConns   = 10
	DefaultLoadPayload = 1024
	DefaultLoadCount   = 10000
	DefaultLoadWindow  = 1
	DefaultLoadWarmup  = 10
)

// LoadConfig describes one echo load test, in the manner of ws-tool's
// load_test: Conns connections each send Payload-byte messages to an echo
// server and time every echo. A zero field means its default.
type LoadConfig struct {
	URL string
	// Conns is the number of connections.
	Conns int
	// Payload is the size of every message in bytes.
	Payload int
	// Count is the number of messages per connection, unless Duration is
	// set.
	Count int
	// Duration, when positive, sends for that long instead of Count
	// messages; the messages in flight then are still awaited.
	Duration time.Duration
	// Window is the number of messages a connection keeps in flight: 1
	// sends the next message when the echo of the last one is back.
	Window int
	// Text sends text messages instead of binary ones.
	Text bool
	// Warmup echoes per connection are exchanged, untimed, before the timed
	// phase (0: DefaultLoadWarmup, negative: none).
	Warmup int
	// Timeout ends a connection that waits longer than this for an echo.
	Timeout time.Duration
	// Measure: Progress counts echoes (expected is 0 in duration mode).
	Measure
}

func (c LoadConfig) withDefaults() LoadConfig {
	if c.Conns <= 0 {
		c.Conns = DefaultLoadConns
	}
	if c.Payload < 0 {
		c.Payload = 0
	}
	if c.Payload == 0 {
		c.Payload = DefaultLoadPayload
	}
	if c.Count <= 0 {
		c.Count = DefaultLoadCount
	}
	if c.Window <= 0 {
		c.Window = DefaultLoadWindow
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultLoadWarmup
	}
	c.Measure = c.Measure.withDefaults()
	return c
}

// LoadResult is the outcome of one echo load test.
type LoadResult struct {
	Conns, Payload, Count, Window int
	Duration                      time.Duration
	Text                          bool

	Sent, Received int64
	// Mismatched counts echoes that were not the message sent (wrong
	// length or sequence number).
	Mismatched int64
	ConnErrors int // failed connects + failed connections
	Timeouts   int // connections ended by the echo timeout
	Errors     []string

	// Elapsed runs from the start of sending until the last connection
	// finished.
	Elapsed   time.Duration
	MsgPerSec float64 // echoes per second
	// MBPerSec is echoed payload per second, one direction, in MB (10^6
	// bytes).
	MBPerSec float64
	RTT      stats.Summary

	ClientCPU   time.Duration
	ServerPID   int
	ServerCPU   time.Duration
	ServerCPUOK bool
	ClientCores float64
	ClientBound bool
}

// ServerCPUPerMessage and ClientCPUPerMessage are CPU time per echo.
func (r *LoadResult) ServerCPUPerMessage() time.Duration {
	if !r.ServerCPUOK {
		return 0
	}
	return perDelivery(r.ServerCPU, r.Received)
}

func (r *LoadResult) ClientCPUPerMessage() time.Duration {
	return perDelivery(r.ClientCPU, r.Received)
}

type loadConn struct {
	c        *ws.Conn
	samples  *stats.Samples
	sent     atomic.Int64
	received atomic.Int64
	mismatch int64
	timeout  bool
}

// RunLoad runs one echo load test against cfg.URL.
func RunLoad(ctx context.Context, cfg LoadConfig) (*LoadResult, error) {
	cfg = cfg.withDefaults()
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	dial := dialOptions(cfg.Dial, cfg.Conns, cfg.Payload*cfg.Window)
	var errs errorLog

	conns := make([]*loadConn, cfg.Conns)
	var open connSet // closed at the end or on cancel
	defer open.closeAll()
	stop := open.closeOnCancel(ctx)
	defer stop()

	capacity := cfg.Count
	if cfg.Duration > 0 {
		capacity = 1 << 14
	}
	connectAll(ctx, cfg.Conns, cfg.ConnectConcurrency, func(i int) {
		c, _, err := ws.Dial(ctx, cfg.URL, dial)
		if err != nil {
			errs.add("connect: %v", err)
			return
		}
		open.add(c)
		if err := warmUp(c, cfg); err != nil {
			errs.add("warm-up: %v", err)
			return
		}
		conns[i] = &loadConn{c: c, samples: stats.NewSamples(capacity)}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	live := slices.DeleteFunc(conns, func(lc *loadConn) bool { return lc == nil })
	if len(live) == 0 {
		return nil, fmt.Errorf("no connection to %s: %s", cfg.URL, errs.first())
	}

	cpu := startCPU(cfg.pids()...)

	// Every connection starts at once; in duration mode they all stop
	// sending at the same deadline.
	t0 := now()
	var sendUntil int64
	if cfg.Duration > 0 {
		sendUntil = t0 + int64(cfg.Duration)
	}
	expected := int64(0)
	if cfg.Duration <= 0 {
		expected = int64(len(live)) * int64(cfg.Count)
	}
	stopProgress := startProgress(cfg.Progress, expected, func() int64 {
		var n int64
		for _, lc := range live {
			n += lc.received.Load()
		}
		return n
	})

	ends := make([]int64, len(live))
	var wg sync.WaitGroup
	for i, lc := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := loadRun{cfg: cfg, now: now, start: start, sendUntil: sendUntil, errs: &errs}
			if cfg.Window == 1 {
				l.pingPong(lc)
			} else {
				l.windowed(lc)
			}
			ends[i] = now()
		}()
	}
	wg.Wait()
	stopProgress()
	end := t0
	for _, e := range ends {
		end = max(end, e)
	}
	usage := cpu.stop(time.Duration(end - t0))

	res := &LoadResult{
		Conns: cfg.Conns, Payload: cfg.Payload, Count: cfg.Count, Window: cfg.Window,
		Duration: cfg.Duration, Text: cfg.Text, ServerPID: cfg.ServerPID,
		Elapsed: time.Duration(end - t0),
	}
	if cfg.Duration > 0 {
		res.Count = 0
	}
	var all stats.Samples
	for _, lc := range live {
		all.Merge(lc.samples)
		res.Sent += lc.sent.Load()
		res.Received += lc.received.Load()
		res.Mismatched += lc.mismatch
		if lc.timeout {
			res.Timeouts++
		}
	}
	res.ConnErrors = errs.n
	res.Errors = errs.msgs
	res.MsgPerSec = stats.Rate(int(res.Received), res.Elapsed)
	res.MBPerSec = res.MsgPerSec * float64(cfg.Payload) / 1e6
	res.RTT = all.Summary()
	res.ClientCPU, res.ClientCores, res.ClientBound = usage.client, usage.cores, usage.bound
	res.ServerCPU, res.ServerCPUOK = usage.server, usage.serverOK
	return res, nil
}

// warmUp exchanges cfg.Warmup untimed echoes on c.
func warmUp(c *ws.Conn, cfg LoadConfig) error {
	if cfg.Warmup <= 0 {
		return nil
	}
	l := loadRun{cfg: cfg}
	p := l.newPayload()
	c.SetReadDeadline(time.Now().Add(cfg.Timeout))
	defer c.SetReadDeadline(time.Time{})
	var buf []byte
	for range cfg.Warmup {
		if err := c.WriteMessage(bg, l.op(), p); err != nil {
			return err
		}
		b, err := readData(c, buf[:0])
		if err != nil {
			return err
		}
		buf = b
	}
	return nil
}

func readData(c *ws.Conn, buf []byte) ([]byte, error) {
	_, b, err := c.ReadMessageInto(bg, buf)
	return b, err
}

// loadRun holds what every connection's loop needs.
type loadRun struct {
	cfg       LoadConfig
	now       func() int64
	start     time.Time
	sendUntil int64 // 0: send cfg.Count messages
	errs      *errorLog
}

// more reports whether to send message number sent (moreAt; the clock is
// read only in duration mode).
func (l *loadRun) more(sent int64) bool {
	var now int64
	if l.sendUntil > 0 {
		now = l.now()
	}
	return l.moreAt(sent, now)
}

func (l *loadRun) op() ws.Opcode {
	if l.cfg.Text {
		return ws.TextMessage
	}
	return ws.BinaryMessage
}

// newPayload returns a message buffer: filler, with room for the sequence
// number in its first 8 bytes (text messages use ASCII filler and carry the
// number in hex).
func (l *loadRun) newPayload() []byte {
	p := make([]byte, l.cfg.Payload)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// stamp writes seq into p (when p has room).
func (l *loadRun) stamp(p []byte, seq int64) {
	if l.cfg.Text {
		if len(p) >= 16 {
			const hex = "0123456789abcdef"
			for i := 15; i >= 0; i-- {
				p[i] = hex[seq&15]
				seq >>= 4
			}
		}
		return
	}
	if len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, uint64(seq))
	}
}

// check reports whether echo is the message numbered seq.
func (l *loadRun) check(echo []byte, seq int64) bool {
	if len(echo) != l.cfg.Payload {
		return false
	}
	var want [16]byte
	l.stamp(want[:min(16, len(echo))], seq)
	switch {
	case l.cfg.Text && len(echo) >= 16:
		return string(echo[:16]) == string(want[:16])
	case !l.cfg.Text && len(echo) >= 8:
		return binary.LittleEndian.Uint64(echo) == uint64(seq)
	}
	return true
}

func (l *loadRun) readDeadline(c *ws.Conn, now int64) {
	c.SetReadDeadline(l.start.Add(time.Duration(now) + l.cfg.Timeout))
}

func (l *loadRun) readFailed(lc *loadConn, err error) {
	if isTimeout(err) {
		lc.timeout = true
		return
	}
	l.errs.add("connection: %v", err)
}

// pingPong is the loop for a window of 1: send, wait for the echo, repeat.
func (l *loadRun) pingPong(lc *loadConn) {
	p := l.newPayload()
	buf := make([]byte, 0, len(p))
	op := l.op()
	var seq int64
	deadlineAt := int64(-1 << 62)
	for l.more(seq) {
		l.stamp(p, seq)
		t := l.now()
		if err := lc.c.WriteMessage(bg, op, p); err != nil {
			l.errs.add("connection: %v", err)
			return
		}
		lc.sent.Store(seq + 1)
		if t-deadlineAt > int64(50*time.Millisecond) {
			deadlineAt = t
			l.readDeadline(lc.c, t)
		}
		_, b, err := lc.c.ReadMessageInto(bg, buf[:0])
		now := l.now()
		if err != nil {
			l.readFailed(lc, err)
			return
		}
		buf = b
		if !l.check(b, seq) {
			lc.mismatch++
		}
		lc.samples.Add(time.Duration(now - t))
		seq++
		lc.received.Store(seq)
	}
}

// lockstepMaxInFlight bounds the bytes a window may hold for windowed's
// single-goroutine loop, which writes only between reads: if the bytes in
// flight could fill the network path to the server (this connection's send
// buffer and the server's receive buffer: at least 128 KiB with the default
// buffers of Linux, macOS and Windows), a server that writes its echoes
// from the goroutine that reads (as every echo server here does) would
// stop reading while the client stopped reading too. A larger window uses
// windowedSplit, which reads while it writes.
const lockstepMaxInFlight = 128 << 10

// windowed keeps up to Window messages in flight on one goroutine: it
// buffers a message for every free slot of the window (BufferMessage),
// reads an echo, and so on; the buffered messages leave together, in one
// system call, when the read has to wait for the network. So a connection
// writes once per burst of echoes it read, as a pipelining client does
// (redis-benchmark -P, HTTP/1.1 pipelining), instead of once per message,
// and needs no second goroutine and no hand-off per message: what the
// client costs per message is small beside what it measures. Every echo is
// timed against the send time kept in a ring (an echo server answers in
// order); a message's send time is when it was buffered, so its RTT also
// holds the client's reading of the echoes that arrived with the one that
// freed its slot.
func (l *loadRun) windowed(lc *loadConn) {
	w := int64(l.cfg.Window)
	if w*int64(l.cfg.Payload+ws.MaxHeaderSize) > lockstepMaxInFlight {
		l.windowedSplit(lc)
		return
	}
	ring := make([]int64, w)
	p := l.newPayload()
	op := l.op()
	buf := make([]byte, 0, l.cfg.Payload)
	var sent, got int64
	sending := true
	deadlineAt := int64(-1 << 62)
	now := l.now() // one clock reading per echo: its arrival, the next send
	for {
		if sending && sent-got < w {
			for sent-got < w {
				if !l.moreAt(sent, now) {
					sending = false
					break
				}
				l.stamp(p, sent)
				ring[sent%w] = now
				if err := lc.c.BufferMessage(op, p); err != nil {
					l.errs.add("connection: %v", err)
					return
				}
				sent++
			}
			lc.sent.Store(sent)
		}
		if got == sent {
			return // nothing more to send, every echo in
		}
		if now-deadlineAt > int64(50*time.Millisecond) {
			deadlineAt = now
			l.readDeadline(lc.c, now)
		}
		_, b, err := lc.c.ReadMessageInto(bg, buf[:0])
		now = l.now()
		if err != nil {
			l.readFailed(lc, err)
			return
		}
		buf = b
		if !l.check(b, got) {
			lc.mismatch++
		}
		lc.samples.Add(time.Duration(now - ring[got%w]))
		got++
		lc.received.Store(got)
	}
}

// moreAt is more for a send at time now, already read from the clock:
// until the duration is over, or Count messages.
func (l *loadRun) moreAt(sent, now int64) bool {
	if l.sendUntil > 0 {
		return now < l.sendUntil
	}
	return sent < int64(l.cfg.Count)
}

// windowedSplit is windowed for a window too large for one goroutine
// (lockstepMaxInFlight): a writer sends while the window has room, one
// write per message, and the reader times every echo against the send time
// kept in a ring.
func (l *loadRun) windowedSplit(lc *loadConn) {
	w := l.cfg.Window
	ring := make([]atomic.Int64, w)
	tokens := make(chan struct{}, w)
	var doneSending atomic.Bool
	var readerGone atomic.Bool
	writerDone := make(chan struct{})

	go func() {
		defer close(writerDone)
		p := l.newPayload()
		op := l.op()
		var seq int64
		for l.more(seq) {
			tokens <- struct{}{}
			if readerGone.Load() {
				break
			}
			l.stamp(p, seq)
			ring[seq%int64(w)].Store(l.now())
			if err := lc.c.WriteMessage(bg, op, p); err != nil {
				l.errs.add("connection: %v", err)
				break
			}
			seq++
			lc.sent.Store(seq)
		}
		doneSending.Store(true)
		// When every echo is already in, wake the reader from its read.
		if lc.received.Load() == lc.sent.Load() {
			lc.c.SetReadDeadline(time.Unix(1, 0))
		}
	}()

	buf := make([]byte, 0, l.cfg.Payload)
	var seq int64
	deadlineAt := int64(-1 << 62)
	defer func() {
		readerGone.Store(true)
		select { // unblock a writer waiting for a token
		case <-tokens:
		default:
		}
		<-writerDone
	}()
	for {
		// The deadline is moved before the check: a writer that finishes
		// after the check sets its wake-up deadline after ours.
		if now := l.now(); now-deadlineAt > int64(50*time.Millisecond) {
			deadlineAt = now
			l.readDeadline(lc.c, now)
		}
		if doneSending.Load() && seq == lc.sent.Load() {
			return
		}
		_, b, err := lc.c.ReadMessageInto(bg, buf[:0])
		now := l.now()
		if err != nil {
			if doneSending.Load() && seq == lc.sent.Load() {
				return // woken by the writer
			}
			l.readFailed(lc, err)
			lc.c.CloseNow() // a writer blocked in a write returns
			return
		}
		buf = b
		if !l.check(b, seq) {
			lc.mismatch++
		}
		lc.samples.Add(time.Duration(now - ring[seq%int64(w)].Load()))
		seq++
		lc.received.Store(seq)
		<-tokens
	}
}
