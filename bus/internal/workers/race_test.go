//go:build race

package workers

// raceEnabled: the race detector allocates where the code does not.
const raceEnabled = true
