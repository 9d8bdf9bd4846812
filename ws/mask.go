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

// maskWords XORs b in place with the masking key k32, read little-endian
// from the 4 key bytes so that its low byte applies to b[0]: 32, 8 and 4
// bytes at a time, then the last 0-3 bytes one by one.
func maskWords(b []byte, k32 uint32) {
	n := len(b)
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
	// i is a multiple of 8, hence of 4: the key offset at b[i] is 0 again.
	if i+4 <= n {
		c := b[i : i+4 : i+4]
		binary.LittleEndian.PutUint32(c, binary.LittleEndian.Uint32(c)^k32)
		i += 4
	}
	for ; i < n; i++ {
		b[i] ^= byte(k32)
		k32 >>= 8
	}
}
