// Package testport hands tests TCP ports on 127.0.0.1 that must be known
// before anything binds them: the route port of an embedded NATS node, say,
// which the other nodes dial and which a restarted node binds again.
//
// Such a port is chosen free and bound later, so anything that binds it in
// between takes it from the test. Two things could: the embedded servers'
// own random ports, which the kernel takes from its ephemeral range
// (32768–60999 by default), and the tests of another package, which go test
// runs side by side with these in another process. So the ports come from
// below the ephemeral range, each package's tests from a range of their own
// (the constants below: a package that needs such ports gets one), and no
// port is handed out twice in one process.
package testport

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// The first port of each package's range; a range has span ports.
const (
	Cluster = 20000 // cluster's tests
	E2E     = 25000 // e2e's tests
	span    = 5000
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Free returns n distinct ports of the range that starts at base, each free
// on 127.0.0.1 just now and none handed out before by this process.
func Free(t testing.TB, base, n int) []int {
	t.Helper()
	return free(t, base, span, n)
}

func free(t testing.TB, base, span, n int) []int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 4*span+64 {
			t.Fatalf("testport: no %d free ports in %d-%d", n, base, base+span-1)
		}
		p := base + rand.IntN(span)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		given[p] = true
		ports = append(ports, p)
	}
	return ports
}
