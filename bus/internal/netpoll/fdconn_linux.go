//go:build linux

package netpoll

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// fdConn is a plain TCP socket once it is out of the Go runtime's poller:
// this package's epoll (poller_linux.go) tells both its reader and its
// waiting writer when the socket is ready. An idle *net.TCPConn holds a
// pollDesc with two timers, a finalizer record outside the heap, and the
// TCPConn, netFD, poll.FD and two TCPAddr; an fdConn is a descriptor, a
// token, its reader and the waiters' state (TestFDConnSize).
//
// It is a net.Conn and a syscall.Conn with RawSocket (ws/nonblock's
// Socket), so ws reads and writes it with raw system calls as it does a
// *net.TCPConn: its RawConn's Read and Write call f with the descriptor
// until f returns true, waiting in between for the poller to report the
// socket readable or writable, and honour the deadlines and Close. A
// deadline costs a timer only while someone waits (fdWaiter).
//
// Readable comes from the poller's one-shot registration, armed for the
// registered reader and for a waiting Read (rearm). Writable comes from a
// second epoll instance (poller.wepfd), where the socket is registered
// once, edge-triggered, as the runtime's poller does: a write that waits
// costs no epoll_ctl. The kernel reports an edge only after a write found
// the socket full; one that comes while nobody waits is kept (wready) for
// the next write to wait, which then tries again at once.
//
// Every use of fd holds a reference (ref, as internal/poll's fdMutex
// does): Close marks the conn closed, wakes the waiters and drops the open
// conn's own reference, and whoever drops the last one closes fd. So a
// descriptor number is never reused by another connection while a system
// call or an epoll_ctl of this one may still name it. Only a socket handed
// over (HandOver, from an upgrade's hijack) is one; TLS and other systems
// keep the *net.TCPConn.
type fdConn struct {
	ref   atomic.Uint64 // fdClosed | uses, the open conn being one use
	fd    int32
	token uint32 // its token in the poller: set once, by poller.add under the poller's mu
	rs    readState

	// Under mu: whether the reader is armed in epoll (one-shot, so nothing
	// after an event until armed again), whether the registered reader
	// waits for the poller (reader), the waiting Read and Write (at most
	// one each: ws serialises each side), and the reader the poller starts
	// (Register).
	mu     sync.Mutex
	armed  bool
	reader bool
	wready bool // writable since the last write waited
	rw, ww *fdWaiter
	rd     Reader

	rdl, wdl atomic.Int64 // the deadlines, Unix nanoseconds; 0: none, dlPast: past when set
}

// dlPast is a deadline already past when it was set.
const dlPast = -1

const fdClosed = 1 << 63

// epollET is EPOLLET as epoll_event's uint32 (syscall's is negative).
const epollET = 1 << 31

// handOver is an upgrade's http.ResponseWriter whose Hijack hands a plain
// TCP socket over to an fdConn, so that the WebSocket library makes its
// connection on it.
type handOver struct {
	http.ResponseWriter
	hj http.Hijacker
}

// HandOver returns w with a Hijack that takes a plain TCP socket out of the
// runtime's poller: the net.Conn it returns is then this package's (its
// reads and writes wait on the poller; it has RawSocket, as ws/nonblock's
// Socket wants), for Register. A socket it cannot take (not TCP, no
// descriptor left) is returned as net/http's Hijack returned it. w itself
// when it is no http.Hijacker.
func HandOver(w http.ResponseWriter) http.ResponseWriter {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return w
	}
	return &handOver{ResponseWriter: w, hj: hj}
}

func (h *handOver) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := h.hj.Hijack()
	if err != nil {
		return nc, brw, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		if fc := newFDConn(tc); fc != nil {
			return fc, brw, nil // brw's buffered input is read from it first
		}
	}
	return nc, brw, nil
}

// newFDConn moves tc's socket to an fdConn registered with the poller and
// closes tc, or returns nil and leaves tc as it is (no epoll, no
// descriptor left: EMFILE).
func newFDConn(tc *net.TCPConn) *fdConn {
	p, err := getPoller()
	if err != nil {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	nfd := -1
	rc.Control(func(fd uintptr) {
		// A duplicate shares the open file, so it is non-blocking too;
		// os.NewFile would register it with the runtime's poller again.
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e == 0 {
			nfd = int(r)
		}
	})
	if nfd < 0 {
		return nil
	}
	fc := &fdConn{fd: int32(nfd)}
	fc.ref.Store(1)
	p.add(fc)
	// Nothing armed: EPOLLHUP and EPOLLERR would be reported anyway, once.
	ev := syscall.EpollEvent{Events: syscall.EPOLLONESHOT, Fd: int32(fc.token)}
	err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, nfd, &ev)
	if err == nil {
		ev.Events = syscall.EPOLLOUT | epollET
		err = syscall.EpollCtl(p.wepfd, syscall.EPOLL_CTL_ADD, nfd, &ev)
	}
	if err != nil {
		p.forget(fc.token, fc)
		syscall.Close(nfd) // out of both
		return nil
	}
	tc.Close() // its pollDesc and netFD go back; the socket stays open on nfd
	return fc
}

// incref takes a use of fd; false once the conn is closed.
func (fc *fdConn) incref() bool {
	for {
		old := fc.ref.Load()
		if old&fdClosed != 0 {
			return false
		}
		if fc.ref.CompareAndSwap(old, old+1) {
			return true
		}
	}
}

// decref drops a use of fd; the last one after Close closes it.
func (fc *fdConn) decref() {
	if fc.ref.Add(^uint64(0)) == fdClosed {
		syscall.Close(int(fc.fd))
	}
}

func (fc *fdConn) isClosed() bool { return fc.ref.Load()&fdClosed != 0 }

// Close closes the conn: the waiting Read and Write return net.ErrClosed,
// the token goes, and fd is closed once no call uses it any more.
func (fc *fdConn) Close() error {
	for {
		old := fc.ref.Load()
		if old&fdClosed != 0 {
			return fc.opError("close", net.ErrClosed)
		}
		if fc.ref.CompareAndSwap(old, old|fdClosed) {
			break
		}
	}
	thePoller.forget(fc.token, fc)
	fc.mu.Lock()
	fc.rw.wake()
	fc.ww.wake()
	fc.rw, fc.ww, fc.reader = nil, nil, false
	fc.mu.Unlock()
	fc.decref() // the open conn's use
	return nil
}

// The events a read and a write wait for; an error or hang-up wakes both.
const (
	fdReadEvents  = syscall.EPOLLIN | syscall.EPOLLRDHUP
	fdWriteEvents = syscall.EPOLLOUT
	fdEndEvents   = syscall.EPOLLHUP | syscall.EPOLLERR
)

// rearm arms in the poller's epoll what the reader and a waiting Read
// want and is not armed yet; fc.mu is held.
func (fc *fdConn) rearm() error {
	if !fc.reader && fc.rw == nil || fc.armed {
		return nil // nothing wanted, armed, or a pending event will arm it again (ready)
	}
	if !fc.incref() {
		return net.ErrClosed
	}
	ev := syscall.EpollEvent{Events: fdReadEvents | syscall.EPOLLONESHOT, Fd: int32(fc.token)}
	err := syscall.EpollCtl(thePoller.epfd, syscall.EPOLL_CTL_MOD, int(fc.fd), &ev)
	fc.decref()
	if err != nil {
		return err
	}
	fc.armed = true
	return nil
}

// arm asks the poller to start the registered reader when the socket is
// readable; it fails once the conn is closed (pollee).
func (fc *fdConn) arm() error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.isClosed() {
		return net.ErrClosed
	}
	fc.reader = true
	return fc.rearm()
}

func (fc *fdConn) state() *readState { return &fc.rs }

func (fc *fdConn) tokenIs() uint32   { return fc.token }
func (fc *fdConn) setToken(t uint32) { fc.token = t }

// unregister does nothing: Close lets the token go (pollee).
func (fc *fdConn) unregister() {}

// ready takes an event of fc's socket from the poller's epoll (on the
// poller's loop): it wakes the waiters it concerns and returns the reader
// to start, claimed, if any; what is still wanted is armed again
// (pollee).
func (fc *fdConn) ready(events uint32) Reader {
	fc.mu.Lock()
	fc.armed = false
	start := false
	if events&(fdReadEvents|fdEndEvents) != 0 {
		fc.rw.wake()
		fc.rw = nil
		if fc.reader {
			fc.reader, start = false, true
		}
	}
	if events&fdEndEvents != 0 {
		fc.wakeWriter()
	}
	if fc.reader || fc.rw != nil {
		if err := fc.rearm(); err != nil {
			// Closed meanwhile (Close woke the waiters), or epoll has
			// no room: let the reader and the waiters find out.
			fc.rw.wake()
			fc.ww.wake()
			fc.rw, fc.ww = nil, nil
			if fc.reader {
				fc.reader, start = false, true
			}
		}
	}
	rd := fc.rd
	fc.mu.Unlock()
	if start && fc.rs.claim() {
		return rd
	}
	return nil
}

// writable takes an edge of the write epoll (poller.wepfd): it wakes the
// waiting write, or keeps the news for the next one.
func (fc *fdConn) writable() {
	fc.mu.Lock()
	fc.wakeWriter()
	fc.mu.Unlock()
}

// wakeWriter wakes the waiting write or sets wready; fc.mu is held.
func (fc *fdConn) wakeWriter() {
	if fc.ww == nil {
		fc.wready = true
		return
	}
	fc.ww.wake()
	fc.ww = nil
}

// fdWaiter is a Read or Write waiting for its socket, from a pool: a
// channel the poller, Close or the deadline's timer wakes it on.
type fdWaiter struct {
	ch chan struct{} // one wake is enough
	t  *time.Timer   // the deadline, armed only while waiting
}

var fdWaiters = sync.Pool{New: func() any {
	w := &fdWaiter{ch: make(chan struct{}, 1)}
	w.t = time.AfterFunc(time.Hour, w.wake)
	w.t.Stop()
	return w
}}

// wake wakes w (nil: nobody waits).
func (w *fdWaiter) wake() {
	if w == nil {
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// setTimer arms w's timer for deadline dl (0: none); fc.mu is held.
func (w *fdWaiter) setTimer(dl int64) {
	switch dl {
	case 0:
		w.t.Stop()
	case dlPast:
		w.t.Reset(0)
	default:
		w.t.Reset(time.Duration(dl - time.Now().UnixNano()))
	}
}

// wait waits until the poller reports the socket readable (or writable,
// when write), the conn is closed, the deadline passes or the deadline is
// moved (a wake may be early: the caller tries again and looks).
func (fc *fdConn) wait(write bool) error {
	w := fdWaiters.Get().(*fdWaiter)
	select {
	case <-w.ch: // a late wake of its last use
	default:
	}
	dl := &fc.rdl
	slot := &fc.rw
	if write {
		dl, slot = &fc.wdl, &fc.ww
	}
	fc.mu.Lock()
	if fc.isClosed() {
		fc.mu.Unlock()
		fdWaiters.Put(w)
		return net.ErrClosed
	}
	if d := dl.Load(); d == dlPast || d != 0 && d <= time.Now().UnixNano() {
		fc.mu.Unlock()
		fdWaiters.Put(w)
		return os.ErrDeadlineExceeded
	}
	if write && fc.wready {
		fc.wready = false // writable since the write that found it full: again
		fc.mu.Unlock()
		fdWaiters.Put(w)
		return nil
	}
	*slot = w
	if !write {
		if err := fc.rearm(); err != nil {
			*slot = nil
			fc.mu.Unlock()
			fdWaiters.Put(w)
			return err
		}
	}
	w.setTimer(dl.Load())
	fc.mu.Unlock()
	<-w.ch
	fc.mu.Lock()
	if *slot == w {
		*slot = nil
	}
	w.t.Stop()
	fc.mu.Unlock()
	fdWaiters.Put(w)
	return nil
}

// rawDo is RawConn's Read (write false) and Write: f with fd until it
// returns true, waiting for readiness in between. A deadline that passed
// since it was set fails the call only once it would wait (wait), so a
// call that does not wait reads no clock; one set in the past (a
// context's end, ws's watch) fails it at once, as net's does.
func (fc *fdConn) rawDo(write bool, f func(fd uintptr) bool) error {
	if !fc.incref() {
		return net.ErrClosed
	}
	defer fc.decref()
	dl := &fc.rdl
	if write {
		dl = &fc.wdl
	}
	for {
		if fc.isClosed() {
			return net.ErrClosed
		}
		if dl.Load() == dlPast {
			return os.ErrDeadlineExceeded
		}
		if f(uintptr(fc.fd)) {
			return nil
		}
		if err := fc.wait(write); err != nil {
			return err
		}
	}
}

// fdRaw is fc's syscall.RawConn.
type fdRaw fdConn

func (r *fdRaw) Control(f func(fd uintptr)) error {
	fc := (*fdConn)(r)
	if !fc.incref() {
		return fc.opError("raw-control", net.ErrClosed)
	}
	f(uintptr(fc.fd))
	fc.decref()
	return nil
}

func (r *fdRaw) Read(f func(fd uintptr) bool) error {
	fc := (*fdConn)(r)
	if err := fc.rawDo(false, f); err != nil {
		return fc.opError("raw-read", err)
	}
	return nil
}

func (r *fdRaw) Write(f func(fd uintptr) bool) error {
	fc := (*fdConn)(r)
	if err := fc.rawDo(true, f); err != nil {
		return fc.opError("raw-write", err)
	}
	return nil
}

// SyscallConn returns the socket's RawConn (syscall.Conn).
func (fc *fdConn) SyscallConn() (syscall.RawConn, error) { return (*fdRaw)(fc), nil }

// RawSocket tells ws that the RawConn reads and writes the socket itself
// (ws/nonblock's Socket).
func (fc *fdConn) RawSocket() bool { return true }

// Read is net.Conn's Read.
func (fc *fdConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var serr error
	err := fc.rawDo(false, func(fd uintptr) bool {
		for {
			n, serr = syscall.Read(int(fd), b)
			if serr != syscall.EINTR {
				return serr != syscall.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, fc.opError("read", err)
	case serr != nil:
		return 0, fc.opError("read", os.NewSyscallError("read", serr))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write is net.Conn's Write: all of b, or an error.
func (fc *fdConn) Write(b []byte) (int, error) {
	done := 0
	var serr error
	err := fc.rawDo(true, func(fd uintptr) bool {
		for done < len(b) {
			n, e := syscall.Write(int(fd), b[done:])
			switch e {
			case nil:
				done += n
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				serr = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return done, fc.opError("write", err)
	case serr != nil:
		return done, fc.opError("write", os.NewSyscallError("write", serr))
	}
	return done, nil
}

// CloseWrite shuts the sending side down, as *net.TCPConn's does.
func (fc *fdConn) CloseWrite() error {
	if !fc.incref() {
		return fc.opError("close", net.ErrClosed)
	}
	defer fc.decref()
	if err := syscall.Shutdown(int(fc.fd), syscall.SHUT_WR); err != nil {
		return fc.opError("close", os.NewSyscallError("shutdown", err))
	}
	return nil
}

// SetWriteBuffer sets SO_SNDBUF, as *net.TCPConn's does.
func (fc *fdConn) SetWriteBuffer(n int) error {
	if !fc.incref() {
		return fc.opError("set", net.ErrClosed)
	}
	defer fc.decref()
	return os.NewSyscallError("setsockopt", syscall.SetsockoptInt(int(fc.fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n))
}

func (fc *fdConn) SetDeadline(t time.Time) error {
	fc.setDeadline(false, t)
	fc.setDeadline(true, t)
	return nil
}

func (fc *fdConn) SetReadDeadline(t time.Time) error  { fc.setDeadline(false, t); return nil }
func (fc *fdConn) SetWriteDeadline(t time.Time) error { fc.setDeadline(true, t); return nil }

// setDeadline sets the read or write deadline and moves the timer of the
// call waiting under it, if any.
func (fc *fdConn) setDeadline(write bool, t time.Time) {
	var dl int64
	if !t.IsZero() {
		dl = t.UnixNano()
		if !t.After(time.Now()) {
			dl = dlPast
		}
	}
	fc.mu.Lock()
	w := fc.rw
	if write {
		fc.wdl.Store(dl)
		w = fc.ww
	} else {
		fc.rdl.Store(dl)
	}
	if w != nil {
		w.setTimer(dl)
	}
	fc.mu.Unlock()
}

// LocalAddr and RemoteAddr ask the kernel (a closed conn has the zero
// address): nothing calls them on the way of a message.
func (fc *fdConn) LocalAddr() net.Addr  { return fc.addr(syscall.Getsockname) }
func (fc *fdConn) RemoteAddr() net.Addr { return fc.addr(syscall.Getpeername) }

func (fc *fdConn) addr(get func(int) (syscall.Sockaddr, error)) net.Addr {
	a := &net.TCPAddr{}
	if !fc.incref() {
		return a
	}
	sa, err := get(int(fc.fd))
	fc.decref()
	if err != nil {
		return a
	}
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		a.IP, a.Port = net.IP(append([]byte(nil), sa.Addr[:]...)), sa.Port
	case *syscall.SockaddrInet6:
		a.IP, a.Port = net.IP(append([]byte(nil), sa.Addr[:]...)), sa.Port
	}
	return a
}

// opError gives err the shape net's errors have; a deadline error stays a
// timeout (net.Error) and a closed conn's is net.ErrClosed under it.
func (fc *fdConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: fc.LocalAddr(), Addr: fc.RemoteAddr(), Err: err}
}
