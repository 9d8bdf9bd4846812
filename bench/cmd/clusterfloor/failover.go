package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovbus/ovbus/bench/stats"
	"github.com/ovbus/ovbus/cluster"
)

// FailoverResult is one kill of a leader.
type FailoverResult struct {
	What   string `json:"what"`   // "stream" or "kv lease"
	Killed string `json:"killed"` // the server that led it
	// ConfirmedAfter is the time from the kill to the first publish (or
	// lease renewal) sent after it that was confirmed.
	ConfirmedAfterS float64 `json:"confirmed_after_s"`
	// SilenceS (stream) is the longest time the receiver on a third server
	// got nothing, around the kill.
	SilenceS float64 `json:"silence_s,omitempty"`
	// RenewP50Ms (kv lease) is a renewal's latency before the kill.
	RenewP50Ms float64 `json:"renew_p50_ms,omitempty"`
}

const (
	failPeriod = 5 * time.Millisecond // stream: a publish every
	renewEvery = 10 * time.Millisecond
	steady     = time.Second // before the kill
)

func runFailover(fs []*floorServer, repeat int) ([]*FailoverResult, error) {
	var out []*FailoverResult
	for range repeat {
		r, err := streamFailover(fs)
		if err != nil {
			return nil, fmt.Errorf("stream: %w", err)
		}
		out = append(out, r)
	}
	for range repeat {
		r, err := kvFailover(fs)
		if err != nil {
			return nil, fmt.Errorf("kv lease: %w", err)
		}
		out = append(out, r)
	}
	fmt.Printf("| JetStream asset (R3, memory) | leader killed | first confirmed publish after the kill | longest silence at a receiver | renewal p50 |\n|---|---|---:|---:|---:|\n")
	for _, r := range out {
		sil, renew := "", ""
		if r.What == "stream" {
			sil = fmt.Sprintf("%.2f s", r.SilenceS)
		} else {
			renew = fmt.Sprintf("%.2f ms", r.RenewP50Ms)
		}
		fmt.Printf("| %s | %s | %.2f s | %s | %s |\n", r.What, r.Killed, r.ConfirmedAfterS, sil, renew)
	}
	return out, nil
}

// leaderOf returns the index of the server that leads stream (asked of
// server via).
func leaderOf(fs []*floorServer, via int, stream string) (int, error) {
	nc, err := nats.Connect(fs[via].url())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var leader string
	err = within(60*time.Second, func(ctx context.Context) error {
		for {
			s, err := js.Stream(ctx, stream)
			if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" {
				leader = s.CachedInfo().Cluster.Leader
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s has no leader: %v", stream, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	for i, f := range fs {
		if f.name == leader {
			return i, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("unknown leader %q", leader)
	}
	return 0, err
}

// others returns the two indexes other than l.
func others(l int) (int, int) { return (l + 1) % 3, (l + 2) % 3 }

// restart starts server i again and waits until every copy of stream is
// current.
func restart(fs []*floorServer, i int, stream string) error {
	if err := fs[i].start(); err != nil {
		return err
	}
	nc, err := nats.Connect(fs[(i+1)%3].url())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	return within(120*time.Second, func(ctx context.Context) error {
		for {
			s, err := js.Stream(ctx, stream)
			if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" {
				current := 0
				for _, r := range s.CachedInfo().Cluster.Replicas {
					if r.Current {
						current++
					}
				}
				if current == 2 {
					return nil
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s not whole again after %s restarted", stream, fs[i].name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// streamFailover publishes to the stream from one server, receives its
// republished messages on another, and kills the third, its leader.
func streamFailover(fs []*floorServer) (*FailoverResult, error) {
	pubConn, err := nats.Connect(fs[0].url())
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(pubConn)
	if err := untilAnswered(func(ctx context.Context) error { _, err := floorStream(ctx, js); return err }); err != nil {
		pubConn.Close()
		return nil, err
	}
	pubConn.Close()
	l, err := leaderOf(fs, 0, streamName)
	if err != nil {
		return nil, err
	}
	p, r := others(l)
	pub, err := nats.Connect(fs[p].url())
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	rcv, err := nats.Connect(fs[r].url())
	if err != nil {
		return nil, err
	}
	defer rcv.Close()
	var mu sync.Mutex
	var arrivals []time.Time
	var confirmed []time.Time // of messages sent after the kill
	var killed time.Time
	sent := map[uint64]time.Time{}
	if _, err := rcv.Subscribe(subjOrdered, func(*nats.Msg) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}); err != nil {
		return nil, err
	}
	rcv.Flush()
	inbox := pub.NewRespInbox()
	if _, err := pub.Subscribe(inbox+".*", func(m *nats.Msg) {
		now := time.Now()
		id, _ := strconv.ParseUint(m.Subject[len(inbox)+1:], 10, 64)
		if !stored(m) {
			return
		}
		mu.Lock()
		if !killed.IsZero() && sent[id].After(killed) {
			confirmed = append(confirmed, now)
		}
		mu.Unlock()
	}); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // a frame every failPeriod, as a node would send them
		defer close(done)
		t := time.NewTicker(failPeriod)
		defer t.Stop()
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			m := cluster.BenchMsg(subjStore, "p", cluster.OrderTotal, id, [][]byte{frame(int(id), 256)})
			m.Reply = inbox + "." + strconv.FormatUint(id, 10)
			mu.Lock()
			sent[id] = time.Now()
			mu.Unlock()
			pub.PublishMsg(m)
		}
	}()
	time.Sleep(steady)
	mu.Lock()
	killed = time.Now()
	mu.Unlock()
	fs[l].kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		ok := len(confirmed) > 0
		mu.Unlock()
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(steady)
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(confirmed) == 0 {
		return nil, errors.New("no publish confirmed within 60s of the kill")
	}
	res := &FailoverResult{What: "stream", Killed: fs[l].name, ConfirmedAfterS: confirmed[0].Sub(killed).Seconds()}
	prev := killed
	for _, a := range arrivals {
		if a.After(killed) {
			res.SilenceS = max(res.SilenceS, a.Sub(prev).Seconds())
			prev = a
		}
	}
	if err := restart(fs, l, streamName); err != nil {
		return nil, err
	}
	return res, nil
}

// stored reports whether a publish's answer says the stream stored it.
func stored(m *nats.Msg) bool {
	if len(m.Data) == 0 {
		return false // no responders
	}
	var a struct {
		Seq   uint64          `json:"seq"`
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(m.Data, &a) == nil && a.Error == nil && a.Seq > 0
}

// kvFailover keeps a lease on a KV bucket by compare-and-set (a renewal
// every renewEvery) from a server that does not lead the bucket, and kills
// the one that does.
func kvFailover(fs []*floorServer) (*FailoverResult, error) {
	const bucket = "lease"
	setup, err := nats.Connect(fs[0].url())
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(setup)
	err = untilAnswered(func(ctx context.Context) error {
		_, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.MemoryStorage, Replicas: 3, TTL: 2 * time.Second})
		return err
	})
	setup.Close()
	if err != nil {
		return nil, err
	}
	l, err := leaderOf(fs, 0, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	p, _ := others(l)
	nc, err := nats.Connect(fs[p].url())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	var kv jetstream.KeyValue
	var rev uint64
	err = within(10*time.Second, func(ctx context.Context) error {
		if kv, err = js.KeyValue(ctx, bucket); err != nil {
			return err
		}
		rev, err = kv.Put(ctx, "holder", []byte(fs[p].name))
		return err
	})
	if err != nil {
		return nil, err
	}
	// renew is one compare-and-set. A refusal for a stale revision (the
	// previous renewal was stored, its answer lost in the failover, or the
	// lease expired meanwhile: revision 0) is a definite answer too: the
	// bucket works; the next renewal uses the revision the refusal names.
	renew := func() (time.Duration, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		r, err := kv.Update(ctx, "holder", []byte(fs[p].name), rev)
		if err == nil {
			rev = r
			return time.Since(t0), true
		}
		if _, last, ok := strings.Cut(err.Error(), "wrong last sequence: "); ok {
			if i := strings.IndexFunc(last, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
				last = last[:i]
			}
			if r, err := strconv.ParseUint(last, 10, 64); err == nil {
				rev = r
				return 0, true
			}
		}
		return 0, false
	}
	var lat []time.Duration
	for end := time.Now().Add(steady); time.Now().Before(end); time.Sleep(renewEvery) {
		if d, ok := renew(); ok && d > 0 {
			lat = append(lat, d)
		}
	}
	killed := time.Now()
	fs[l].kill()
	var back time.Time
	for deadline := killed.Add(60 * time.Second); back.IsZero() && time.Now().Before(deadline); time.Sleep(renewEvery) {
		if _, ok := renew(); ok {
			back = time.Now()
		}
	}
	if back.IsZero() {
		return nil, errors.New("no renewal succeeded within 60s of the kill")
	}
	slices.Sort(lat)
	res := &FailoverResult{What: "kv lease", Killed: fs[l].name, ConfirmedAfterS: back.Sub(killed).Seconds(),
		RenewP50Ms: float64(stats.Median(lat)) / 1e6}
	if err := restart(fs, l, "KV_"+bucket); err != nil {
		return nil, err
	}
	return res, nil
}
