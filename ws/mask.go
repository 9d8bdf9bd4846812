package ws

import "encoding/binary"

// MaskBytes XORs b in place with the masking key (RFC 6455 §5.3), starting at
// key offset pos (0-3), and returns the key offset for the byte following b,
// so that a payload can be masked in pieces:
//
//	pos := 0
//	pos = MaskBytes(key, pos, part1)
//	pos = MaskBytes(key, pos, part2)
//
// Masking and unmasking are the same operation. The bulk of b is processed
// eight bytes at a time.
func MaskBytes(key [4]byte, pos int, b []byte) int {
	pos &= 3
	// Rotate the key so that k32's low byte applies to b[0].
	k32 := binary.LittleEndian.Uint32(key[:])
	if pos != 0 {
		s := uint(pos) * 8
		k32 = k32>>s | k32<<(32-s)
	}
	maskWords(b, k32)
	return (pos + len(b)) & 3
}
