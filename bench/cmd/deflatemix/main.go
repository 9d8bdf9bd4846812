// Command deflatemix measures what permessage-deflate's context takeover
// buys on OVOS traffic: the bytes a mix of OVOS messages takes on the wire
// when every message is compressed alone (the bus's shared, context-free
// frames) and when each is compressed against the last N bytes sent before
// it (ws.CompressionOptions.Context), against the memory a connection keeps
// for it and the CPU time per message.
//
//	go run ./bench/cmd/deflatemix [-contexts 0,1024,4096,8192,32768] [-rounds 20]
//	go run ./bench/cmd/deflatemix -mix capture.jsonl     # a mix of your own
//	go run ./bench/cmd/deflatemix -generate 2000 > mix.jsonl
//
// Without -mix it measures the built-in mix (-generate writes it): 2 000
// messages of OVOS interactions (wake word, utterance, intent, skill,
// speech, audio, the GUI), built from templates of the messages ovos-core
// and its services send, with the session object every message carries,
// in a fixed pseudo-random order: the same on every run, but not a
// capture of a device. -mix reads one message per line, in the order a bus
// relayed them, such as what `ovbus listen --json` prints.
//
// Every message is decoded again by a client Protocol, so a figure is only
// printed for bytes that decode to the mix. The CPU time is the median of
// -rounds passes over the mix, on one goroutine: a measure, not a
// guarantee, on a shared machine.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// builtinMix is how many messages the built-in mix has.
const builtinMix = 2000

func main() {
	mixFile := flag.String("mix", "", "a message mix, one message per line (default: the built-in mix)")
	contexts := flag.String("contexts", "0,1024,2048,4096,8192,16384,32768", "context sizes in bytes; 0 is no context (each message compressed alone)")
	rounds := flag.Int("rounds", 20, "passes over the mix for the CPU time (median)")
	generate := flag.Int("generate", 0, "write a mix of this many messages to stdout instead")
	flag.Parse()
	if *generate > 0 {
		w := bufio.NewWriter(os.Stdout)
		for _, m := range generateMix(*generate) {
			w.Write(m)
			w.WriteByte('\n')
		}
		if err := w.Flush(); err != nil {
			fail(err)
		}
		return
	}
	mix, name := generateMix(builtinMix), fmt.Sprintf("the built-in OVOS-like mix (-generate %d)", builtinMix)
	if *mixFile != "" {
		var err error
		if mix, err = readMix(*mixFile); err != nil {
			fail(err)
		}
		name = *mixFile
	}
	plain := 0
	for _, m := range mix {
		plain += len(m)
	}
	fmt.Printf("mix: %s, %d messages, %d bytes (%.0f per message)\n\n", name, len(mix), plain, float64(plain)/float64(len(mix)))
	fmt.Println("| context | bytes on the wire | per message | ratio | kept per connection | CPU µs per message |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|")
	for _, f := range strings.Split(*contexts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			fail(fmt.Errorf("-contexts: %q is not a size", f))
		}
		r, err := measure(mix, n, *rounds)
		if err != nil {
			fail(fmt.Errorf("context %d: %w", n, err))
		}
		name := "none"
		if n > 0 {
			name = strconv.Itoa(n)
		}
		fmt.Printf("| %s | %d | %.1f | %.2f | %d B | %.2f |\n", name, r.wire, float64(r.wire)/float64(len(mix)),
			float64(plain)/float64(r.wire), r.kept, r.cpu.Seconds()*1e6/float64(len(mix)))
	}
}

type result struct {
	wire int           // frame bytes of the mix, headers included
	kept int           // heap a connection holds between messages for compressing
	cpu  time.Duration // median time of one pass over the mix
}

// measure compresses the mix as a server with a context of n bytes (0:
// none) would, checks that a client decodes it, and times it.
func measure(mix [][]byte, n, rounds int) (result, error) {
	dp := ws.DeflateParams{ServerNoContextTakeover: n == 0} // as Accept negotiates it
	co := ws.CompressionOptions{Context: n}
	srv := ws.NewProtocol(ws.Config{Role: ws.RoleServer, Deflate: &dp, Compression: co})
	cli := ws.NewProtocol(ws.Config{Role: ws.RoleClient, Deflate: &dp, MaxMessageSize: -1})
	var r result
	var buf []byte
	var ev ws.Event
	for i, m := range mix {
		var err error
		if buf, err = srv.AppendMessage(buf[:0], ws.OpText, m); err != nil {
			return r, err
		}
		r.wire += len(buf)
		cli.Receive(buf)
		var got []byte
		for {
			if err := cli.NextInto(&ev); err != nil {
				return r, fmt.Errorf("message %d: %w", i, err)
			}
			if ev.Kind == ws.EventNone {
				break
			}
			got = append(got, ev.Payload...)
		}
		if !bytes.Equal(got, m) {
			return r, fmt.Errorf("message %d decodes to %d bytes, not the %d sent", i, len(got), len(m))
		}
	}
	r.kept = kept(mix, co, dp)
	times := make([]time.Duration, rounds)
	for k := range times {
		p := ws.NewProtocol(ws.Config{Role: ws.RoleServer, Deflate: &dp, Compression: co})
		start := time.Now()
		for _, m := range mix {
			buf, _ = p.AppendMessage(buf[:0], ws.OpText, m)
		}
		times[k] = time.Since(start)
	}
	slices.Sort(times)
	r.cpu = times[len(times)/2]
	return r, nil
}

// kept is what one connection's Protocol holds on the heap, beyond a fresh
// one, once it has sent the mix: measured over many connections, after a
// collection that empties the pools.
func kept(mix [][]byte, co ws.CompressionOptions, dp ws.DeflateParams) int {
	const conns = 200
	ps := make([]*ws.Protocol, conns)
	for i := range ps {
		ps[i] = ws.NewProtocol(ws.Config{Role: ws.RoleServer, Deflate: &dp, Compression: co})
	}
	before := liveHeap()
	var buf []byte
	for _, p := range ps {
		for _, m := range mix[:min(len(mix), 64)] {
			buf, _ = p.AppendMessage(buf[:0], ws.OpText, m)
		}
	}
	buf = nil
	after := liveHeap()
	runtime.KeepAlive(ps)
	return max(int(after-before)/conns, 0)
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func readMix(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mix [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			mix = append(mix, bytes.Clone(sc.Bytes()))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(mix) == 0 {
		return nil, fmt.Errorf("%s: no messages", path)
	}
	return mix, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "deflatemix:", err)
	os.Exit(1)
}
