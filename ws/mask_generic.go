//go:build !amd64 || purego

package ws

import (
	"encoding/binary"
	"unsafe"
)

// The portable masking loops; amd64 has them in assembly (mask_amd64.s).

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

// maskCopy sets dst to src XORed with the masking key k32 (RFC 6455 §5.3;
// read little-endian from the key bytes, as maskWords takes it): a copy
// and a mask in one pass. dst must be as long as src.
func maskCopy(dst, src []byte, k32 uint32) {
	n := len(src)
	dst = dst[:n]
	k64 := uint64(k32) | uint64(k32)<<32
	i := 0
	for ; i+32 <= n; i += 32 {
		d, s := dst[i:i+32:i+32], src[i:i+32:i+32]
		binary.LittleEndian.PutUint64(d[0:], binary.LittleEndian.Uint64(s[0:])^k64)
		binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(s[8:])^k64)
		binary.LittleEndian.PutUint64(d[16:], binary.LittleEndian.Uint64(s[16:])^k64)
		binary.LittleEndian.PutUint64(d[24:], binary.LittleEndian.Uint64(s[24:])^k64)
	}
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(dst[i:i+8], binary.LittleEndian.Uint64(src[i:i+8])^k64)
	}
	if i+4 <= n {
		binary.LittleEndian.PutUint32(dst[i:i+4], binary.LittleEndian.Uint32(src[i:i+4])^k32)
		i += 4
	}
	for ; i < n; i++ {
		dst[i] = src[i] ^ byte(k32)
		k32 >>= 8
	}
}

// maskXOR is maskCopy for n >= 0 bytes at dst and src, the form of the
// amd64 assembly that AppendMessage calls.
func maskXOR(dst, src *byte, n int, key uint32) {
	if n > 0 {
		maskCopy(unsafe.Slice(dst, n), unsafe.Slice(src, n), key)
	}
}

// maskCopyHi sets dst[:n] to src[:n] XORed with the masking key (as
// maskWords takes it; the slices do not overlap, n > 0) and returns 0 if
// and only if every byte written is ASCII (amd64 does both in one pass).
func maskCopyHi(dst, src *byte, n int, key uint32) uint64 {
	d := unsafe.Slice(dst, n)
	maskCopy(d, unsafe.Slice(src, n), key)
	if asciiPrefix(d) == n {
		return 0
	}
	return 1
}

// hasAVX2 is false: no AVX2 code here (mask_amd64.go).
const hasAVX2 = false

// copySmall is copy for n bytes; amd64 has a shorter one for 1 to 256
// bytes under AVX2, which AppendMessage calls only where hasAVX2 is true.
func copySmall(dst, src *byte, n int) { copy(unsafe.Slice(dst, n), unsafe.Slice(src, n)) }
