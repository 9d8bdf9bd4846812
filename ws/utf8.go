package ws

import "encoding/binary"

// UTF8Validator validates UTF-8 text incrementally, across arbitrary splits
// of the input, and fails fast: Write returns false as soon as a byte is seen
// that cannot be part of valid UTF-8, including a prefix that can never be
// completed (for example 0xF4 0x90, above U+10FFFF, or 0xED 0xA0, a UTF-16
// surrogate). RFC 6455 §8.1 requires text messages to be valid UTF-8 and
// §5.6 lets the endpoint fail as soon as the payload is known invalid; the
// close reason (§5.5.1) is validated the same way.
//
// The zero value is ready to use.
type UTF8Validator struct {
	need   uint8 // continuation bytes still expected in the current sequence
	lo, hi uint8 // allowed range of the next continuation byte
	bad    bool
}

// Reset makes v ready for a new text.
func (v *UTF8Validator) Reset() { *v = UTF8Validator{} }

// Complete reports whether everything written so far is valid UTF-8 and does
// not end inside a multi-byte sequence.
func (v *UTF8Validator) Complete() bool { return !v.bad && v.need == 0 }

// Valid reports whether everything written so far is a valid prefix of UTF-8.
func (v *UTF8Validator) Valid() bool { return !v.bad }

// first-byte classes: the low nibble is the sequence length (0 = invalid),
// the high nibble indexes acceptRanges for the second byte. The table is the
// one of RFC 3629 §4 (and unicode/utf8).
const (
	xx = 0x00 // invalid
	as = 0x01 // ASCII
	s1 = 0x02 // C2-DF: 2 bytes, 80-BF
	s2 = 0x13 // E0: 3 bytes, A0-BF
	s3 = 0x03 // E1-EC, EE-EF: 3 bytes, 80-BF
	s4 = 0x23 // ED: 3 bytes, 80-9F (no surrogates)
	s5 = 0x34 // F0: 4 bytes, 90-BF
	s6 = 0x04 // F1-F3: 4 bytes, 80-BF
	s7 = 0x44 // F4: 4 bytes, 80-8F (<= U+10FFFF)
)

var utf8First = [256]uint8{
	//   1   2   3   4   5   6   7   8   9   A   B   C   D   E   F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x00-0x0F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x10-0x1F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x20-0x2F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x30-0x3F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x40-0x4F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x50-0x5F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x60-0x6F
	as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, as, // 0x70-0x7F
	xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, // 0x80-0x8F
	xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, // 0x90-0x9F
	xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, // 0xA0-0xAF
	xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, // 0xB0-0xBF
	xx, xx, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, // 0xC0-0xCF
	s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, s1, // 0xD0-0xDF
	s2, s3, s3, s3, s3, s3, s3, s3, s3, s3, s3, s3, s3, s4, s3, s3, // 0xE0-0xEF
	s5, s6, s6, s6, s7, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, xx, // 0xF0-0xFF
}

var acceptRanges = [5][2]uint8{
	{0x80, 0xBF},
	{0xA0, 0xBF},
	{0x80, 0x9F},
	{0x90, 0xBF},
	{0x80, 0x8F},
}

const asciiMask = 0x8080808080808080

// Write feeds p to the validator. It returns false if p (together with what
// was written before) is not a prefix of valid UTF-8; once false, it stays
// false until Reset.
func (v *UTF8Validator) Write(p []byte) bool {
	if v.bad {
		return false
	}
	i := 0
	// Finish a sequence left open by the previous Write.
	for v.need > 0 {
		if i == len(p) {
			return true
		}
		c := p[i]
		if c < v.lo || c > v.hi {
			v.bad = true
			return false
		}
		i++
		v.need--
		v.lo, v.hi = 0x80, 0xBF
	}
	n := len(p)
	for i < n {
		c := p[i]
		if c < 0x80 {
			i++
			// ASCII fast path, 16 then 8 bytes at a time.
			for i+16 <= n && (binary.LittleEndian.Uint64(p[i:])|binary.LittleEndian.Uint64(p[i+8:]))&asciiMask == 0 {
				i += 16
			}
			if i+8 <= n && binary.LittleEndian.Uint64(p[i:])&asciiMask == 0 {
				i += 8
			}
			continue
		}
		x := utf8First[c]
		size := int(x & 7)
		if size == 0 {
			v.bad = true
			return false
		}
		ar := acceptRanges[x>>4]
		if i+size <= n {
			if c1 := p[i+1]; c1 < ar[0] || c1 > ar[1] {
				v.bad = true
				return false
			}
			if size > 2 && (p[i+2] < 0x80 || p[i+2] > 0xBF) {
				v.bad = true
				return false
			}
			if size > 3 && (p[i+3] < 0x80 || p[i+3] > 0xBF) {
				v.bad = true
				return false
			}
			i += size
			continue
		}
		// The sequence continues past the end of p: check what is here and
		// remember what the next bytes must be.
		lo, hi := ar[0], ar[1]
		need := size - 1
		for j := i + 1; j < n; j++ {
			if p[j] < lo || p[j] > hi {
				v.bad = true
				return false
			}
			lo, hi = 0x80, 0xBF
			need--
		}
		v.need, v.lo, v.hi = uint8(need), lo, hi
		return true
	}
	return true
}

// validUTF8 reports whether b is valid UTF-8 (one shot).
func validUTF8(b []byte) bool {
	var v UTF8Validator
	return v.Write(b) && v.Complete()
}
