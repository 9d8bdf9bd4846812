//go:build linux

package ws

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a TCP or Unix socket with raw system calls: the
// socket is non-blocking (the runtime's poller owns it), so read, write and
// writev return at once, and syscall.RawConn's Read and Write wait for the
// poller when they would block, and honour the deadlines. That saves the
// runtime's entersyscall/exitsyscall pair around each call, which also
// wakes the runtime's monitor thread whenever the process was idle. Large
// writes still go through net.Conn (maxRawWrite).
//
// The read side is used by the reading goroutine only, the write side under
// Conn.wmu only; the two may run at the same time. A rawIO is a field of its
// Conn (no allocation of its own) and keeps only the socket: the read state
// (rawRead) comes from a pool per read and goes back when a try finds the
// socket empty (tryRead with hooks), and the write state (rawWriteState) is
// taken for each write that may wait, so a connection idle on the poll path
// keeps neither.
//
// Its methods take the net.Conn it serves (for large writes and the
// addresses in errors), which its Conn holds already.
type rawIO struct {
	rc syscall.RawConn // nil: not a raw socket
	rd *rawRead        // the read state, or nil while idle
}

// rawRead is the read state of a rawIO while it reads (rawIO.rd).
type rawRead struct {
	// hooks, for readIdle and tryRead while the buffer may be given back:
	// hooks.idleBuffer gives the read buffer back while the socket has
	// nothing to read, hooks.refillBuffer takes one again once it has. nil:
	// the buffer is the caller's and stays.
	hooks  bufferHooks
	rbuf   []byte
	rn     int
	rerrno syscall.Errno
	// fn is rd.readAny, made once with the rawRead (pooled with it):
	// tryOnce when trying, else readOnce.
	fn     func(fd uintptr) bool
	trying bool
	again  bool // tryOnce found nothing to read
	idling bool // hooks may still take the buffer back
	// drained: the last read took less than it asked for, so the socket
	// had nothing more to read then (a stream socket hands over all it
	// holds, up to the length asked). See tryRead.
	drained bool
}

var rawReads = sync.Pool{New: func() any {
	rd := new(rawRead)
	rd.fn = rd.readAny
	return rd
}}

// reader returns r's read state, taking one from the pool if need be.
func (r *rawIO) reader() *rawRead {
	if r.rd == nil {
		r.rd = rawReads.Get().(*rawRead)
	}
	return r.rd
}

// idleReader gives r's read state back to the pool.
func (r *rawIO) idleReader() {
	if rd := r.rd; rd != nil {
		r.rd = nil
		*rd = rawRead{fn: rd.fn}
		rawReads.Put(rd)
	}
}

func (rd *rawRead) readAny(fd uintptr) bool {
	if rd.trying {
		return rd.tryOnce(fd)
	}
	return rd.readOnce(fd)
}

// rawWriteState is the state of one write that may wait (rawIO.write and
// writeBuffers), from a pool for the length of the call.
type rawWriteState struct {
	wbuf []byte
	iov  []syscall.Iovec // writev's vector; iov[done:] is what is still to go
	done int
	// fn is w.writeAny, made once with the rawWriteState (pooled with it):
	// writevOnce when vec, else writeOnce; try is w.tryOnce, for
	// syscall.RawConn.Control (tryWrite). A closure made per call would
	// take its results with it to the heap: allocations on every write.
	fn     func(fd uintptr) bool
	try    func(fd uintptr)
	werrno syscall.Errno
	vec    bool
}

var rawWriteStates = sync.Pool{New: func() any {
	w := new(rawWriteState)
	w.fn, w.try = w.writeAny, w.tryOnce
	return w
}}

// tryOnce writes wbuf without waiting: what the socket did not take stays
// in wbuf.
func (w *rawWriteState) tryOnce(fd uintptr) { w.writeOnce(fd) }

func (w *rawWriteState) writeAny(fd uintptr) bool {
	if w.vec {
		return w.writevOnce(fd)
	}
	return w.writeOnce(fd)
}

// init makes r the raw I/O of nc and reports whether nc is a plain socket
// it can serve; otherwise r stays unused (rc nil).
func (r *rawIO) init(nc net.Conn) bool {
	if !rawSocket(nc) {
		return false
	}
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	*r = rawIO{rc: rc}
	return true
}

// maxIovecs is Linux's IOV_MAX: the most buffers one writev takes.
const maxIovecs = 1024

// A raw system call keeps the goroutine's P: if the thread loses its CPU
// inside the kernel, the goroutines queued on that P wait until it is back,
// while around an ordinary system call the runtime hands them to another
// thread. So only short calls are raw: maxRawWrite is the most bytes
// written with a raw call, and a larger write goes through net.Conn. It
// covers a flush of the default write buffer (the answers to a pipelined
// burst): through net.Conn the hand-off around each call lets the other
// connections' goroutines run in between, each then reading and writing
// smaller batches, which costs a server far more CPU per message.
// maxRawRead is the most bytes one raw read takes.
const (
	maxRawWrite = 64 << 10
	maxRawRead  = 64 << 10
)

func (rd *rawRead) readOnce(fd uintptr) bool {
	if rd.rbuf == nil {
		b := rd.hooks.refillBuffer() // readable again after idle
		rd.rbuf = b[:min(len(b), maxRawRead)]
	}
	n, e := rd.rawRead(fd)
	if e == syscall.EAGAIN {
		if rd.idling && rd.hooks.idleBuffer() {
			rd.rbuf, rd.idling = nil, false
		}
		return false // wait until readable
	}
	rd.rn, rd.rerrno = n, e
	return true
}

// rawRead reads into rbuf with a raw system call, again when interrupted,
// and notes whether the read drained the socket.
func (rd *rawRead) rawRead(fd uintptr) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rd.rbuf))), uintptr(len(rd.rbuf)))
		if e != syscall.EINTR {
			rd.drained = e == 0 && n > 0 && int(n) < len(rd.rbuf)
			return int(n), e
		}
	}
}

// tryOnce is readOnce for tryRead: it never asks the poller to wait.
func (rd *rawRead) tryOnce(fd uintptr) bool {
	n, e := rd.rawRead(fd)
	if e == syscall.EAGAIN {
		if rd.idling && rd.hooks.idleBuffer() {
			rd.rbuf = nil
		}
		rd.again = true
		return true
	}
	rd.rn, rd.rerrno = n, e
	return true
}

// tryRead is readIdle without waiting: when the socket has nothing to read
// it returns errWouldBlock at once (having given the buffer back through
// hooks when they are not nil, and then the read state too). Readiness is
// then the caller's business (Conn.tryNextMessage).
//
// When the caller holds no part of a message (whole) and the last read
// drained the socket, tryRead returns errWouldBlock without reading: a
// peer that sent whole messages has most likely sent nothing since (a
// request, a frame now and then), and the read would find the socket
// empty. What did come since, the socket's readiness reports as after
// EAGAIN (a one-shot socket armed again reports what it holds; the
// runtime's poller's edge came after the read). A peer in the middle of a
// message is most likely still sending it: that read is made.
func (r *rawIO) tryRead(nc net.Conn, b []byte, hooks bufferHooks, whole bool) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	rd := r.reader()
	if whole && rd.drained {
		rd.drained = false
		if hooks != nil {
			hooks.idleBuffer()
			r.idleReader()
		}
		return 0, errWouldBlock
	}
	rd.rbuf, rd.rn, rd.rerrno, rd.hooks, rd.idling, rd.again = b[:min(len(b), maxRawRead)], 0, 0, hooks, hooks != nil, false
	rd.trying = true
	err := r.rc.Read(rd.fn)
	rd.trying = false
	rd.rbuf, rd.hooks, rd.idling = nil, nil, false
	switch {
	case err != nil:
		return 0, opError(nc, "read", err)
	case rd.again:
		if hooks != nil {
			r.idleReader()
		}
		return 0, errWouldBlock
	case rd.rerrno != 0:
		return 0, opError(nc, "read", os.NewSyscallError("read", rd.rerrno))
	case rd.rn == 0:
		return 0, io.EOF
	}
	return rd.rn, nil
}

// read is net.Conn's Read.
func (r *rawIO) read(nc net.Conn, b []byte) (int, error) {
	return r.readIdle(nc, b, nil)
}

// readIdle is read into b, a slice of a buffer that, when hooks is not nil,
// hooks.idleBuffer may give back if the socket has nothing to read: then
// the read waits without a buffer and goes into the one hooks.refillBuffer
// returns (whose n bytes the caller takes as read). So a connection waiting
// for its peer holds no read buffer.
func (r *rawIO) readIdle(nc net.Conn, b []byte, hooks bufferHooks) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	rd := r.reader()
	rd.rbuf, rd.rn, rd.rerrno, rd.hooks, rd.idling = b[:min(len(b), maxRawRead)], 0, 0, hooks, hooks != nil
	err := r.rc.Read(rd.fn)
	rd.rbuf, rd.hooks, rd.idling = nil, nil, false
	switch {
	case err != nil:
		return 0, opError(nc, "read", err)
	case rd.rerrno != 0:
		return 0, opError(nc, "read", os.NewSyscallError("read", rd.rerrno))
	case rd.rn == 0:
		return 0, io.EOF
	}
	return rd.rn, nil
}

func (w *rawWriteState) writeOnce(fd uintptr) bool {
	for len(w.wbuf) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(w.wbuf))), uintptr(len(w.wbuf)))
		switch e {
		case 0:
			w.wbuf = w.wbuf[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			w.werrno = e
			return true
		}
	}
	return true
}

// write writes all of b, as net.Conn's Write.
func (r *rawIO) write(nc net.Conn, b []byte) error {
	if len(b) > maxRawWrite {
		_, err := nc.Write(b)
		return err
	}
	return r.writeAll(nc, b)
}

// writeAll writes all of b with raw calls, waiting in the runtime's poller
// while the socket is full (the write deadline applies).
func (r *rawIO) writeAll(nc net.Conn, b []byte) error {
	w := rawWriteStates.Get().(*rawWriteState)
	w.wbuf, w.werrno, w.vec = b, 0, false
	err := r.rc.Write(w.fn)
	errno := w.werrno
	w.wbuf = nil
	rawWriteStates.Put(w)
	if err != nil {
		return opError(nc, "write", err)
	}
	if errno != 0 {
		return opError(nc, "write", os.NewSyscallError("write", errno))
	}
	return nil
}

func (w *rawWriteState) writevOnce(fd uintptr) bool {
	for w.done < len(w.iov) {
		left := w.iov[w.done:]
		k := min(len(left), maxIovecs)
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(unsafe.SliceData(left))), uintptr(k))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			w.werrno = e
			return true
		}
		// Skip what was written.
		for n > 0 {
			v := &w.iov[w.done]
			l := uintptr(v.Len)
			if n < l {
				v.Base = (*byte)(unsafe.Add(unsafe.Pointer(v.Base), n))
				v.SetLen(int(l - n))
				break
			}
			n -= l
			w.done++
		}
	}
	return true
}

// bigWrites holds the net.Buffers of writes too large for a raw call
// (WriteTo consumes its receiver, which a local would make an allocation
// per call): such writes are rare, and a connection need not keep one.
var bigWrites = sync.Pool{New: func() any { return new(net.Buffers) }}

// writeBuffers writes every buffer of bufs, in order, with as few writev
// calls as the kernel allows.
func (r *rawIO) writeBuffers(nc net.Conn, bufs [][]byte) error {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if total > maxRawWrite {
		nb := bigWrites.Get().(*net.Buffers)
		*nb = bufs // WriteTo consumes *nb, not bufs
		_, err := nb.WriteTo(nc)
		*nb = nil
		bigWrites.Put(nb)
		return err
	}
	w := rawWriteStates.Get().(*rawWriteState)
	iov := w.iov[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		v := syscall.Iovec{Base: unsafe.SliceData(b)}
		v.SetLen(len(b))
		iov = append(iov, v)
	}
	w.iov, w.done, w.werrno = iov, 0, 0
	var err error
	if len(iov) > 0 {
		w.vec = true
		err = r.rc.Write(w.fn)
	}
	errno := w.werrno
	clear(w.iov) // let the buffers go
	w.done = 0
	rawWriteStates.Put(w)
	if err != nil {
		return opError(nc, "write", err)
	}
	if errno != 0 {
		return opError(nc, "write", os.NewSyscallError("writev", errno))
	}
	return nil
}

// opError gives err the shape net.Conn's errors have.
func opError(nc net.Conn, op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		oe.Op = op // RawConn says "raw-read" and "raw-write"
		return oe
	}
	return &net.OpError{Op: op, Net: nc.LocalAddr().Network(), Source: nc.LocalAddr(), Addr: nc.RemoteAddr(), Err: err}
}
