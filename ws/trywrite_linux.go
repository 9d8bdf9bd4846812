//go:build linux

package ws

import (
	"net"
	"os"
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
	w := rawWriteStates.Get().(*rawWriteState)
	w.wbuf, w.werrno, w.vec = b, 0, false
	err := r.rc.Control(w.try)
	written, werr := len(b)-len(w.wbuf), w.werrno
	w.wbuf = nil
	rawWriteStates.Put(w)
	if err != nil {
		return written, opError(nc, "write", err)
	}
	if werr != 0 {
		return written, opError(nc, "write", os.NewSyscallError("write", werr))
	}
	return written, nil
}

// finish writes all of b, waiting in the runtime's poller while the socket
// is full (the write deadline applies), with raw calls as tryWrite whatever
// the length.
func (r *rawIO) finish(nc net.Conn, b []byte) error { return r.writeAll(nc, b) }
