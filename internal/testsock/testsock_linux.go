package testsock

import (
	"net"
	"syscall"
	"unsafe"
)

// Unread is how many bytes sock's kernel receive queue holds (FIONREAD),
// 0 when sock is not a socket.
func Unread(sock net.Conn) int {
	sc, ok := sock.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var n int32
	rc.Control(func(fd uintptr) {
		syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	})
	return int(n)
}
