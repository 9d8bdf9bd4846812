//go:build !unix

package bus

// openFileLimit returns 0: the limit is not known here (Windows has no
// per-process file limit of this kind), and max_connections defaults to
// DefaultMaxConnections.
func openFileLimit() uint64 { return 0 }
