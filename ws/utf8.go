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

// acceptRanges[x>>4] is the range of the second byte; 16 entries so that
// indexing needs no bounds check.
var acceptRanges = [16]struct{ lo, hi uint8 }{
	0: {0x80, 0xBF},
	1: {0xA0, 0xBF},
	2: {0x80, 0x9F},
	3: {0x90, 0xBF},
	4: {0x80, 0x8F},
}

const asciiMask = 0x8080808080808080

// Write feeds p to the validator. It returns false if p (together with what
// was written before) is not a prefix of valid UTF-8; once false, it stays
// false until Reset.
func (v *UTF8Validator) Write(p []byte) bool {
	if v.bad {
		return false
	}
	// Finish a sequence left open by the previous Write.
	for v.need > 0 {
		if len(p) == 0 {
			return true
		}
		if c := p[0]; c < v.lo || c > v.hi {
			v.bad = true
			return false
		}
		p = p[1:]
		v.need--
		v.lo, v.hi = 0x80, 0xBF
	}
	i, ok := validPrefix(p)
	if !ok {
		v.bad = true
		return false
	}
	if i == len(p) {
		return true
	}
	// p[i:] is the start of a sequence that continues in the next Write:
	// check what is here and remember what the next bytes must be.
	x := utf8First[p[i]]
	ar := acceptRanges[x>>4]
	lo, hi := ar.lo, ar.hi
	need := int(x&7) - 1
	for _, c := range p[i+1:] {
		if c < lo || c > hi {
			v.bad = true
			return false
		}
		lo, hi = 0x80, 0xBF
		need--
	}
	v.need, v.lo, v.hi = uint8(need), lo, hi
	return true
}

// validPrefix checks b from its start. It returns ok == false if b holds
// an invalid sequence; otherwise i is the offset of an incomplete but so
// far valid multi-byte sequence at the end of b, or len(b).
func validPrefix(b []byte) (i int, ok bool) {
	p := b[:len(b):len(b)]
	for len(p) > 0 {
		c := p[0]
		if c < 0x80 {
			p = p[1:]
			// ASCII fast path: after one ASCII byte, try 8, then 16,
			// then 32 bytes at a time, so that runs of ASCII are cheap
			// and isolated ASCII bytes in other text cost one check.
			if len(p) > 8 && le64(p)&asciiMask == 0 {
				p = p[8:]
				if len(p) > 16 && (le64(p)|le64(p[8:]))&asciiMask == 0 {
					p = p[16:]
					for len(p) > 32 && (le64(p)|le64(p[8:])|le64(p[16:])|le64(p[24:]))&asciiMask == 0 {
						p = p[32:]
					}
				}
			}
			continue
		}
		x := utf8First[c]
		size := int(x & 7)
		ar := acceptRanges[x>>4]
		if size > len(p) {
			// A sequence that continues past the end (size >= 2 here,
			// or invalid): the caller keeps the state.
			return len(b) - len(p), size != 0 && validTail(p)
		}
		switch size {
		case 2:
			if p[1] < ar.lo || ar.hi < p[1] {
				return len(b) - len(p), false
			}
			p = p[2:]
		case 3:
			if p[1] < ar.lo || ar.hi < p[1] || p[2] < 0x80 || 0xBF < p[2] {
				return len(b) - len(p), false
			}
			p = p[3:]
		case 4:
			if p[1] < ar.lo || ar.hi < p[1] || p[2] < 0x80 || 0xBF < p[2] || p[3] < 0x80 || 0xBF < p[3] {
				return len(b) - len(p), false
			}
			p = p[4:]
		default:
			return len(b) - len(p), false
		}
	}
	return len(b), true
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// validTail reports whether t, shorter than the sequence its first byte
// starts, is a valid beginning of that sequence.
func validTail(t []byte) bool {
	x := utf8First[t[0]]
	ar := acceptRanges[x>>4]
	lo, hi := ar.lo, ar.hi
	for _, c := range t[1:] {
		if c < lo || c > hi {
			return false
		}
		lo, hi = 0x80, 0xBF
	}
	return true
}

// validUTF8 reports whether b is valid UTF-8 (one shot). All-ASCII text,
// the usual case, is checked a block at a time (asciiPrefix); the full
// validator takes over at the first block with a byte >= 0x80 (all bytes
// before it are ASCII, so it starts on a character).
func validUTF8(b []byte) bool {
	i := asciiPrefix(b)
	return i == len(b) || validRest(b[i:])
}

// validRest reports whether b, which starts on a character boundary, is
// valid UTF-8 that does not end inside a sequence.
func validRest(b []byte) bool {
	i, ok := validPrefix(b)
	return ok && i == len(b)
}
