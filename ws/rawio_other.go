//go:build !linux

package ws

import "net"

// rawIO is the raw-system-call path of rawio_linux.go; elsewhere a Conn
// uses net.Conn's Read and Write.
type rawIO struct{}

func (*rawIO) init(net.Conn) bool { return false }

func (*rawIO) read(net.Conn, []byte) (int, error) { panic("ws: no raw I/O on this platform") }
func (*rawIO) readIdle(net.Conn, []byte, bufferHooks) (int, error) {
	panic("ws: no raw I/O on this platform")
}
func (*rawIO) tryRead(net.Conn, []byte, bufferHooks, bool) (int, error) {
	panic("ws: no raw I/O on this platform")
}
func (*rawIO) write(net.Conn, []byte) error          { panic("ws: no raw I/O on this platform") }
func (*rawIO) writeBuffers(net.Conn, [][]byte) error { panic("ws: no raw I/O on this platform") }
