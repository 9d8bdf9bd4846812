//go:build race

package bus

// raceEnabled: the race detector allocates where the code does not, so
// allocation counts are checked only without it.
const raceEnabled = true
