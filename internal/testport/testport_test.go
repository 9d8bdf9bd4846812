package testport

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeHandsOutEachPortOnce(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		for _, p := range Free(t, E2E, 3) {
			if p < E2E || p >= E2E+span {
				t.Fatalf("port %d outside %d-%d", p, E2E, E2E+span-1)
			}
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}

func TestFreeSkipsABoundPort(t *testing.T) {
	// A range of two ports, the first bound: the second is the answer.
	var l net.Listener
	for range 20 {
		c, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		next := c.Addr().(*net.TCPAddr).Port + 1
		if probe, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(next)); err == nil {
			probe.Close()
			l = c
			break
		}
		c.Close()
	}
	if l == nil {
		t.Skip("found no bound port with a free one after it")
	}
	defer l.Close()
	bound := l.Addr().(*net.TCPAddr).Port
	if got := free(t, bound, 2, 1); got[0] != bound+1 {
		t.Errorf("free = %v, want [%d] (%d is bound)", got, bound+1, bound)
	}
}
