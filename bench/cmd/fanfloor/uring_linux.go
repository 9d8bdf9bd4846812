//go:build linux && !(mips || mipsle || mips64 || mips64le)

package main

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// A minimal io_uring (io_uring_setup(2), io_uring_enter(2)), just what the
// steady-uring floor needs: a batch of sends, one per socket, submitted and
// reaped with one system call. The layouts are <linux/io_uring.h>'s.

// The system calls have these numbers on every architecture but alpha and
// mips, whose offsets the build tag leaves out.
const (
	sysIOURingSetup    = 425
	sysIOURingEnter    = 426
	sysIOURingRegister = 427
)

const (
	uringSetupSingleIssuer = 1 << 12 // IORING_SETUP_SINGLE_ISSUER
	uringSetupDeferTaskrun = 1 << 13 // IORING_SETUP_DEFER_TASKRUN
	uringFeatSingleMmap    = 1 << 0  // IORING_FEAT_SINGLE_MMAP
	uringEnterGetevents    = 1 << 0  // IORING_ENTER_GETEVENTS
	uringOffSQRing         = 0       // IORING_OFF_SQ_RING
	uringOffCQRing         = 0x8000000
	uringOffSQEs           = 0x10000000
	uringOpSend            = 26     // IORING_OP_SEND
	uringSQEFixedFile      = 1 << 0 // IOSQE_FIXED_FILE
	uringRegisterFiles     = 2      // IORING_REGISTER_FILES
	sqeSize, cqeSize       = 64, 16
)

// uringParams is struct io_uring_params (120 bytes): what io_uring_setup
// reads (entries, flags) and fills in (the rings' sizes and offsets).
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// uringSQE is struct io_uring_sqe as IORING_OP_SEND fills it (64 bytes).
type uringSQE struct {
	opcode, flags     uint8
	ioprio            uint16
	fd                int32
	off, addr         uint64
	len, msgFlags     uint32
	userData          uint64
	bufIndex, persona uint16
	spliceFDIn        int32
	addr3, pad        uint64
}

// uringCQE is struct io_uring_cqe (16 bytes).
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// uring is one ring, used by one OS thread (the writer locks its goroutine
// to it: the ring is set up single-issuer). Its sockets are registered with
// the ring, so a send names a socket by its index (no file lookup per send).
type uring struct {
	fd                int
	sqRing, cqRing    []byte
	sqes              []uringSQE
	sqHead, sqTail    *uint32
	sqMask            uint32
	sqArray           []uint32
	cqHead, cqTail    *uint32
	cqMask            uint32
	cqes              []uringCQE
	queued            uint32 // SQEs written since the last submit
	enters, submitted int    // io_uring_enter calls and SQEs, for the figures
}

// newUring sets up a ring of at least entries SQEs and registers fds, the
// sockets, by their index. The caller must hold runtime.LockOSThread for as
// long as it uses the ring.
func newUring(entries int, fds []int) (*uring, error) {
	n := uint32(1)
	for int(n) < entries && n < 4096 {
		n <<= 1
	}
	// Single issuer with deferred task work, as a one-thread server sets a
	// ring up; kernels before 6.1 refuse the flags and get a plain ring.
	var p uringParams
	p.flags = uringSetupSingleIssuer | uringSetupDeferTaskrun
	fd, _, errno := syscall.Syscall(sysIOURingSetup, uintptr(n), uintptr(unsafe.Pointer(&p)), 0)
	if errno == syscall.EINVAL {
		p = uringParams{}
		fd, _, errno = syscall.Syscall(sysIOURingSetup, uintptr(n), uintptr(unsafe.Pointer(&p)), 0)
	}
	if errno != 0 {
		return nil, fmt.Errorf("%w: io_uring_setup: %v", errUringUnavailable, errno)
	}
	r := &uring{fd: int(fd)}
	if err := r.mapRings(&p); err != nil {
		r.close()
		return nil, err
	}
	files := make([]int32, len(fds))
	for i, f := range fds {
		files[i] = int32(f)
	}
	if len(files) > 0 {
		_, _, errno = syscall.Syscall6(sysIOURingRegister, uintptr(r.fd), uringRegisterFiles, uintptr(unsafe.Pointer(&files[0])), uintptr(len(files)), 0, 0)
		runtime.KeepAlive(files)
		if errno != 0 {
			r.close()
			return nil, fmt.Errorf("io_uring_register files: %v", errno)
		}
	}
	return r, nil
}

// mapRings maps the submission and completion rings and the SQE array.
func (r *uring) mapRings(p *uringParams) error {
	sqLen := int(p.sqOff.array) + int(p.sqEntries)*4
	cqLen := int(p.cqOff.cqes) + int(p.cqEntries)*cqeSize
	if p.features&uringFeatSingleMmap != 0 {
		sqLen = max(sqLen, cqLen)
	}
	prot, flags := syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE
	var err error
	if r.sqRing, err = syscall.Mmap(r.fd, uringOffSQRing, sqLen, prot, flags); err != nil {
		return fmt.Errorf("io_uring: map the submission ring: %v", err)
	}
	r.cqRing = r.sqRing
	if p.features&uringFeatSingleMmap == 0 {
		if r.cqRing, err = syscall.Mmap(r.fd, uringOffCQRing, cqLen, prot, flags); err != nil {
			return fmt.Errorf("io_uring: map the completion ring: %v", err)
		}
	}
	sqes, err := syscall.Mmap(r.fd, uringOffSQEs, int(p.sqEntries)*sqeSize, prot, flags)
	if err != nil {
		return fmt.Errorf("io_uring: map the SQEs: %v", err)
	}
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&sqes[0])), p.sqEntries)
	r.sqHead = (*uint32)(unsafe.Pointer(&r.sqRing[p.sqOff.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&r.sqRing[p.sqOff.tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&r.sqRing[p.sqOff.ringMask]))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Pointer(&r.sqRing[p.sqOff.array])), p.sqEntries)
	r.cqHead = (*uint32)(unsafe.Pointer(&r.cqRing[p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&r.cqRing[p.cqOff.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&r.cqRing[p.cqOff.ringMask]))
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.cqRing[p.cqOff.cqes])), p.cqEntries)
	return nil
}

// send queues a send of b to the socket registered at index i, with
// MSG_DONTWAIT: the kernel completes it at once with what the socket took
// (possibly less than b) or -EAGAIN, as write(2) on a non-blocking socket
// would, instead of waiting for room. b must stay as it is until submit
// returns. A full submission queue is submitted first.
func (r *uring) send(i int, b []byte, reap func(i, res int)) {
	if int(r.queued) == len(r.sqes) {
		r.submit(reap)
	}
	tail := *r.sqTail // only this thread writes the tail
	idx := tail & r.sqMask
	r.sqes[idx] = uringSQE{opcode: uringOpSend, flags: uringSQEFixedFile, fd: int32(i),
		addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), len: uint32(len(b)),
		msgFlags: syscall.MSG_DONTWAIT | syscall.MSG_NOSIGNAL, userData: uint64(i)}
	r.sqArray[idx] = idx
	atomic.StoreUint32(r.sqTail, tail+1) // the SQE is written before the kernel sees the tail
	r.queued++
}

// submit hands the queued SQEs to the kernel and waits for all their
// completions in the same io_uring_enter, then calls reap with each one's
// socket index and result (bytes sent, or -errno). One call for the whole
// batch is the point: its sends are what write(2) would do one call each.
func (r *uring) submit(reap func(i, res int)) {
	want := r.queued
	if want == 0 {
		return
	}
	r.queued = 0
	r.submitted += int(want)
	for toSubmit := want; ; toSubmit = 0 {
		// A signal interrupts only the wait: the SQEs are submitted
		// either way, and the next call waits for the rest.
		n, _, errno := syscall.Syscall6(sysIOURingEnter, uintptr(r.fd), uintptr(toSubmit), uintptr(want), uringEnterGetevents, 0, 0)
		r.enters++
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || uint32(n) != toSubmit {
			fail(fmt.Errorf("io_uring_enter: %d of %d submitted: %v", n, toSubmit, errno))
		}
		head := *r.cqHead // only this thread moves the head
		tail := atomic.LoadUint32(r.cqTail)
		for ; head != tail && want > 0; head++ {
			c := r.cqes[head&r.cqMask]
			reap(int(c.userData), int(c.res))
			want--
		}
		atomic.StoreUint32(r.cqHead, head) // the CQEs are read before the kernel may reuse them
		if want == 0 {
			return
		}
	}
}

func (r *uring) close() {
	if r.sqes != nil {
		syscall.Munmap(unsafe.Slice((*byte)(unsafe.Pointer(&r.sqes[0])), len(r.sqes)*sqeSize))
	}
	if r.cqRing != nil && &r.cqRing[0] != &r.sqRing[0] {
		syscall.Munmap(r.cqRing)
	}
	if r.sqRing != nil {
		syscall.Munmap(r.sqRing)
	}
	syscall.Close(r.fd)
}
