//go:build !amd64 || purego

package ws

// asciiPrefix returns an i such that b[:i] is all ASCII and, when i <
// len(b), b[i:] holds a byte >= 0x80 within its first 32 bytes: a
// character boundary from which the full validator takes over. 32 and 8
// bytes at a time without a branch per word; the last word overlaps the
// one before it. amd64 has it in assembly (utf8_amd64.s).
func asciiPrefix(b []byte) int {
	n := len(b)
	if n < 8 {
		for i := 0; i < n; i++ {
			if b[i] >= 0x80 {
				return i
			}
		}
		return n
	}
	i := 0
	for ; i+32 <= n; i += 32 {
		w := b[i : i+32 : i+32]
		if (le64(w)|le64(w[8:])|le64(w[16:])|le64(w[24:]))&asciiMask != 0 {
			return i
		}
	}
	for ; i+8 <= n; i += 8 {
		if le64(b[i:i+8])&asciiMask != 0 {
			return i
		}
	}
	if i < n && le64(b[n-8:])&asciiMask != 0 {
		return i
	}
	return n
}
