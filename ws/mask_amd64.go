//go:build !purego

package ws

// cpuAVX2 reports whether AVX2 may be used. In cpu_amd64.s.
func cpuAVX2() bool

// hasAVX2 reports whether the CPU has AVX2; set once, for the Go code that
// chooses an AVX2-only routine (copySmall).
var hasAVX2 = cpuAVX2()

// useAVX2 turns on the 32-byte loops of maskXOR and asciiPrefixAsm. Only
// the assembly reads it: the tests switch it off and on (withSIMD) while
// goroutines of earlier tests may still be writing, and a Go read of it
// would be a data race with that switch.
var useAVX2 = hasAVX2

// maskXOR sets dst[i] = src[i] ^ byte(key>>(8*(i%4))) for i < n; dst may
// be src. In mask_amd64.s.
//
//go:noescape
func maskXOR(dst, src *byte, n int, key uint32)

// maskWords XORs b in place with the masking key k32, read little-endian
// from the 4 key bytes so that its low byte applies to b[0].
func maskWords(b []byte, k32 uint32) {
	if len(b) > 0 {
		maskXOR(&b[0], &b[0], len(b), k32)
	}
}

// maskCopy sets dst to src XORed with the masking key k32 (RFC 6455 §5.3;
// as maskWords takes it): a copy and a mask in one pass. dst must be at
// least as long as src (dst[:len(src)] must not panic).
func maskCopy(dst, src []byte, k32 uint32) {
	if len(src) > 0 {
		maskXOR(&dst[:len(src)][0], &src[0], len(src), k32)
	}
}

// maskCopyHi is maskXOR for dst != src, n > 0, that returns 0 if and only
// if every byte it wrote is ASCII (below 0x80): Receive's copy of a frame's
// payload, unmasked (a client's, key from its header) or as it is (a
// server's, key 0), with the check that lets text skip the UTF-8
// validator, in one pass. In mask_amd64.s.
//
//go:noescape
func maskCopyHi(dst, src *byte, n int, key uint32) uint64

// copySmall is copy for 1 <= n <= 256 bytes under AVX2 (hasAVX2); dst and
// src may overlap. In mask_amd64.s.
//
//go:noescape
func copySmall(dst, src *byte, n int)
