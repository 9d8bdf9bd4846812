//go:build !linux

package ws

import "net"

// rawIO is the raw-system-call path of rawio_linux.go; elsewhere a Conn
// uses net.Conn's Read and Write.
type rawIO struct{}

func (*rawIO) init(net.Conn) bool { return false }

func (*rawIO) read([]byte) (int, error)                  { panic("ws: no raw I/O on this platform") }
func (*rawIO) readIdle([]byte, bufferHooks) (int, error) { panic("ws: no raw I/O on this platform") }
func (*rawIO) tryRead([]byte, bufferHooks) (int, error)  { panic("ws: no raw I/O on this platform") }
func (*rawIO) write([]byte) error                        { panic("ws: no raw I/O on this platform") }
func (*rawIO) writeBuffers(bufs [][]byte) error          { panic("ws: no raw I/O on this platform") }
