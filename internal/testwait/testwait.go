// Package testwait waits, in tests, for a condition that another goroutine
// or the kernel makes true in its own time: a worker parking, a socket
// filling, a session ending.
package testwait

import (
	"testing"
	"time"
)

// Until polls cond every millisecond until it holds, and fails the test
// with what it waited for once d has passed. A condition that never holds
// is the failure; d bounds how long a loaded machine may take, not how
// long the code under test should.
func Until(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}
