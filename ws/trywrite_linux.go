//go:build linux

package ws

import (
	"net"
	"os"
	"syscall"
	"unsafe"
)

// tryWrite writes b to the socket without waiting (tryWritePreparedFrames):
// it returns the bytes the socket took, 0 when it was full. It runs inside
// syscall.RawConn.Control, which keeps the descriptor open but never waits
// for the poller and does not look at deadlines.
//
// Unlike write, it uses raw calls whatever the length: a non-blocking
// write copies at most what the send buffer has room for, so a call is as
// short as a raw read of a full buffer, and an ordinary system call around
// it would let the runtime hand the goroutine's P to another thread
// whenever other goroutines wait (a thread switch each way, the bulk of a
// fan-out writer's overhead).
func (r *rawIO) tryWrite(nc net.Conn, b []byte) (int, error) {
	written := 0
	var werr syscall.Errno
	err := r.rc.Control(func(fd uintptr) {
		written, werr = rawWrite(fd, b)
	})
	if err != nil {
		return written, opError(nc, "write", err)
	}
	if werr != 0 && werr != syscall.EAGAIN {
		return written, opError(nc, "write", os.NewSyscallError("write", werr))
	}
	return written, nil
}

// finish writes all of b, waiting in the runtime's poller while the socket
// is full (the write deadline applies), with raw calls as tryWrite.
func (r *rawIO) finish(nc net.Conn, b []byte) error {
	var werr syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		n, e := rawWrite(fd, b)
		b = b[n:]
		if e == syscall.EAGAIN {
			return false // wait until writable
		}
		werr = e
		return true
	})
	if err != nil {
		return opError(nc, "write", err)
	}
	if werr != 0 {
		return opError(nc, "write", os.NewSyscallError("write", werr))
	}
	return nil
}

// rawWrite writes b with non-blocking raw calls until it is all out, the
// socket is full (EAGAIN) or a call fails, and returns the bytes written.
func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	written := 0
	for written < len(b) {
		p := b[written:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		switch e {
		case 0:
			written += int(n)
		case syscall.EINTR:
		default:
			return written, e
		}
	}
	return written, 0
}
