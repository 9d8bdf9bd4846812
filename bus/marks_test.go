package bus

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestMarks64: the assembly (or portable) marks64 agrees with
// marks64Generic, on bytes with many colons and backslashes.
func TestMarks64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`:\"ab:\`)
	for n := range 20000 {
		var p [64]byte
		for i := range p {
			if n%3 == 0 {
				p[i] = byte(r.IntN(256))
			} else {
				p[i] = alphabet[r.IntN(len(alphabet))]
			}
		}
		c, s := marks64(&p)
		wc, ws := marks64Generic(&p)
		if c != wc || s != ws {
			t.Fatalf("%q: marks64 %x %x, want %x %x", p, c, s, wc, ws)
		}
	}
}

// carrierSuspectByColons is carrierSuspect as it was before marks64: a
// search from colon to colon. The two must agree on every input.
func carrierSuspectByColons(b []byte) bool {
	if hasEscapedASCII(b) {
		return sessionSuspect(b)
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(b[i:], ':')
		if j < 0 {
			return false
		}
		i += j
		if sessionColon(b, i) {
			return sessionSuspect(b)
		}
	}
}

// TestCarrierSuspectByMarks: carrierSuspect agrees with the colon-to-colon
// search on frames whose keys named session, colons and backslashes fall
// at every offset around the 64-byte blocks, and on random bytes of JSON's
// alphabet.
func TestCarrierSuspectByMarks(t *testing.T) {
	values := []string{`{}`, `null`, `"x"`, `1`, ` {"a":1}`, `nul`, `[]`, ``}
	keys := []string{`"session":`, `"session" : `, `"sess\u0069on":`, `"\u0073ession":`, `"xsession":`, `"session_id":`}
	check := func(b []byte) {
		t.Helper()
		if got, want := carrierSuspect(b), carrierSuspectByColons(b); got != want {
			t.Fatalf("carrierSuspect(%q) = %v, the colon search says %v", b, got, want)
		}
	}
	n := 0
	for pad := range 140 {
		for _, k := range keys {
			for _, v := range values {
				inner := `"pad":"` + string(bytes.Repeat([]byte{'x'}, pad)) + `",` + k + v
				b := []byte(`{"type":"t","context":{` + inner + `}}`)
				check(b)
				check(b[:len(b)-2])                                            // cut short
				check([]byte(`{"context":{` + inner + `},"x":"a\\b"}`))        // a backslash after
				check([]byte(`{"a":"\\\\` + string(b[1:])))                    // and before
				check([]byte(`{"context":{"session":` + v + `},` + inner[1:])) // two of them
				n += 5
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`"session:{}nul \u0073\`)
	for range 50000 {
		b := make([]byte, r.IntN(200))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		check(b)
		n++
	}
	t.Logf("%d frames", n)
}
