package bus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// BenchmarkFanout: one sender, M socket subscribers over loopback, all in
// this process. Each op is one message sent and delivered to every
// subscriber; deliveries/s counts the subscribers' receipts, as the OVOS
// benchmark does. The sender keeps at most a window of messages ahead of
// the slowest subscriber, so a long run measures sustained throughput
// instead of the queue bounds. cpu-ns/op is the CPU time of the whole
// process (bus and clients) per message.
func BenchmarkFanout(b *testing.B) {
	for _, m := range []int{5, 10, 100} {
		b.Run(fmt.Sprintf("M=%d", m), func(b *testing.B) { benchFanout(b, m) })
	}
}

func benchFanout(b *testing.B, m int) {
	_, url := testServer(b, Options{})
	msg := []byte(`{"type":"bench.message","data":{"utterance":"what is the weather like today","n":12345,"sent":1700000000.123456},"context":{"source":"bench","destination":["skills"],"session":{"session_id":"default"}}}`)
	const window = 4096

	subs := make([]*ws.Conn, m)
	for i := range subs {
		subs[i] = dial(b, url, nil)
	}
	sender := dial(b, url, nil)
	var minRecv atomic.Int64 // messages the slowest subscriber has read
	recv := make([]atomic.Int64, m)
	n := b.N

	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	var wg sync.WaitGroup
	for i, c := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for k := 0; k < n; k++ {
				_, p, err := c.ReadMessageInto(context.Background(), buf[:0])
				if err != nil {
					b.Errorf("subscriber %d after %d: %v", i, k, err)
					return
				}
				buf = p
				if k&255 == 255 {
					recv[i].Store(int64(k + 1))
				}
			}
			recv[i].Store(int64(n))
		}()
	}
	// The sender drains its own echoes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var buf []byte
		for k := 0; k < n; k++ {
			_, p, err := sender.ReadMessageInto(context.Background(), buf[:0])
			if err != nil {
				b.Errorf("sender echo after %d: %v", k, err)
				return
			}
			buf = p
		}
	}()
	for k := 0; k < n; k++ {
		if k%256 == 0 {
			for {
				low := int64(n)
				for i := range recv {
					low = min(low, recv[i].Load())
				}
				minRecv.Store(low)
				if int64(k)-low < window {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		if err := sender.WriteMessage(context.Background(), ws.OpText, msg); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportCPU(b, cpu)
	b.ReportMetric(float64(m)*float64(n)/elapsed.Seconds(), "deliveries/s")
}

// BenchmarkRelay is the bus's cost per message before fan-out:
// the rules of relay (docs/protocol.md §3) and the append to the log, for a
// frame emitted in-process with nobody following, so that no read, write or
// wake is counted. The frames are the benchmark's (no context.session) and
// an OVOS message that carries a session (which the carrier rule looks at).
func BenchmarkRelay(b *testing.B) {
	for _, tc := range []struct {
		name string
		msg  string
	}{
		{"bench", `{"type":"ovbus.bench","data":{"seq":12345,"t":1700000000123,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"context":{}}`},
		{"session", `{"type":"bench.message","data":{"utterance":"what is the weather like today","n":12345,"sent":1700000000.123456},"context":{"source":"bench","destination":["skills"],"session":{"session_id":"default"}}}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, _ := testServer(b, Options{})
			msg := []byte(tc.msg)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if err := s.EmitRaw(ws.OpText, msg); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// reportCPU reports the process's CPU time per op since cpu (a
// processCPU reading at the start of the timed loop): on a loaded machine it
// varies less than the elapsed time per op.
func reportCPU(b *testing.B, cpu time.Duration) {
	if c := processCPU() - cpu; c > 0 {
		b.ReportMetric(float64(c.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
