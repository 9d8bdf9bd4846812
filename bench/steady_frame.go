package bench

import (
	"encoding/binary"
	"math"
	"strconv"
)

// The frames of a steady run. Text frames are OVOS-shaped JSON messages
// (docs/protocol.md §9), padded to their size with an utterance:
//
//	{"type":"ovbus.bench.steady","data":{"from":3,"seq":17,"t":123456789,"utterance":"turn on …"},"context":{"source":"bench","destination":["bus"]}}
//
// from is the sending client, seq its frame number (0, 1, …), t the frame's
// scheduled send time in nanoseconds on the run's clock. Warm-up frames have
// the type "ovbus.bench.steady.warmup". Binary frames (audio) start with a
// 24-byte header, the magic "\x00OVB", then from (uint32), seq (uint64) and
// t (int64), little-endian, and the rest is filler. Receivers take the three
// numbers from the front of a frame without decoding the rest.
const (
	steadyType     = "ovbus.bench.steady"
	steadyWarmType = "ovbus.bench.steady.warmup"
	steadyPrefix   = `{"type":"` + steadyType + `","data":{"from":`
	steadyWarm     = `{"type":"` + steadyWarmType + `","data":{"from":`
	steadyTail     = `"},"context":{"source":"bench","destination":["bus"]}}`
	steadyMagic    = "\x00OVB"
	// steadyBinaryHeader is the length of a binary frame's header.
	steadyBinaryHeader = 24
)

// minSteadyJSON is the smallest size a JSON frame is padded to: the longest
// unpadded frame (the largest numbers an int and an int64 hold) fits.
var minSteadyJSON = len(appendSteadyJSON(nil, false, math.MaxInt, math.MaxInt, math.MaxInt64, 0))

// utterance is the padding of the JSON frames: text, as a user says it.
const utterance = "hey mycroft, turn on the kitchen lights and tell me the weather for tomorrow morning please. "

// appendSteadyJSON appends a JSON frame of exactly size bytes (at least the
// unpadded length) to dst.
func appendSteadyJSON(dst []byte, warm bool, from, seq int, t int64, size int) []byte {
	start := len(dst)
	if warm {
		dst = append(dst, steadyWarm...)
	} else {
		dst = append(dst, steadyPrefix...)
	}
	dst = strconv.AppendInt(dst, int64(from), 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"t":`...)
	dst = strconv.AppendInt(dst, t, 10)
	dst = append(dst, `,"utterance":"`...)
	for pad := size - (len(dst) - start) - len(steadyTail); pad > 0; {
		n := min(pad, len(utterance))
		dst = append(dst, utterance[:n]...)
		pad -= n
	}
	return append(dst, steadyTail...)
}

// putSteadyBinary writes a binary frame's header into the front of b, which
// must hold at least steadyBinaryHeader bytes.
func putSteadyBinary(b []byte, from, seq int, t int64) {
	copy(b, steadyMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(from))
	binary.LittleEndian.PutUint64(b[8:], uint64(seq))
	binary.LittleEndian.PutUint64(b[16:], uint64(t))
}

// parseSteady classifies a received frame (binary tells its opcode) and
// returns its sender, number and scheduled time.
func parseSteady(binaryFrame bool, b []byte) (kind msgKind, from, seq int, t int64) {
	if binaryFrame {
		if len(b) < steadyBinaryHeader || string(b[:4]) != steadyMagic {
			return kindForeign, 0, 0, 0
		}
		return kindRun, int(binary.LittleEndian.Uint32(b[4:])), int(binary.LittleEndian.Uint64(b[8:])),
			int64(binary.LittleEndian.Uint64(b[16:]))
	}
	switch {
	case len(b) > len(steadyPrefix) && string(b[:len(steadyPrefix)]) == steadyPrefix:
		kind, b = kindRun, b[len(steadyPrefix):]
	case len(b) > len(steadyWarm) && string(b[:len(steadyWarm)]) == steadyWarm:
		kind, b = kindWarmup, b[len(steadyWarm):]
	default:
		return kindForeign, 0, 0, 0
	}
	f, b, ok1 := keyInt(b, "")
	s, b, ok2 := keyInt(b, `,"seq":`)
	t, _, ok3 := keyInt(b, `,"t":`)
	if !ok1 || !ok2 || !ok3 {
		return kindForeign, 0, 0, 0
	}
	return kind, int(f), int(s), t
}

// keyInt parses key followed by a decimal number at the front of b, and
// returns the number and what follows it.
func keyInt(b []byte, key string) (v int64, rest []byte, ok bool) {
	if len(b) < len(key) || string(b[:len(key)]) != key {
		return 0, b, false
	}
	v, n := leadingInt(b[len(key):])
	return v, b[len(key)+n:], n > 0
}
