package ws

import (
	"testing"
	"unsafe"
)

// TestIdleSizes: what an idle connection keeps of ws stays in the size
// classes it was brought to (on 64-bit systems): a Conn, one allocation
// with its Protocol and its rawIO (whose read and write states, like the
// Protocol's receiving state, go back to pools while idle), and a Protocol
// used on its own. A field that pushes one into the next class costs every
// idle connection the difference: make room first (rarely used state
// belongs in connExtra).
func TestIdleSizes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the classes are those of 64-bit systems")
	}
	for _, s := range []struct {
		name      string
		size, max uintptr
	}{
		{"Conn", unsafe.Sizeof(Conn{}), 288},
		{"Protocol", unsafe.Sizeof(Protocol{}), 96},
	} {
		if s.size > s.max {
			t.Errorf("%s is %d bytes, more than its size class of %d", s.name, s.size, s.max)
		}
	}
}
