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
	n := len(b)
	if n < 8 {
		for i := range b {
			b[i] ^= key[(pos+i)&3]
		}
		return (pos + n) & 3
	}
	// Rotate the key so that k32's low byte applies to b[0].
	k32 := binary.LittleEndian.Uint32(key[:])
	if pos != 0 {
		s := uint(pos) * 8
		k32 = k32>>s | k32<<(32-s)
	}
	k64 := uint64(k32) | uint64(k32)<<32
	i := 0
	for ; i+32 <= n; i += 32 {
		c := b[i : i+32 : i+32]
		binary.LittleEndian.PutUint64(c[0:], binary.LittleEndian.Uint64(c[0:])^k64)
		binary.LittleEndian.PutUint64(c[8:], binary.LittleEndian.Uint64(c[8:])^k64)
		binary.LittleEndian.PutUint64(c[16:], binary.LittleEndian.Uint64(c[16:])^k64)
		binary.LittleEndian.PutUint64(c[24:], binary.LittleEndian.Uint64(c[24:])^k64)
	}
	for ; i+8 <= n; i += 8 {
		c := b[i : i+8 : i+8]
		binary.LittleEndian.PutUint64(c, binary.LittleEndian.Uint64(c)^k64)
	}
	// i is a multiple of 8, hence of 4: the key offset at b[i] is pos again.
	for j := i; j < n; j++ {
		b[j] ^= byte(k32)
		k32 = k32>>8 | k32<<24
	}
	return (pos + n) & 3
}
