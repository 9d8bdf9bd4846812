//go:build !amd64 || purego

package bus

func marks64(p *[64]byte) (colons, backslashes uint64) { return marks64Generic(p) }
