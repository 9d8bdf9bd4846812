package ws

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// maskRef is the one-line reference of RFC 6455 §5.3:
// transformed-octet-i = original-octet-i XOR masking-key-octet-(i MOD 4).
func maskRef(key [4]byte, pos int, b []byte) int {
	for i := range b {
		b[i] ^= key[(pos+i)&3]
	}
	return (pos + len(b)) & 3
}

func TestMaskBytesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(rng.UintN(256))
	}
	for align := 0; align < 8; align++ {
		for n := 0; n <= 150; n++ {
			for pos := 0; pos < 4; pos++ {
				got := append([]byte(nil), buf[:align+n]...)
				want := append([]byte(nil), buf[:align+n]...)
				gp := MaskBytes(key, pos, got[align:])
				wp := maskRef(key, pos, want[align:])
				if gp != wp || !bytes.Equal(got, want) {
					t.Fatalf("align %d len %d pos %d: pos %d/%d, bytes differ", align, n, pos, gp, wp)
				}
			}
		}
	}
}

func TestMaskBytesPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 200; iter++ {
		var key [4]byte
		for i := range key {
			key[i] = byte(rng.UintN(256))
		}
		data := make([]byte, rng.IntN(2000))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		want := append([]byte(nil), data...)
		maskRef(key, 0, want)
		pos := 0
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(40))
			pos = MaskBytes(key, pos, rest[:n])
			rest = rest[n:]
		}
		if !bytes.Equal(data, want) {
			t.Fatal("piecewise masking differs from reference")
		}
		// Masking twice is the identity.
		MaskBytes(key, 0, data)
		maskRef(key, 0, want)
		if !bytes.Equal(data, want) {
			t.Fatal("unmasking differs")
		}
	}
	// pos is taken modulo 4.
	a, b := []byte("abcdefghijk"), []byte("abcdefghijk")
	if MaskBytes([4]byte{1, 2, 3, 4}, 6, a) != maskRef([4]byte{1, 2, 3, 4}, 2, b) || !bytes.Equal(a, b) {
		t.Fatal("pos not reduced modulo 4")
	}
}
