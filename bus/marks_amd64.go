//go:build !purego

package bus

// marks64 is in marks_amd64.s; marks64Generic is its portable form.
//
//go:noescape
func marks64(p *[64]byte) (colons, backslashes uint64)
