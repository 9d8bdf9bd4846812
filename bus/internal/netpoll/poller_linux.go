//go:build linux

package netpoll

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ovbus/ovbus/bus/internal/workers"
)

// Supported reports whether this system has the poller: Register and
// HandOver work only where it is true.
const Supported = true

// The poller: one epoll instance for the process, created with the first
// registration or hand-over and kept for the life of the process, serves
// every server in it. The epoll descriptor is non-blocking and watched by
// the Go runtime's poller, so the one goroutine that waits for it is
// parked like any goroutine on a socket, not blocked in a system call
// holding a thread and its P. It only waits and dispatches: it starts the
// Reader of each readable socket, which does everything that may wait and
// arms the socket again, and runs the last one itself after starting the
// next waiting loop, so a message does not wait for the scheduler. One
// waiter is enough whatever GOMAXPROCS is, and no client can hold it up.
//
// A socket is registered one-shot and level-triggered: after an event it
// reports nothing until its reader arms it again (EPOLL_CTL_MOD), which
// reports at once whatever arrived meanwhile. So one reader at a time runs
// per socket, and no byte is missed. The event carries the socket's token,
// not its file descriptor, and every epoll_ctl runs while the descriptor is
// held open (syscall.RawConn.Control, or an fdConn's reference, incref): a
// descriptor closed and reused by another connection is never touched under
// the old owner's name, and a token is handed out again only once its
// owner has let it go (forget).
//
// A socket HandOver made (an fdConn, fdconn_linux.go) is in it from the
// hijack on; the poller also wakes a read waiting for EPOLLIN (a closing
// handshake's, say), arming what its reader and that read want in the one
// one-shot registration, and a write waiting for EPOLLOUT through a second,
// edge-triggered epoll instance (wepfd). A socket the runtime's poller
// keeps (kept: no descriptor left at hand-over, or a Unix socket) is
// registered for its reader only.
type poller struct {
	epfd int
	// wepfd is the write epoll: every fdConn's socket in it, EPOLLOUT and
	// edge-triggered (fdConn.writable); it is itself in epfd under the
	// token 0, level-triggered, so the loop hears of its edges.
	wepfd  int
	file   *os.File              // epfd, for the runtime's poller
	rc     syscall.RawConn       // file's, which loop waits on
	waitFn func(fd uintptr) bool // p.wait
	mine   Reader                // the reader the waiting loop runs next
	mu     sync.Mutex
	// slots holds what each token stands for, by the token's slot (nil:
	// free; 0 is never handed out, the write epoll's), and free the tokens
	// let go, whose slots are handed out again last first, each in its next
	// generation (add): a table costs a connection two words where a map
	// cost it about seven.
	slots []pollee
	free  []uint32
	// The waiting loop's scratch.
	evs     []syscall.EpollEvent
	ready   []pollee
	evts    []uint32 // ready's events
	claimed []Reader // the readers of one round (startReaders)
	wevs    []syscall.EpollEvent
	wfcs    []*fdConn
}

// pollTask is the poller's next loop, a task for the workers.
type pollTask poller

func (t *pollTask) Run() { (*poller)(t).loop() }

// pollEvents arms a socket: readable, or the peer shut down or reset
// (EPOLLHUP and EPOLLERR are reported always), once.
const pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

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
			pollerErr = fmt.Errorf("%w: %w", ErrNoPoller, err)
			return
		}
		thePoller = &poller{epfd: fd, wepfd: wfd, file: f, slots: make([]pollee, 1, 64), evs: make([]syscall.EpollEvent, 256), wevs: make([]syscall.EpollEvent, 256)}
		thePoller.rc = rc
		thePoller.waitFn = thePoller.wait
		go thePoller.loop()
	})
	return thePoller, pollerErr
}

// Register registers nc's socket for rd, which counts as running from now
// on (Registration): a socket HandOver made, or one the runtime's poller
// keeps (any syscall.Conn; a *net.TCPConn or *net.UnixConn in practice).
// It fails with errors.ErrUnsupported when nc is neither, with an error
// wrapping ErrNoPoller when the process has no epoll instance, or with
// epoll_ctl's error. Then the caller reads nc another way (a goroutine of
// its own).
func Register(nc net.Conn, rd Reader) (Registration, error) {
	if fc, ok := nc.(*fdConn); ok {
		fc.mu.Lock()
		fc.rd = rd
		fc.mu.Unlock()
		return Registration{fc}, nil
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return Registration{}, errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return Registration{}, err
	}
	p, err := getPoller()
	if err != nil {
		return Registration{}, err
	}
	k := &kept{rd: rd, rc: rc}
	p.add(k)
	if err := k.ctl(syscall.EPOLL_CTL_ADD); err != nil {
		p.forget(k.token, k)
		return Registration{}, err
	}
	return Registration{k}, nil
}

// kept is a socket the runtime's poller keeps, registered for its reader:
// every event of it is for the reader.
type kept struct {
	rs    readState
	token uint32
	rd    Reader
	rc    syscall.RawConn
}

func (k *kept) ready(uint32) Reader {
	if k.rs.claim() {
		return k.rd
	}
	return nil
}

func (k *kept) state() *readState { return &k.rs }
func (k *kept) arm() error        { return k.ctl(syscall.EPOLL_CTL_MOD) }
func (k *kept) unregister()       { thePoller.forget(k.token, k) }
func (k *kept) tokenIs() uint32   { return k.token }
func (k *kept) setToken(t uint32) { k.token = t }

// ctl runs epoll_ctl op on k's socket while it is open.
func (k *kept) ctl(op int) error {
	ev := syscall.EpollEvent{Events: pollEvents, Fd: int32(k.token)}
	var cerr error
	err := k.rc.Control(func(fd uintptr) {
		cerr = syscall.EpollCtl(thePoller.epfd, op, int(fd), &ev)
	})
	if err != nil {
		return err
	}
	return cerr
}

// A token is a slot of the poller's table (its low tokenSlotBits) and the
// slot's generation (the bits above): a slot handed out again comes with
// the next generation, so an event of the socket that had it before
// (fetched from epoll before that socket went, dispatched after) names a
// token nobody holds and wakes nobody. 2²² slots are 4 194 303 sockets
// at once (slot 0 is never handed out); a token comes back after 2¹⁰
// generations of its slot.
const (
	tokenSlotBits = 22
	tokenSlotMask = 1<<tokenSlotBits - 1
)

// add hands out a token for x and gives it to x (setToken, under p.mu:
// the loop reads it there): never 0 (the write epoll's), never one still
// held, and one let go only in its slot's next generation.
func (p *poller) add(x pollee) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		t := p.free[n-1] + 1<<tokenSlotBits // wraps within the generation bits
		p.free = p.free[:n-1]
		p.slots[t&tokenSlotMask] = x
		x.setToken(t)
		return
	}
	if len(p.slots) > tokenSlotMask {
		panic("netpoll: more than 4 194 303 sockets")
	}
	p.slots = append(p.slots, x)
	x.setToken(uint32(len(p.slots) - 1))
}

// forget lets token go, unless it was handed out again.
func (p *poller) forget(token uint32, x pollee) {
	p.mu.Lock()
	if i := token & tokenSlotMask; p.slots[i] == x {
		p.slots[i] = nil
		p.free = append(p.free, token)
	}
	p.mu.Unlock()
}

// lookup returns who holds token, nil if nobody does; p.mu is held.
func (p *poller) lookup(token uint32) pollee {
	if i := int(token & tokenSlotMask); i < len(p.slots) {
		if x := p.slots[i]; x != nil && x.tokenIs() == token {
			return x
		}
	}
	return nil
}

// loop waits for events, and hands the waiting on: once it has events it
// starts the readers of the readable sockets but one, starts the next loop
// and becomes that one's reader itself, so that a message reaches its
// reader without waiting for the scheduler. One loop at a time waits
// (rc.Read holds epfd's read lock), so evs, ready and mine are its own.
func (p *poller) loop() {
	if err := p.rc.Read(p.waitFn); err != nil {
		panic("netpoll: epoll descriptor: " + err.Error()) // never closed
	}
	mine := p.mine
	p.mine = nil
	workers.Start((*pollTask)(p))
	mine.Run()
}

// wait is loop's callback for rc.Read (waitFn, made once so that a wake-up
// allocates nothing): it takes the events epfd has and dispatches them
// until one of them is a reader for the loop to run (mine), or epfd has
// none left (then rc.Read waits for it).
func (p *poller) wait(fd uintptr) bool {
	for {
		n, err := epollWaitNow(int(fd), p.evs)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			panic("netpoll: epoll_wait: " + err.Error()) // the epoll fd is ours: cannot happen
		}
		if n == 0 {
			return false // wait until epfd is readable
		}
		if p.mine = p.dispatch(p.evs[:n]); p.mine != nil {
			return true
		}
	}
}

// dispatch wakes the waiters evs concern and starts the readers evs claim
// but one, which it returns (nil if none is to run).
func (p *poller) dispatch(evs []syscall.EpollEvent) Reader {
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
		if x := p.lookup(uint32(ev.Fd)); x != nil {
			p.ready = append(p.ready, x)
			p.evts = append(p.evts, ev.Events)
		}
	}
	p.mu.Unlock()
	mine := p.startReaders()
	for i, fc := range p.wfcs {
		fc.writable()
		p.wfcs[i] = nil
	}
	p.wfcs = p.wfcs[:0]
	return mine
}

// startReaders is a round of readers: it hands the events of one epoll_wait
// (ready, evts) to their sockets, starts on workers each reader they claim
// but the last, and returns that one for the loop to run. Everything a
// round of readers needs before it starts or once it is under way (a hook
// around the readers of one wake-up) belongs here.
func (p *poller) startReaders() Reader {
	claimed := p.claimed[:0]
	for i, x := range p.ready {
		if rd := x.ready(p.evts[i]); rd != nil {
			claimed = append(claimed, rd)
			if rr, ok := rd.(RoundReader); ok {
				rr.Claimed() // before any reader of the round starts
			}
		}
		p.ready[i] = nil
	}
	p.ready, p.evts = p.ready[:0], p.evts[:0]
	var mine Reader
	for i, rd := range claimed {
		if mine != nil {
			workers.Start(mine)
		}
		mine = rd
		claimed[i] = nil
	}
	p.claimed = claimed[:0]
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
			panic("netpoll: epoll_wait: " + err.Error()) // the epoll fd is ours: cannot happen
		}
		for _, ev := range p.wevs[:n] {
			// A token handed out again meanwhile wakes a write that
			// tries again and waits again.
			if fc, ok := p.lookup(uint32(ev.Fd)).(*fdConn); ok {
				p.wfcs = append(p.wfcs, fc)
			}
		}
		if n < len(p.wevs) {
			return
		}
	}
}

// epollWaitNow is epoll_wait with a zero timeout (epoll_pwait without a
// signal mask, which every Linux port has), made as a raw system call: it
// cannot block, so it need not tell the scheduler. syscall.EpollWait does
// (entersyscall), and entering a system call while the runtime's sysmon
// thread sleeps on an idle process wakes that thread and sets it polling
// again for a millisecond or more; the loop makes this call each time the
// process wakes from idle. evs is never empty.
func epollWaitNow(epfd int, evs []syscall.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
