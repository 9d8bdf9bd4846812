package ws

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// refCanComplete reports whether the incomplete sequence t (a proper prefix
// of a multi-byte sequence) can be extended into a valid rune.
func refCanComplete(t []byte) bool {
	if len(t) >= utf8.UTFMax {
		return false
	}
	for c := 0x80; c <= 0xBF; c++ {
		u := append(append([]byte(nil), t...), byte(c))
		if utf8.FullRune(u) {
			if r, n := utf8.DecodeRune(u); r != utf8.RuneError || n > 1 {
				if n == len(u) {
					return true
				}
			}
			continue
		}
		if refCanComplete(u) {
			return true
		}
	}
	return false
}

// refPrefixValid reports whether b is a prefix of some valid UTF-8 text.
func refPrefixValid(b []byte) bool {
	for len(b) > 0 {
		if !utf8.FullRune(b) {
			return refCanComplete(b)
		}
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			return false
		}
		b = b[n:]
	}
	return true
}

// refFirstInvalid returns the length of the longest valid prefix of b plus
// one: the number of bytes after which a fail-fast validator must report
// an error, or -1 if b is a valid prefix.
func refFirstInvalid(b []byte) int {
	if refPrefixValid(b) {
		return -1
	}
	lo, hi := 0, len(b) // refPrefixValid(b[:lo]) is true, (b[:hi]) false
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if refPrefixValid(b[:m]) {
			lo = m
		} else {
			hi = m
		}
	}
	return hi
}

// validateSplit feeds b to a validator in random pieces and returns the
// number of bytes fed when Write first returned false (-1 if never), and
// whether the text is complete.
func validateSplit(rng *rand.Rand, b []byte, maxPiece int) (int, bool) {
	var v UTF8Validator
	fed := 0
	for fed < len(b) {
		n := min(len(b)-fed, 1+rng.IntN(maxPiece))
		// Feed the piece byte by byte if it fails, to find the exact byte.
		if !v.Write(b[fed : fed+n]) {
			var w UTF8Validator
			w.Write(b[:fed])
			for i := fed; i < fed+n; i++ {
				if !w.Write(b[i : i+1]) {
					return i + 1, false
				}
			}
			panic("piece failed but bytes pass one by one")
		}
		fed += n
	}
	return -1, v.Complete()
}

var utf8Samples = []string{
	"",
	"hello",
	"κόσμε",
	"Hello-µ@ßöäüàá-UTF-8!!",
	"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5",
	"\xf0\x90\x80\x80",     // U+10000
	"\xf4\x8f\xbf\xbf",     // U+10FFFF
	"\xf4\x90\x80\x80",     // > U+10FFFF
	"\xed\x9f\xbf",         // U+D7FF
	"\xed\xa0\x80",         // surrogate
	"\xee\x80\x80",         // U+E000
	"\xef\xbf\xbd",         // U+FFFD
	"\xef\xbf\xbf",         // U+FFFF (valid)
	"\xc0\xaf",             // overlong
	"\xe0\x80\xaf",         // overlong
	"\xf0\x80\x80\xaf",     // overlong
	"\xc2",                 // truncated
	"\xe0\xa0",             // truncated
	"\xf8\x88\x80\x80\x80", // 5 bytes
	"\x80",
	"\xbf",
	"\xfe", "\xff",
	"a\xc2\x80b\xdf\xbfc\xe0\xa0\x80d\xf0\x90\x80\x80e",
	"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xf4\x90\x80\x80\x65\x64\x69\x74\x65\x64",
}

func TestUTF8ValidatorSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range utf8Samples {
		b := []byte(s)
		want := refFirstInvalid(b)
		for rep := 0; rep < 20; rep++ {
			at, complete := validateSplit(rng, b, 1+rep)
			if at != want {
				t.Fatalf("%q: failed after %d bytes, want %d", s, at, want)
			}
			if want == -1 && complete != utf8.Valid(b) {
				t.Fatalf("%q: complete=%v, utf8.Valid=%v", s, complete, utf8.Valid(b))
			}
		}
		if validUTF8(b) != utf8.Valid(b) {
			t.Fatalf("%q: validUTF8 != utf8.Valid", s)
		}
	}
}

// Autobahn 6.4.x: the invalid byte must be reported as soon as it is seen.
func TestUTF8FailFast(t *testing.T) {
	var v UTF8Validator
	if !v.Write([]byte("\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5")) || !v.Write([]byte{0xf4}) {
		t.Fatal("valid prefix rejected")
	}
	if v.Write([]byte{0x90}) {
		t.Fatal("0xF4 0x90 accepted")
	}
	if v.Write([]byte("a")) || v.Complete() || v.Valid() {
		t.Fatal("validator recovered after error")
	}
	v.Reset()
	if !v.Write([]byte("ok")) || !v.Complete() {
		t.Fatal("Reset did not clear")
	}
}

func randomUTF8ish(rng *rand.Rand, n int) []byte {
	b := make([]byte, 0, n)
	for len(b) < n {
		switch rng.IntN(10) {
		case 0, 1, 2, 3, 4:
			b = append(b, byte('a'+rng.IntN(26)))
		case 5:
			b = utf8.AppendRune(b, rune(0x80+rng.IntN(0x780)))
		case 6:
			b = utf8.AppendRune(b, rune(0x800+rng.IntN(0xF800)))
		case 7:
			b = utf8.AppendRune(b, rune(0x10000+rng.IntN(0x100000)))
		case 8:
			b = append(b, []byte("0123456789abcdef")...)
		case 9:
			if rng.IntN(20) == 0 {
				b = append(b, byte(rng.UintN(256)))
			} else {
				b = append(b, ' ')
			}
		}
	}
	return b
}

func TestUTF8ValidatorRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := 0; iter < 3000; iter++ {
		b := randomUTF8ish(rng, rng.IntN(200))
		if rng.IntN(4) == 0 && len(b) > 0 {
			b = b[:rng.IntN(len(b))] // possibly truncated mid-rune
		}
		want := refFirstInvalid(b)
		at, complete := validateSplit(rng, b, 1+rng.IntN(40))
		if at != want {
			t.Fatalf("%x: failed after %d bytes, want %d", b, at, want)
		}
		if want == -1 && complete != utf8.Valid(b) {
			t.Fatalf("%x: complete=%v want %v", b, complete, utf8.Valid(b))
		}
		if validUTF8(b) != utf8.Valid(b) {
			t.Fatalf("%x: validUTF8 != utf8.Valid", b)
		}
	}
	// Every 1-, 2- and 3-byte sequence against the reference, byte by byte.
	var buf [3]byte
	for a := 0; a < 256; a++ {
		for c := 0; c < 256; c++ {
			buf[0], buf[1] = byte(a), byte(c)
			checkExhaustive(t, buf[:2])
			if a >= 0xE0 && a <= 0xF4 && c >= 0x80 && c <= 0xBF {
				for d := 0x70; d < 0xD0; d++ {
					buf[2] = byte(d)
					checkExhaustive(t, buf[:3])
				}
			}
		}
	}
}

func checkExhaustive(t *testing.T, b []byte) {
	want := refFirstInvalid(b)
	var v UTF8Validator
	got := -1
	for i := range b {
		if !v.Write(b[i : i+1]) {
			got = i + 1
			break
		}
	}
	if got != want {
		t.Fatalf("% x: failed after %d bytes, want %d", b, got, want)
	}
	if validUTF8(b) != utf8.Valid(b) {
		t.Fatalf("% x: validUTF8 %v", b, validUTF8(b))
	}
}
