package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovbus/ovbus/bench/stats"
	"github.com/ovbus/ovbus/cluster"
	"github.com/ovbus/ovbus/ws"
)

type latencyConfig struct {
	repeat, lone, bursts, size int
	gap                        time.Duration
}

const (
	burstFrames = 200
	burstSubs   = 5
	chanRoom    = 4 * burstFrames // a receiver's frames not yet looked at
	burstPause  = time.Second     // between bursts, as `ovbus bench --pause 1s`
)

// target is one path measured: the floor or ovbus.
type target interface {
	name() string
	// receivers connects n receivers, the i-th to node i%3 (the
	// sender's is node 0), and returns a channel per receiver of the
	// frames' numbers with their arrival times, and a function that closes
	// them. The first frame through (a warm-up) comes back before it
	// returns: every receiver's interest has reached the sender's node.
	receivers(n int) ([]chan arrival, func(), error)
	// send sends frames numbered from first, back to back; sent is when
	// the first left.
	send(first, count int) (sent time.Time, err error)
}

type arrival struct {
	i  int
	at time.Time
}

// Result is one target's figures.
type Result struct {
	Target         string        `json:"target"`
	Lone           stats.Summary `json:"lone"`
	LoneP90        time.Duration `json:"lone_p90"`
	BurstSpans     []float64     `json:"burst_spans_ms"`
	BurstSpanMed   float64       `json:"burst_span_median_ms"`
	BurstSpanMin   float64       `json:"burst_span_min_ms"`
	BurstSpanMax   float64       `json:"burst_span_max_ms"`
	lone           []time.Duration
	rounds, bursts int
}

func runLatency(fs []*floorServer, urls []string, c latencyConfig) ([]*Result, error) {
	fl, err := newFloorTarget(fs, c.size)
	if err != nil {
		return nil, err
	}
	defer fl.close()
	targets := []target{fl}
	if urls != nil {
		targets = append(targets, &ovbusTarget{urls: urls, size: c.size})
	}
	results := make([]*Result, len(targets))
	for i, t := range targets {
		results[i] = &Result{Target: t.name()}
	}
	next := 1 // frame numbers go on across phases: a receiver never takes an old one for a new one
	for round := range c.repeat {
		for i, t := range targets {
			l, err := measureLone(t, &next, c)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s, lone: %w", round+1, t.name(), err)
			}
			results[i].lone = append(results[i].lone, l...)
		}
		for i, t := range targets {
			spans, err := measureBursts(t, &next, c.bursts)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s, 5×200: %w", round+1, t.name(), err)
			}
			for _, s := range spans {
				results[i].BurstSpans = append(results[i].BurstSpans, float64(s.Microseconds())/1000)
			}
		}
	}
	for _, r := range results {
		r.Lone = stats.Summarize(r.lone)
		r.LoneP90 = stats.Percentile(r.lone, 0.90)
		sp := stats.SummarizeRepeats(r.BurstSpans)
		r.BurstSpanMed, r.BurstSpanMin, r.BurstSpanMax = sp.Median, sp.Min, sp.Max
	}
	printLatency(results, c)
	return results, nil
}

// measureLone sends c.lone frames one at a time, c.gap apart, and returns
// the latency of each at each of the two receivers on the other nodes.
func measureLone(t target, next *int, c latencyConfig) ([]time.Duration, error) {
	chans, closeAll, err := t.receivers(3)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	chans = chans[1:] // the receivers on the two other nodes
	var out []time.Duration
	for range c.lone {
		i := *next
		*next++
		sent, err := t.send(i, 1)
		if err != nil {
			return nil, err
		}
		for _, ch := range chans {
			a, err := waitFor(ch, i)
			if err != nil {
				return nil, err
			}
			out = append(out, a.Sub(sent))
		}
		time.Sleep(c.gap)
	}
	return out, nil
}

// measureBursts runs n bursts of 5×200 and returns their spans.
func measureBursts(t target, next *int, n int) ([]time.Duration, error) {
	var spans []time.Duration
	for range n {
		chans, closeAll, err := t.receivers(burstSubs)
		if err != nil {
			return nil, err
		}
		time.Sleep(burstPause)
		first := *next
		*next += burstFrames
		sent, err := t.send(first, burstFrames)
		if err != nil {
			closeAll()
			return nil, err
		}
		var last time.Time
		for _, ch := range chans {
			a, err := waitFor(ch, first+burstFrames-1)
			if err != nil {
				closeAll()
				return nil, err
			}
			if a.After(last) {
				last = a
			}
		}
		closeAll()
		spans = append(spans, last.Sub(sent))
	}
	return spans, nil
}

// waitFor reads ch until frame i arrives.
func waitFor(ch chan arrival, i int) (time.Time, error) {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case a := <-ch:
			if a.i == i {
				return a.at, nil
			}
		case <-timeout:
			return time.Time{}, fmt.Errorf("frame %d did not arrive within 10s", i)
		}
	}
}

// frame is a JSON frame of size bytes carrying its number.
func frame(i, size int) []byte {
	b := fmt.Appendf(nil, `{"type":"floor","data":{"i":%d,"pad":"`, i)
	pad := max(0, size-len(b)-len(`"},"context":{}}`))
	b = append(b, bytes.Repeat([]byte("x"), pad)...)
	return append(b, `"},"context":{}}`...)
}

// frameNumber reads the number of a frame made by frame.
func frameNumber(p []byte) (int, bool) {
	j := bytes.Index(p, []byte(`"i":`))
	if j < 0 {
		return 0, false
	}
	p = p[j+4:]
	k := bytes.IndexByte(p, ',')
	if k < 0 {
		return 0, false
	}
	i, err := strconv.Atoi(string(p[:k]))
	return i, err == nil
}

// floorTarget is the bare JetStream path.
type floorTarget struct {
	fs   []*floorServer
	size int
	pub  *nats.Conn
	ack  *nats.Subscription
	js   jetstream.JetStream
	seq  uint64
}

func newFloorTarget(fs []*floorServer, size int) (*floorTarget, error) {
	pub, err := nats.Connect(fs[0].url())
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(pub)
	if err != nil {
		return nil, err
	}
	f := &floorTarget{fs: fs, size: size, pub: pub, js: js}
	err = untilAnswered(func(ctx context.Context) error { _, err := floorStream(ctx, js); return err })
	if err == nil {
		err = within(time.Minute, func(ctx context.Context) error { return lead(ctx, pub, js, streamName, fs[0].name) })
	}
	if err != nil {
		pub.Close()
		return nil, err
	}
	// The stream's answers come to an inbox, as a node's do; not waited for.
	f.ack, err = pub.Subscribe(pub.NewRespInbox()+".*", func(*nats.Msg) {})
	return f, err
}

func (f *floorTarget) name() string { return "floor (JetStream R3)" }

func (f *floorTarget) close() { f.pub.Close() }

func (f *floorTarget) receivers(n int) ([]chan arrival, func(), error) {
	var conns []*nats.Conn
	var chans []chan arrival
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for i := range n {
		nc, err := nats.Connect(f.fs[i%3].url())
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, nc)
		ch := make(chan arrival, chanRoom)
		chans = append(chans, ch)
		_, err = nc.Subscribe(subjOrdered, func(m *nats.Msg) {
			// Each frame, as a bus's client gets and reads it.
			cluster.BenchEach(m, func(p []byte) {
				if k, ok := frameNumber(p); ok {
					ch <- arrival{k, time.Now()}
				}
			})
		})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		nc.Flush()
	}
	return chans, closeAll, warmUp(f, chans)
}

func (f *floorTarget) send(first, count int) (time.Time, error) {
	q := make(chan []byte, count)
	sent := time.Now()
	go func() { // the bus's reader handing frames to Sequence
		for i := range count {
			q <- frame(first+i, f.size)
		}
		close(q)
	}()
	// publishLoop: what is queued goes in one message (cluster.BatchFits).
	var batch [][]byte
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		m := cluster.BenchMsg(subjStore, "f0", cluster.OrderTotal, f.seq+1, batch)
		f.seq += uint64(len(batch))
		m.Reply = strings.TrimSuffix(f.ack.Subject, "*") + strconv.FormatUint(f.seq, 10)
		batch, size = batch[:0], 0
		return f.pub.PublishMsg(m)
	}
	for p := range q {
		batch, size = append(batch, p), size+len(p)
	more:
		for {
			select {
			case p, ok := <-q:
				if !ok {
					break more
				}
				if !cluster.BatchFits(len(batch), size, len(p)) {
					if err := flush(); err != nil {
						return sent, err
					}
				}
				batch, size = append(batch, p), size+len(p)
			default:
				break more
			}
		}
		if err := flush(); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// ovbusTarget is the path through three ovbus nodes.
type ovbusTarget struct {
	urls []string
	size int
	mu   sync.Mutex
	snd  *ws.Conn
}

func (o *ovbusTarget) name() string { return "ovbus total3" }

func (o *ovbusTarget) dial(url string) (*ws.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := ws.Dial(ctx, url, &ws.DialOptions{Proxy: ws.NoProxy})
	if err != nil {
		return nil, err
	}
	if _, _, err := c.ReadMessage(ctx); err != nil { // the greeting
		c.CloseNow()
		return nil, err
	}
	return c, nil
}

func (o *ovbusTarget) receivers(n int) ([]chan arrival, func(), error) {
	var conns []*ws.Conn
	var chans []chan arrival
	closeAll := func() {
		for _, c := range conns {
			c.CloseNow()
		}
		o.mu.Lock()
		if o.snd != nil {
			o.snd.CloseNow()
			o.snd = nil
		}
		o.mu.Unlock()
	}
	for i := range n {
		c, err := o.dial(o.urls[i%3])
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, c)
		ch := make(chan arrival, chanRoom)
		chans = append(chans, ch)
		go func() {
			for {
				// Each frame looked at in place, as the floor's
				// receivers look at theirs (no copy per frame).
				_, p, err := c.NextMessage(context.Background())
				if err != nil {
					return
				}
				if k, ok := frameNumber(p); ok {
					ch <- arrival{k, time.Now()}
				}
			}
		}()
	}
	snd, err := o.dial(o.urls[0])
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	go func() { // the sender's own frames come back to it
		for {
			if _, _, err := snd.NextMessage(context.Background()); err != nil {
				return
			}
		}
	}()
	o.mu.Lock()
	o.snd = snd
	o.mu.Unlock()
	return chans, closeAll, warmUp(o, chans)
}

func (o *ovbusTarget) send(first, count int) (time.Time, error) {
	frames := make([][]byte, count)
	for i := range count {
		frames[i] = frame(first+i, o.size)
	}
	o.mu.Lock()
	snd := o.snd
	o.mu.Unlock()
	sent := time.Now()
	for _, p := range frames {
		if err := snd.WriteMessage(context.Background(), ws.OpText, p); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// warmUp sends frame 0 until every receiver got one: interest has
// propagated and every connection is warm.
func warmUp(t target, chans []chan arrival) error {
	for try := 0; try < 50; try++ {
		if _, err := t.send(0, 1); err != nil {
			return err
		}
		deadline := time.After(200 * time.Millisecond)
		got := 0
		for _, ch := range chans {
		wait:
			for {
				select {
				case a := <-ch:
					if a.i == 0 {
						got++
						break wait
					}
				case <-deadline:
					break wait
				}
			}
		}
		if got == len(chans) {
			// drain the copies of later tries
			time.Sleep(50 * time.Millisecond)
			for _, ch := range chans {
				for len(ch) > 0 {
					<-ch
				}
			}
			return nil
		}
	}
	return fmt.Errorf("%s: the warm-up frame did not reach every receiver", t.name())
}

func printLatency(rs []*Result, c latencyConfig) {
	fmt.Printf("| path | lone frames: n | p50 | p90 | p99 | max | 5×200 span: median | min | max |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %.2f ms | %.2f ms | %.2f ms |\n", r.Target, r.Lone.N, ms(r.Lone.Median), ms(r.LoneP90),
			ms(r.Lone.P99), ms(r.Lone.Max), r.BurstSpanMed, r.BurstSpanMin, r.BurstSpanMax)
	}
	if len(rs) == 2 {
		f, o := rs[0], rs[1]
		fmt.Printf("\novbus over the floor: lone frames p50 %+.3f ms (goal ≤ +0.5 ms); 5×200 span ×%.2f (goal ≤ ×1.5)\n",
			float64(o.Lone.Median-f.Lone.Median)/1e6, o.BurstSpanMed/f.BurstSpanMed)
	}
	fmt.Printf("(%d rounds; per round and path %d lone frames %v apart, each timed at the 2 receivers on the other nodes, and %d bursts of 5×200, %v apart)\n",
		c.repeat, c.lone, c.gap, c.bursts, burstPause)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }
