//go:build race

package ws

// raceEnabled: the race detector makes sync.Pool drop items on purpose, so
// allocation counts that rely on pooling are checked only without it (the
// Makefile runs the allocation tests once without -race).
const raceEnabled = true
