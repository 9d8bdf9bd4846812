package bench

import (
	"bytes"
	"strconv"
)

// The benchmark's messages are OVOS-shaped JSON objects (docs/protocol.md §9) that carry
// a sequence number and the send time in their data:
//
//	{"type":"ovbus.bench","data":{"seq":17,"t":123456789,"pad":"xx…"},"context":{}}
//
// t is the send time in nanoseconds on the run's monotonic clock (since the
// run started). pad fills the message to the requested size. Warm-up
// messages have the type "ovbus.bench.warmup". Receivers do not decode JSON:
// they look the two numbers up with a byte scan (scanInt), which is what
// keeps a Go client well ahead of the bus it measures.
const (
	msgType    = "ovbus.bench"
	warmupType = "ovbus.bench.warmup"
	runPrefix  = `{"type":"` + msgType + `",`
	warmPrefix = `{"type":"` + warmupType + `",`
)

// minMessageSize is the size of a message with no padding and one-digit
// numbers: smaller sizes are rounded up to it.
var minMessageSize = len(appendMessage(nil, false, 0, 0, 0))

// appendMessage appends a benchmark message of about size bytes (exactly
// size when size ≥ the unpadded length) to dst.
func appendMessage(dst []byte, warmup bool, seq, t int64, size int) []byte {
	start := len(dst)
	if warmup {
		dst = append(dst, warmPrefix...)
	} else {
		dst = append(dst, runPrefix...)
	}
	dst = append(dst, `"data":{"seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, `,"t":`...)
	dst = strconv.AppendInt(dst, t, 10)
	const tail = `"},"context":{}}`
	dst = append(dst, `,"pad":"`...)
	pad := size - (len(dst) - start) - len(tail)
	for ; pad > 0; pad-- {
		dst = append(dst, 'x')
	}
	return append(dst, tail...)
}

// msgKind is what a receiver makes of a message.
type msgKind uint8

const (
	kindForeign msgKind = iota // not a benchmark message (greeting, other traffic)
	kindRun
	kindWarmup
)

// parseMessage classifies b and returns its sequence number and send time.
// It reads only the front of the message: the fast path checks the exact
// prefix appendMessage writes; a bus that re-encodes JSON (spaces, another
// key order within the first bytes) still parses through the slower scan.
func parseMessage(b []byte) (kind msgKind, seq, t int64) {
	switch {
	case len(b) > len(runPrefix) && string(b[:len(runPrefix)]) == runPrefix:
		if seq, t, ok := parseFixed(b[len(runPrefix):]); ok {
			return kindRun, seq, t
		}
		kind = kindRun
	case len(b) > len(warmPrefix) && string(b[:len(warmPrefix)]) == warmPrefix:
		if seq, t, ok := parseFixed(b[len(warmPrefix):]); ok {
			return kindWarmup, seq, t
		}
		kind = kindWarmup
	default:
		head := b
		if len(head) > 256 {
			head = head[:256]
		}
		switch {
		case bytes.Contains(head, []byte(`"`+warmupType+`"`)):
			kind = kindWarmup
		case bytes.Contains(head, []byte(`"`+msgType+`"`)):
			kind = kindRun
		default:
			return kindForeign, 0, 0
		}
	}
	var ok1, ok2 bool
	seq, ok1 = scanInt(b, `"seq"`)
	t, ok2 = scanInt(b, `"t"`)
	if !ok1 || !ok2 {
		return kindForeign, 0, 0
	}
	return kind, seq, t
}

// scanInt finds "key": NUMBER in the first 256 bytes of b and parses the
// (non-negative, decimal) number.
func scanInt(b []byte, key string) (int64, bool) {
	if len(b) > 256 {
		b = b[:256]
	}
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	i += len(key)
	for i < len(b) && (b[i] == ' ' || b[i] == ':' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	var n int64
	j := i
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		n = n*10 + int64(b[j]-'0')
	}
	if j == i || j-i > 18 {
		return 0, false
	}
	return n, true
}

// parseFixed parses `"data":{"seq":SEQ,"t":T,` exactly as appendMessage
// writes it: the receivers' fast path.
func parseFixed(b []byte) (seq, t int64, ok bool) {
	const seqKey, tKey = `"data":{"seq":`, `,"t":`
	if len(b) < len(seqKey) || string(b[:len(seqKey)]) != seqKey {
		return 0, 0, false
	}
	b = b[len(seqKey):]
	seq, n := leadingInt(b)
	if n == 0 {
		return 0, 0, false
	}
	b = b[n:]
	if len(b) < len(tKey) || string(b[:len(tKey)]) != tKey {
		return 0, 0, false
	}
	t, n = leadingInt(b[len(tKey):])
	return seq, t, n > 0
}

// leadingInt parses the decimal digits at the start of b (at most 18) and
// returns the value and how many bytes it used; 0 bytes means none.
func leadingInt(b []byte) (int64, int) {
	var v int64
	i := 0
	for ; i < len(b) && i < 19 && b[i] >= '0' && b[i] <= '9'; i++ {
		v = v*10 + int64(b[i]-'0')
	}
	if i == 19 {
		return 0, 0
	}
	return v, i
}
