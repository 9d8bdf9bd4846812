//go:build !linux

package ws

import "net"

func (*rawIO) tryWrite(net.Conn, []byte) (int, error) { panic("ws: no raw I/O on this platform") }
func (*rawIO) finish(net.Conn, []byte) error          { panic("ws: no raw I/O on this platform") }
