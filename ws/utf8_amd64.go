//go:build !purego

package ws

// asciiPrefixAsm is asciiPrefix for p[:n], n > 0. In utf8_amd64.s.
//
//go:noescape
func asciiPrefixAsm(p *byte, n int) int

// asciiPrefix returns an i such that b[:i] is all ASCII and, when i <
// len(b), b[i:] holds a byte >= 0x80 near its start: a character boundary
// from which the full validator takes over.
func asciiPrefix(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return asciiPrefixAsm(&b[0], len(b))
}
