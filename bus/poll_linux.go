//go:build linux

package bus

import (
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ovbus/ovbus/ws/nonblock"
)

// The poller: readiness of the sessions' sockets on Linux over plain TCP,
// so that an idle session needs no goroutine of its own (session.go, "Who
// runs what").
//
// One epoll instance for the process, created with the first such
// connection and kept for the life of the process, serves every Server.
// The epoll descriptor is itself non-blocking and watched by the Go
// runtime's poller (an epoll descriptor is readable while it has events),
// so the one goroutine that waits for it is parked like any goroutine on a
// socket, not blocked in a system call holding a thread and its P. It only
// waits and dispatches: for the readable sockets it starts each session's
// readReady, which does everything that may wait (relaying, pacing,
// answering pings, closing) and arms the socket again once it has read all
// there is; the last one it runs itself, after starting the next waiting
// goroutine, so that a message does not wait for the scheduler to reach
// its reader. So one waiter is enough whatever GOMAXPROCS is, and no
// client can hold it up.
//
// A socket is registered one-shot and level-triggered: after an event it
// reports nothing until readReady arms it again (EPOLL_CTL_MOD), which
// reports at once whatever arrived meanwhile. So one reader at a time runs
// per session without a lock, and no byte is missed. The event carries the
// session's token, not its file descriptor, and every epoll_ctl runs inside
// syscall.RawConn.Control (an fdConn's: under a reference, fdConn.incref),
// which keeps the descriptor open: a descriptor closed and reused by
// another connection is never touched under the old session's name. Closing a socket takes it out of epoll by itself;
// session.readerClosed ends a reader that waited for it.
//
// A plain TCP socket leaves the Go runtime's poller at the upgrade: it is
// an fdConn (fdconn_linux.go), registered here from the hijack on, and the
// poller also wakes a read waiting for EPOLLIN (such as the closing
// handshake's), arming what its reader and that read want in the one
// one-shot registration, and its writer waiting for EPOLLOUT, through a
// second epoll instance where the socket is edge-triggered (wepfd). Where that
// hand-over failed (no descriptor left) the socket stays a *net.TCPConn,
// registered with both pollers: its writes and their deadlines go through
// the runtime's.
type poller struct {
	epfd int
	// wepfd is the write epoll: every fdConn's socket in it, EPOLLOUT and
	// edge-triggered (fdConn.writable); it is itself in epfd under the
	// token 0, level-triggered, so the loop hears of its edges.
	wepfd  int
	file   *os.File              // epfd, for the runtime's poller
	rc     syscall.RawConn       // file's, which loop waits on
	waitFn func(fd uintptr) bool // p.wait
	mine   *session              // the session the waiting loop reads next
	mu     sync.Mutex
	conns  map[uint32]pollee // by token
	next   uint32            // the last token handed out
	// The waiting loop's scratch.
	evs   []syscall.EpollEvent
	ready []pollee
	evts  []uint32 // ready's events
	wevs  []syscall.EpollEvent
	wfcs  []*fdConn
}

// pollee is what a token stands for: an fdConn, or the session of a
// socket the runtime's poller keeps (whose events are all for its reader).
type pollee interface {
	ready(events uint32) *session
}

func (c *session) ready(uint32) *session { return c }

// The poller's tasks (workers.go): the next loop, and a session's reader.
type (
	pollTask poller
	readTask session
)

func (t *pollTask) run() { (*poller)(t).loop() }
func (t *readTask) run() { (*session)(t).readReady() }

// pollEvents arms a socket: readable, or the peer shut down or reset
// (EPOLLHUP and EPOLLERR are reported always), once.
const pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// pollDisabled makes every session use the portable reader (readLoop), as
// on other systems; the tests set it to run the bus's tests on that path
// too (OVBUS_TEST_PORTABLE).
var pollDisabled bool

var (
	pollerOnce sync.Once
	thePoller  *poller
	pollerErr  error
)

// getPoller returns the process's poller, made on first use.
func getPoller() (*poller, error) {
	pollerOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err == nil {
			err = syscall.SetNonblock(fd, true)
		}
		wfd := -1
		if err == nil {
			wfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		}
		if err == nil {
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: 0} // token 0: never handed out
			err = syscall.EpollCtl(fd, syscall.EPOLL_CTL_ADD, wfd, &ev)
		}
		var rc syscall.RawConn
		var f *os.File
		if err == nil {
			f = os.NewFile(uintptr(fd), "epoll") // pollable: fd is non-blocking
			rc, err = f.SyscallConn()
		}
		if err != nil {
			if wfd >= 0 {
				syscall.Close(wfd)
			}
			if f != nil {
				f.Close()
			} else if fd >= 0 {
				syscall.Close(fd)
			}
			pollerErr = err
			return
		}
		thePoller = &poller{epfd: fd, wepfd: wfd, file: f, conns: make(map[uint32]pollee), evs: make([]syscall.EpollEvent, 256), wevs: make([]syscall.EpollEvent, 256)}
		thePoller.rc = rc
		thePoller.waitFn = thePoller.wait
		go thePoller.loop()
	})
	return thePoller, pollerErr
}

// poll registers c's socket with the poller and reports whether c's reader
// is readReady (true) or readLoop (false: TLS, not a TCP socket, or no
// epoll). c's reader is then running (readRunning): the caller runs it.
func (s *Server) poll(c *session) bool {
	if pollDisabled || !nonblock.Supported(c.conn) {
		return false
	}
	if fc, ok := c.conn.NetConn().(*fdConn); ok {
		fc.mu.Lock()
		fc.sess = c
		fc.mu.Unlock()
		c.rc = (*fdRaw)(fc)
		c.polled.Store(true)
		return true
	}
	sc, ok := c.conn.NetConn().(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	p, err := getPoller()
	if err != nil {
		s.log.Warn("No epoll: one reader goroutine per connection", "error", err) // rate-limited
		return false
	}
	c.rc = rc
	c.ptoken = p.add(c)
	if err := p.ctl(c, syscall.EPOLL_CTL_ADD); err != nil {
		p.forget(c.ptoken, c)
		return false
	}
	c.polled.Store(true)
	return true
}

// arm asks the poller for the next readable event of c's socket; it fails
// once the socket is closed.
func (s *Server) arm(c *session) error {
	if fr, ok := c.rc.(*fdRaw); ok {
		return (*fdConn)(fr).armReader()
	}
	return thePoller.ctl(c, syscall.EPOLL_CTL_MOD) // made by poll
}

// unpoll forgets c (its socket is closed, which took it out of epoll; an
// fdConn forgets itself as it closes).
func (s *Server) unpoll(c *session) {
	if c.polled.Load() && c.ptoken != 0 {
		thePoller.forget(c.ptoken, c)
	}
}

// add hands out a token for x.
func (p *poller) add(x pollee) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		p.next++
		if _, used := p.conns[p.next]; !used && p.next != 0 {
			break
		}
	}
	p.conns[p.next] = x
	return p.next
}

// forget takes token out unless it was handed out again.
func (p *poller) forget(token uint32, x pollee) {
	p.mu.Lock()
	if p.conns[token] == x {
		delete(p.conns, token)
	}
	p.mu.Unlock()
}

// ctl runs epoll_ctl op on c's socket while it is open.
func (p *poller) ctl(c *session, op int) error {
	ev := syscall.EpollEvent{Events: pollEvents, Fd: int32(c.ptoken)}
	var cerr error
	err := c.rc.Control(func(fd uintptr) {
		cerr = syscall.EpollCtl(p.epfd, op, int(fd), &ev)
	})
	if err != nil {
		return err
	}
	return cerr
}

// loop waits for events, and hands the waiting on: once it has events it
// starts the readers of the readable sessions but one, starts the next loop
// and becomes that one session's reader itself, so that a message reaches
// its reader without waiting for the scheduler. One loop at a time waits
// (rc.Read holds epfd's read lock), so evs, ready and mine are its own.
func (p *poller) loop() {
	if err := p.rc.Read(p.waitFn); err != nil {
		panic("bus: epoll descriptor: " + err.Error()) // never closed
	}
	mine := p.mine
	p.mine = nil
	workers.start((*pollTask)(p))
	mine.readReady()
}

// wait is loop's callback for rc.Read (waitFn, made once: a closure made
// per loop was two allocations per wake-up): it takes the events epfd has
// and dispatches them until one of them is a session for the loop to read
// (mine), or epfd has none left (then rc.Read waits for it).
func (p *poller) wait(fd uintptr) bool {
	for {
		n, err := epollWaitNow(int(fd), p.evs)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			panic("bus: epoll_wait: " + err.Error()) // the epoll fd is ours: cannot happen
		}
		if n == 0 {
			return false // wait until epfd is readable
		}
		if p.mine = p.dispatch(p.evs[:n]); p.mine != nil {
			return true
		}
	}
}

// dispatch wakes the waiters evs concern and starts the readers of the
// sessions whose sockets evs report but one, which it returns (nil if none
// is to be started).
func (p *poller) dispatch(evs []syscall.EpollEvent) *session {
	p.mu.Lock()
	for _, ev := range evs {
		if ev.Fd == 0 {
			p.writables()
			continue
		}
		// A token whose socket is gone (an event of a socket being
		// closed) finds nothing; one handed out again meanwhile wakes a
		// waiter or starts a reader that finds nothing to do and waits
		// or arms again.
		if x := p.conns[uint32(ev.Fd)]; x != nil {
			p.ready = append(p.ready, x)
			p.evts = append(p.evts, ev.Events)
		}
	}
	p.mu.Unlock()
	var mine *session
	for i, x := range p.ready {
		c := x.ready(p.evts[i])
		if c != nil && c.rstate.CompareAndSwap(readArmed, readRunning) {
			if mine != nil {
				workers.start((*readTask)(mine))
			}
			mine = c
		}
		p.ready[i] = nil
	}
	p.ready, p.evts = p.ready[:0], p.evts[:0]
	for i, fc := range p.wfcs {
		fc.writable()
		p.wfcs[i] = nil
	}
	p.wfcs = p.wfcs[:0]
	return mine
}

// writables takes the edges the write epoll holds, for dispatch to hand on
// (wfcs); p.mu is held.
func (p *poller) writables() {
	for {
		n, err := epollWaitNow(p.wepfd, p.wevs)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			panic("bus: epoll_wait: " + err.Error()) // the epoll fd is ours: cannot happen
		}
		for _, ev := range p.wevs[:n] {
			// A token handed out again meanwhile wakes a write that
			// tries again and waits again.
			if fc, ok := p.conns[uint32(ev.Fd)].(*fdConn); ok {
				p.wfcs = append(p.wfcs, fc)
			}
		}
		if n < len(p.wevs) {
			return
		}
	}
}

// epollWaitNow is epoll_wait with a zero timeout (epoll_pwait without a
// signal mask, the one every Linux port has), made as a raw system call:
// it cannot block, so it need not tell the scheduler. syscall.EpollWait
// does (entersyscall), and entering a system call while the runtime's
// sysmon thread sleeps because the process was idle wakes that thread and
// sets it polling every 20 µs again for a millisecond or more. The loop
// makes this call each time the bus wakes from idle, so on a bus that
// sleeps and wakes with its traffic sysmon's wake-ups were most of the
// process's context switches (bench/results/sysmon-2026-12-02.md).
// evs is never empty.
func epollWaitNow(epfd int, evs []syscall.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
