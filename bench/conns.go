package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/ovbus/ovbus/bench/stats"
	"github.com/ovbus/ovbus/ws"
)

// This file is the plumbing RunFanout and RunLoad share: opening and
// closing the connections, counting their errors, measuring CPU time and
// reporting progress.

// bg is the context of every read and write on a benchmark connection: a
// context that can end would cost a timer per call. Cancellation closes the
// connections instead.
var bg = context.Background()

// dialOptions returns the options every benchmark connection uses: the
// caller's, or no proxy (a benchmark measures the bus, not a proxy) and
// read buffers large enough to take many messages per system call without
// using gigabytes for a thousand clients.
func dialOptions(o *ws.DialOptions, clients, size int) *ws.DialOptions {
	var d ws.DialOptions
	if o != nil {
		d = *o
	} else {
		d.Proxy = ws.NoProxy
	}
	if d.ReadBufferSize <= 0 {
		n := (32 << 20) / max(clients, 1)
		d.ReadBufferSize = min(max(n, 16<<10, 2*size), 256<<10)
	}
	if d.WriteBufferSize <= 0 {
		d.WriteBufferSize = max(32<<10, 2*size)
	}
	if d.CloseTimeout <= 0 {
		d.CloseTimeout = time.Second
	}
	return &d
}

// connectAll calls connect(i) for every i in [0, n), at most concurrency at
// a time, and returns when every call has returned. It starts no more calls
// once ctx has ended.
func connectAll(ctx context.Context, n, concurrency int, connect func(i int)) {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			connect(i)
		}()
	}
	wg.Wait()
}

// connectGreeted dials url and takes the bus's greeting.
func connectGreeted(ctx context.Context, url string, dial *ws.DialOptions, noGreeting bool, timeout time.Duration) (*ws.Conn, error) {
	c, _, err := ws.Dial(ctx, url, dial)
	if err != nil {
		return nil, err
	}
	if noGreeting {
		return c, nil
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	_, _, err = c.ReadMessageInto(bg, nil)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		c.CloseNow()
		if isTimeout(err) {
			return nil, fmt.Errorf("no greeting within %v (use --no-greeting for buses that send none)", timeout)
		}
		return nil, fmt.Errorf("greeting: %w", err)
	}
	return c, nil
}

// connSet is every open connection of a run.
type connSet struct {
	m sync.Map // *ws.Conn → nil
}

func (s *connSet) add(c *ws.Conn) { s.m.Store(c, nil) }

// closeOnCancel closes every connection at once, without a closing
// handshake, when ctx ends; the returned function stops that.
func (s *connSet) closeOnCancel(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		s.m.Range(func(k, _ any) bool { k.(*ws.Conn).CloseNow(); return true })
	})
}

// closeAll closes every connection with a closing handshake, all at once,
// and waits (each Close is bounded by the dial options' CloseTimeout).
func (s *connSet) closeAll() {
	var wg sync.WaitGroup
	s.m.Range(func(k, _ any) bool {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.(*ws.Conn).Close(ws.StatusNormalClosure, "")
		}()
		return true
	})
	wg.Wait()
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// errorLog keeps a count and the first few distinct messages.
type errorLog struct {
	mu   sync.Mutex
	n    int
	msgs []string
}

func (e *errorLog) add(format string, a ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.msgs) >= 5 {
		return
	}
	s := fmt.Sprintf(format, a...)
	for _, m := range e.msgs {
		if m == s {
			return
		}
	}
	e.msgs = append(e.msgs, s)
}

func (e *errorLog) first() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.msgs) == 0 {
		return "unknown error"
	}
	return e.msgs[0]
}

// cpuMeter measures the CPU time of this process, and of the server
// process when its pid is known, over the timed phase of a run.
type cpuMeter struct {
	serverPIDs   []int
	serverBefore []stats.CPUSample
	serverOK     bool
	selfBefore   time.Duration
	selfErr      error
}

// startCPU takes the first CPU samples of this process and of the server
// processes (several for a cluster; pids ≤ 0 are left out).
func startCPU(serverPIDs ...int) *cpuMeter {
	m := &cpuMeter{}
	for _, pid := range serverPIDs {
		if pid <= 0 {
			continue
		}
		s, err := stats.ReadCPU(pid)
		if err != nil {
			m.serverPIDs, m.serverBefore = nil, nil
			break
		}
		m.serverPIDs, m.serverBefore = append(m.serverPIDs, pid), append(m.serverBefore, s)
	}
	m.serverOK = len(m.serverPIDs) > 0
	m.selfBefore, m.selfErr = stats.SelfCPU()
	return m
}

// cpuUsage is what a cpuMeter measured.
type cpuUsage struct {
	client   time.Duration // 0 when unknown
	server   time.Duration
	serverOK bool    // server is known
	cores    float64 // client ÷ the wall time of the phase
	bound    bool    // cores > ClientBoundShare
}

// stop takes the second CPU samples; wall is the time since startCPU.
func (m *cpuMeter) stop(wall time.Duration) cpuUsage {
	var u cpuUsage
	selfAfter, err := stats.SelfCPU()
	if m.selfErr == nil && err == nil {
		u.client = selfAfter - m.selfBefore
	}
	if m.serverOK {
		u.serverOK = true
		for i, pid := range m.serverPIDs {
			after, err := stats.ReadCPU(pid)
			if err != nil {
				u.server, u.serverOK = 0, false
				break
			}
			u.server += stats.CPUSince(m.serverBefore[i], after)
		}
	}
	if wall > 0 {
		u.cores = u.client.Seconds() / wall.Seconds()
	}
	u.bound = u.cores > ClientBoundShare
	return u
}

// CPUFigures is the CPU time a fan-out or steady run measured over its timed
// phase (Wall): this client's from getrusage, the server's from /proc when
// its pid is known (ServerCPUOK).
type CPUFigures struct {
	Wall        time.Duration
	ClientCPU   time.Duration
	ServerPID   int
	ServerCPU   time.Duration
	ServerCPUOK bool
	// ClientCores is ClientCPU ÷ Wall; ClientBound is ClientCores >
	// ClientBoundShare: the client may have been the bottleneck and a
	// throughput figure is a floor.
	ClientCores float64
	ClientBound bool
	// ServerCores is ServerCPU ÷ Wall (0 when unknown). When ClientCores +
	// ServerCores is near the number of CPUs the two share, a throughput is
	// the figure of the client and the server together.
	ServerCores float64
}

// figures returns what the meter measured over wall, for server pid.
func (u cpuUsage) figures(wall time.Duration, pid int) CPUFigures {
	f := CPUFigures{Wall: wall, ServerPID: pid, ClientCPU: u.client, ClientCores: u.cores, ClientBound: u.bound,
		ServerCPU: u.server, ServerCPUOK: u.serverOK}
	if u.serverOK && wall > 0 {
		f.ServerCores = u.server.Seconds() / wall.Seconds()
	}
	return f
}

// ClientCPUPerDelivery and ServerCPUPerDelivery are CPU time per delivered
// message or frame (0 when nothing was delivered or the figure is unknown).
func (f CPUFigures) ClientCPUPerDelivery(delivered int64) time.Duration {
	return perDelivery(f.ClientCPU, delivered)
}

func (f CPUFigures) ServerCPUPerDelivery(delivered int64) time.Duration {
	if !f.ServerCPUOK {
		return 0
	}
	return perDelivery(f.ServerCPU, delivered)
}

// addMetrics adds the CPU figures to a report's metrics, per delivery.
func (f CPUFigures) addMetrics(m map[string]float64, delivered int64) {
	m["client_cpu_ms"] = ms(f.ClientCPU)
	m["client_cpu_cores"] = f.ClientCores
	m["client_cpu_us_per_delivery"] = us(f.ClientCPUPerDelivery(delivered))
	m["client_bound"] = b2f(f.ClientBound)
	if f.ServerCPUOK {
		m["server_cpu_ms"] = ms(f.ServerCPU)
		m["server_cpu_cores"] = f.ServerCores
		m["server_cpu_us_per_delivery"] = us(f.ServerCPUPerDelivery(delivered))
	}
}

func perDelivery(d time.Duration, n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return d / time.Duration(n)
}

// startProgress calls progress(done(), expected) ten times a second, and
// once more when the returned function is called; that function returns
// after the last call. A nil progress is never called.
func startProgress(progress func(done, expected int64), expected int64, done func() int64) (stop func()) {
	if progress == nil {
		return func() {}
	}
	report := func() { progress(done(), expected) }
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				report()
			case <-quit:
				report()
				return
			}
		}
	}()
	return func() { close(quit); <-finished }
}
