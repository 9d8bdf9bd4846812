package bus

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// BenchmarkRoundTripUnderFlood: a healthy client on loopback sends a
// message and waits for it to come back (every client receives every
// frame), while another client floods the bus as fast as it can write:
//
//   - quiet: no flood;
//   - flood-unlimited: on loopback, which may do everything;
//   - flood-rate-100: with a token whose rate is 100 messages a second:
//     closed at its limit, it connects again a second later (a retrying
//     client: the stock OVOS client waits 5 s, and only after an error),
//     refused with 429 until its bucket holds a token, and floods on;
//   - flood-rate-100-at-once: the same, connecting again at once: a
//     connection flood, which no message rate stops;
//   - connect-401: a connection flood alone, each with a wrong token.
//
// The flooder runs in this process: its own CPU is part of what the
// healthy client competes with. Each op is one round trip; p50-ns and
// p99-ns are the round trips' percentiles, floods/op the flood's frames the
// healthy client received per round trip (all of which it read first).
func BenchmarkRoundTripUnderFlood(b *testing.B) {
	for _, mode := range []string{"quiet", "flood-unlimited", "flood-rate-100", "flood-rate-100-at-once", "connect-401"} {
		b.Run(mode, func(b *testing.B) { benchRoundTripUnderFlood(b, mode) })
	}
}

func benchRoundTripUnderFlood(b *testing.B, mode string) {
	const token = "flooder-token-0123456789"
	_, url := testServer(b, Options{Auth: Auth{Tokens: map[string]Permissions{
		token: {Name: "flooder", Rate: 100, Burst: 100},
	}}})
	healthy := dial(b, url, nil)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	again := func(url string, pause time.Duration) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				flood(ctx, url)
				select {
				case <-time.After(pause):
				case <-ctx.Done():
				}
			}
		}()
	}
	switch mode {
	case "flood-unlimited":
		again(url, 0)
	case "flood-rate-100":
		again(url+"/"+token, time.Second)
	case "flood-rate-100-at-once":
		again(url+"/"+token, 0)
	case "connect-401":
		again(url+"/wrong-"+token, 0)
	}
	time.Sleep(100 * time.Millisecond) // the flood under way

	lat := make([]time.Duration, 0, b.N)
	floods := 0
	b.ResetTimer()
	for i := range b.N {
		m := fmt.Appendf(nil, `{"type":"bench.ping","data":{"i":%d}}`, i)
		start := time.Now()
		if err := healthy.WriteMessage(context.Background(), ws.OpText, m); err != nil {
			b.Fatal(err)
		}
		for {
			_, p, err := healthy.ReadMessage(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if bytes.Equal(p, m) {
				break
			}
			floods++
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
	b.ReportMetric(float64(floods)/float64(b.N), "floods/op")
}

// flood connects to url and writes small messages as fast as it can,
// reading and dropping what it gets, until the connection ends or ctx does.
func flood(ctx context.Context, url string) {
	c, _, err := ws.Dial(ctx, url, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	go func() {
		for {
			if _, _, err := c.ReadMessage(ctx); err != nil {
				return
			}
		}
	}()
	m := []byte(`{"type":"flood","data":{"utterance":"flood flood flood"}}`)
	for ctx.Err() == nil {
		if c.WriteMessage(ctx, ws.OpText, m) != nil {
			return
		}
	}
}

// BenchmarkTokenMatch: the time to check a token shown against 16
// configured ones (each 48 characters): the right one (first and last of
// them in the order they are checked), wrong ones differing in the first
// or the last character, a prefix of a configured one, and wrong ones of
// other lengths. The time depends on the length of the token shown (it is
// hashed once), not on which configured token it is close to or equals.
func BenchmarkTokenMatch(b *testing.B) {
	a := Auth{Tokens: map[string]Permissions{}}
	for i := range 16 {
		a.Tokens[fmt.Sprintf("%048x", i+1)] = Permissions{Name: fmt.Sprint(i)}
	}
	ac := compileAccess(&a)
	first := fmt.Sprintf("%048x", 1)
	last := fmt.Sprintf("%048x", 16)
	for _, c := range []struct{ name, tok string }{
		{"right-first", first},
		{"right-last", last},
		{"wrong-first-char", "f" + first[1:]},
		{"wrong-last-char", first[:47] + "f"},
		{"prefix", first[:24]},
		{"short", "x"},
		{"long-512", strings.Repeat("x", MaxTokenBytes)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				ac.match(c.tok)
			}
		})
	}
}
