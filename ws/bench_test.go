package ws

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// gaussianSizes returns n message sizes drawn from a Gaussian with the
// given mean and standard deviation, clamped to >= 1, from a fixed seed.
func gaussianSizes(n int, mean, sigma float64) ([]int, int) {
	rng := rand.New(rand.NewPCG(42, 1337))
	sizes := make([]int, n)
	total := 0
	for i := range sizes {
		s := int(math.Round(rng.NormFloat64()*sigma + mean))
		sizes[i] = max(1, s)
		total += sizes[i]
	}
	return sizes, total / n
}

// benchPayload is OVOS-bus-like JSON text (valid UTF-8, compressible).
func benchPayload(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"type":"recognizer_loop:utterance","data":{"utterances":["what time is it %d"],"lang":"en-us"},"context":{"source":"audio","destination":["skills"]}}`, i)
	}
	return b.Bytes()[:n]
}

// drain takes events from p until it needs more input, as a receive loop
// does (and wsproto's events(), bench/wsproto/roundtrip.py): it does not
// stop at the end of a message, since more could follow in the same bytes.
func drain(b *testing.B, p *Protocol) {
	var ev Event
	for {
		if err := p.NextInto(&ev); err != nil {
			b.Fatal(err)
		}
		if ev.Kind == EventNone {
			return
		}
	}
}

// BenchmarkRoundTrip: per iteration a client Protocol encodes a binary
// message, the server decodes it, the server encodes a text message of the
// same size and the client decodes it. Bytes per op are twice the mean
// message size.
func BenchmarkRoundTrip(b *testing.B) {
	type bc struct {
		name        string
		mean, sigma float64
		deflate     *DeflateParams
		co          CompressionOptions
	}
	for _, c := range []bc{
		{name: "small", mean: 125, sigma: 75},
		{name: "large", mean: 125 << 10, sigma: 75 << 10},
		// server_no_context_takeover (a bus with compression_context
		// 0), the client keeps its context; default level and
		// threshold (128 bytes).
		{name: "small_deflate", mean: 125, sigma: 75, deflate: &DeflateParams{ServerNoContextTakeover: true}},
		// Neither side keeps its context: no 32 KiB dictionary to
		// restore per message.
		{name: "small_deflate_nctx", mean: 125, sigma: 75, deflate: &DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
		// Every message compressed.
		{name: "small_deflate_all", mean: 125, sigma: 75, deflate: &DeflateParams{ServerNoContextTakeover: true}, co: CompressionOptions{Threshold: -1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			sizes, mean := gaussianSizes(1024, c.mean, c.sigma)
			maxSize := 0
			for _, s := range sizes {
				maxSize = max(maxSize, s)
			}
			payload := benchPayload(maxSize)
			cl := NewProtocol(Config{Role: RoleClient, Deflate: c.deflate, Compression: c.co})
			sv := NewProtocol(Config{Role: RoleServer, Deflate: c.deflate, Compression: c.co})
			// rounds runs iters round trips with the wire buffers given,
			// held in locals (a closure's variables that it changes would
			// be reached through pointers), and returns the buffers.
			rounds := func(wire, back []byte, iters int) ([]byte, []byte) {
				var err error
				for i := range iters {
					n := sizes[i&1023]
					wire, err = cl.AppendMessage(wire[:0], OpBinary, payload[:n])
					if err != nil {
						b.Fatal(err)
					}
					sv.Receive(wire)
					drain(b, sv)
					back, err = sv.AppendMessage(back[:0], OpText, payload[:n])
					if err != nil {
						b.Fatal(err)
					}
					cl.Receive(back)
					drain(b, cl)
				}
				return wire, back
			}
			wire, back := rounds(nil, nil, len(sizes)) // warm up buffers and pools
			b.SetBytes(int64(2 * mean))
			b.ReportAllocs()
			b.ResetTimer()
			rounds(wire, back, b.N)
		})
	}
}

var maskSizes = []int{16, 125, 4096, 65536}

func benchMask(b *testing.B, f func([4]byte, int, []byte) int) {
	for _, n := range maskSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			buf := make([]byte, n)
			key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				f(key, i, buf)
			}
		})
	}
}

// BenchmarkForwarding: a sender's masked copy (maskXOR, as AppendMessage
// writes a client's payload) read back at once by the receiver's copy
// (maskCopyHi, as Receive takes it), the way BenchmarkRoundTrip's loop hands
// each frame over. When n is not a multiple of the 32-byte blocks, the
// sender's last block overlaps the one before it, and a load of the receiver
// that spans two stores still on their way to the cache cannot be served
// from them: it waits until both are written. A frame read from a socket was
// written by the kernel long before and does not wait.
func BenchmarkForwarding(b *testing.B) {
	for _, n := range []int{96, 100, 125, 128} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			src, mid, dst := benchPayload(n), make([]byte, n), make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				maskXOR(&mid[0], &src[0], n, 0x37fa213d)
				maskCopyHi(&dst[0], &mid[0], n, 0x37fa213d)
			}
		})
	}
}

func BenchmarkMask(b *testing.B)          { benchMask(b, MaskBytes) }
func BenchmarkMaskReference(b *testing.B) { benchMask(b, maskRef) }

func utf8BenchInputs() map[string][]byte {
	return map[string][]byte{
		"ascii":    benchPayload(64 << 10),
		"mixed":    bytes.Repeat([]byte("Hello κόσμε, héllo wörld! 你好世界 🙂 "), 64<<10/48),
		"nonascii": bytes.Repeat([]byte("κόσμεκόσμε你好世界你好世界"), 64<<10/50),
	}
}

func BenchmarkUTF8(b *testing.B) {
	for name, in := range utf8BenchInputs() {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			var v UTF8Validator
			for i := 0; i < b.N; i++ {
				v.Reset()
				if !v.Write(in) || !v.Complete() {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// BenchmarkUTF8Reference is the standard library's one-shot utf8.Valid.
func BenchmarkUTF8Reference(b *testing.B) {
	for name, in := range utf8BenchInputs() {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if !utf8.Valid(in) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// variedPayload is bus-like JSON text whose words and numbers are drawn at
// random: about 1:3 compressed, where benchPayload's repeated message is
// about 1:47.
func variedPayload(n int) []byte {
	words := strings.Fields("what time is it play the news turn on kitchen lights set a timer for minutes weather tomorrow in lisbon skills audio gui speak utterance recognizer loop intent mycroft volume")
	rng := rand.New(rand.NewPCG(3, 4))
	var b bytes.Buffer
	for b.Len() < n {
		fmt.Fprintf(&b, `{"type":"%s.%s","data":{"utterance":"`, words[rng.IntN(len(words))], words[rng.IntN(len(words))])
		for range 3 + rng.IntN(8) {
			fmt.Fprintf(&b, "%s ", words[rng.IntN(len(words))])
		}
		fmt.Fprintf(&b, `","confidence":%.4f,"session":"%08x"},"context":{"source":"audio","t":%d}}`+"\n", rng.Float64(), rng.Uint32(), rng.Int64N(1e12))
	}
	return b.Bytes()[:n]
}

// BenchmarkInflateLarge: a server Protocol decodes one compressed message of
// 1 MiB of bus-like JSON text, as a client compresses it by default, under
// the default limit (32 MiB) and without a limit. Compressed to more than
// limit/1032 bytes (varied), a message could inflate past the limit, so
// under a limit it is measured before it is inflated (startInflate:
// inflated twice); the repeated message (repetitive) is compressed below
// that and inflated once.
func BenchmarkInflateLarge(b *testing.B) {
	dp := &DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}
	for _, text := range []struct {
		name string
		msg  []byte
	}{{"varied", variedPayload(1 << 20)}, {"repetitive", benchPayload(1 << 20)}} {
		msg := text.msg
		wire, err := NewProtocol(Config{Role: RoleClient, Deflate: dp}).AppendMessage(nil, OpText, msg)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name  string
			limit int64
		}{{"limit", 0}, {"unlimited", -1}} {
			b.Run(text.name+"/"+c.name, func(b *testing.B) {
				p := NewProtocol(Config{Role: RoleServer, Deflate: dp, MaxMessageSize: c.limit, MaxFrameSize: -1})
				b.SetBytes(int64(len(msg)))
				b.ReportAllocs()
				for b.Loop() {
					p.Receive(wire)
					n := 0
					for {
						ev, err := p.Next()
						if err != nil || ev.Kind == EventNone {
							b.Fatalf("after %d bytes: %v", n, err)
						}
						n += len(ev.Payload)
						if ev.Fin {
							break
						}
					}
					if n != len(msg) {
						b.Fatalf("%d bytes, want %d", n, len(msg))
					}
				}
				b.ReportMetric(float64(len(wire)), "wire-B")
			})
		}
	}
}
