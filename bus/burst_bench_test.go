package bus

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

// BenchmarkBurst: one op is a burst of messages that the sender writes at
// once (one Flush) to M subscribers that have read everything before it,
// so that every session sleeps in the log when the burst comes: the case
// where waking the followers once per frame would cost a wake and a write
// per subscriber per frame. The sender reads its echoes too. Reported:
// the bus's write batches per delivery (relay_latency_seconds observes one
// per batch; a batch is one write), and the CPU time of the process (bus
// and clients) per op.
func BenchmarkBurst(b *testing.B) {
	for _, m := range []int{10} {
		for _, burst := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("M=%d/burst=%d", m, burst), func(b *testing.B) { benchBurst(b, m, burst) })
		}
	}
}

func benchBurst(b *testing.B, m, burst int) {
	s, url := testServer(b, Options{})
	msg := []byte(`{"type":"bench.burst","data":{"utterance":"what is the weather like today"},"context":{}}`)
	subs := make([]*ws.Conn, m)
	for i := range subs {
		subs[i] = dial(b, url, nil)
	}
	sender := dial(b, url, nil)
	all := append(subs, sender)
	ctx := context.Background()
	var buf []byte
	round := func() {
		for range burst {
			if err := sender.BufferMessage(ws.OpText, msg); err != nil {
				b.Fatal(err)
			}
		}
		if err := sender.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		for _, c := range all {
			for range burst {
				_, p, err := c.ReadMessageInto(ctx, buf[:0])
				if err != nil {
					b.Fatal(err)
				}
				buf = p
			}
		}
	}
	round() // warm-up
	batches0 := batchesWritten(b, s)
	b.SetBytes(int64(len(msg) * burst))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for range b.N {
		round()
	}
	b.StopTimer()
	reportCPU(b, cpu)
	deliveries := float64(b.N) * float64(burst) * float64(len(all))
	b.ReportMetric(float64(batchesWritten(b, s)-batches0)/deliveries, "batches/delivery")
}

// batchesWritten reads the count of relay_latency_seconds: the batches
// written to clients so far (the greetings included).
func batchesWritten(b *testing.B, s *Server) int64 {
	line := grep(scrape(b, s), "ovbus_relay_latency_seconds_count")
	f := strings.Fields(line)
	if len(f) != 2 {
		b.Fatalf("no batch count in %q", line)
	}
	n, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		b.Fatal(err)
	}
	return int64(n)
}
