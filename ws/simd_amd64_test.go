//go:build !purego

package ws

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// withSIMD runs f with the AVX2 loops off and, if the CPU has AVX2, on, so
// that both the SSE2 and the AVX2 code of mask_amd64.s and utf8_amd64.s are
// checked on this machine. It switches useAVX2, which only the assembly
// reads (mask_amd64.go), so goroutines left by earlier tests do not race
// with it.
func withSIMD(t *testing.T, f func(t *testing.T)) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	useAVX2 = false
	t.Run("sse2", f)
	if hasAVX2 {
		useAVX2 = true
		t.Run("avx2", f)
	} else {
		t.Log("no AVX2 on this CPU: only the SSE2 loops checked")
	}
}

// simdLengths covers every length below 300 (all the tails and the 16-,
// 32-, 64- and 128-byte loops) and a few longer ones.
func simdLengths() []int {
	var ns []int
	for n := range 300 {
		ns = append(ns, n)
	}
	return append(ns, 383, 384, 385, 511, 512, 513, 1000, 4099)
}

func TestMaskXORPaths(t *testing.T) {
	withSIMD(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		buf := make([]byte, 4099+8)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		for _, n := range simdLengths() {
			for align := 0; align < 4; align++ {
				key := [4]byte{byte(n), byte(align), 0x21, 0x3d}
				k32 := binary.LittleEndian.Uint32(key[:])
				src := buf[align : align+n]
				want := append([]byte(nil), src...)
				maskRef(key, 0, want)
				// In place, with a guard byte after the end that must stay.
				got := append(append([]byte(nil), src...), 0xAA)
				maskWords(got[:n], k32)
				if !bytes.Equal(got[:n], want) || got[n] != 0xAA {
					t.Fatalf("maskWords n=%d align=%d differs from the reference", n, align)
				}
				// Copying, into a destination longer than src.
				dst := make([]byte, n+1)
				dst[n] = 0xAA
				maskCopy(dst, src, k32)
				if !bytes.Equal(dst[:n], want) || dst[n] != 0xAA {
					t.Fatalf("maskCopy n=%d align=%d differs from the reference", n, align)
				}
			}
		}
	})
}

func TestASCIIPrefixPaths(t *testing.T) { withSIMD(t, TestASCIIPrefix) }

func TestMaskCopyHiPaths(t *testing.T) { withSIMD(t, TestMaskCopyHi) }

// TestCopySmall: copySmall copies every length from 1 to 256 (each of its
// blocks), at every alignment, between separate buffers and overlapping
// either way, as copy does, and writes nothing outside dst[:n].
func TestCopySmall(t *testing.T) {
	if !hasAVX2 {
		t.Skip("copySmall is called under AVX2 only")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	mem := make([]byte, 1024)
	for n := 1; n <= 256; n++ {
		for _, shift := range []int{-300, -33, -1, 1, 7, 32, 300} { // dst - src; |shift| >= n: apart
			for align := 0; align < 4; align++ {
				for i := range mem {
					mem[i] = byte(rng.Uint32())
				}
				src := 350 + align
				dst := src + shift
				want := append([]byte(nil), mem...)
				copy(want[dst:dst+n], want[src:src+n])
				copySmall(&mem[dst], &mem[src], n)
				if !bytes.Equal(mem, want) {
					t.Fatalf("n=%d dst-src=%d align=%d: differs from copy", n, shift, align)
				}
			}
		}
	}
}
