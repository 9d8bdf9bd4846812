//go:build !linux

package ws

func (*rawIO) tryWrite([]byte) (int, error) { panic("ws: no raw I/O on this platform") }
func (*rawIO) finish([]byte) error          { panic("ws: no raw I/O on this platform") }
