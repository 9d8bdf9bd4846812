// Package netpoll tells a server when its sockets are readable with one
// epoll instance for the process, so that an idle connection needs no
// goroutine of its own, and takes plain TCP sockets out of Go's runtime
// poller, so that an idle one costs a descriptor and a few words.
//
// A server uses it in three steps:
//
//   - HandOver wraps the http.ResponseWriter of an upgrade: its Hijack
//     returns the socket as the poller's own net.Conn (on Linux, plain
//     TCP), whose reads and writes wait on this package's epoll, and which
//     a WebSocket library can read and write with raw system calls
//     (RawSocket, SyscallConn: the shape of ws/nonblock's Socket).
//   - Register registers such a socket, or one the runtime's poller keeps
//     (a *net.TCPConn or *net.UnixConn), for a Reader: a task that reads
//     what the socket holds without waiting and returns.
//   - The Reader ends each run with Registration.Arm; the poller runs it
//     again, on a worker (bus/internal/workers), when the socket is
//     readable. Whoever else closes the socket asks Registration.Closed
//     whether the reader waited in the poller, and if so ends it.
//
// One reader at a time runs per socket: the poller starts a reader only by
// claiming it (from armed to running, one compare-and-swap), and only Arm
// makes it armed again. The package knows nothing of WebSocket or of the
// bus: it imports neither.
package netpoll

import (
	"errors"
	"sync/atomic"

	"github.com/ovbus/ovbus/bus/internal/workers"
)

// Reader is what the poller runs, on a worker, when a registered socket is
// readable: its Run reads what the socket holds without waiting for more,
// then calls its Registration's Arm and returns (or ends the connection).
// It may wait for other things (a slow write, a lock): the poller's loop
// does not wait for it, and an unarmed socket is not read meanwhile, which
// is back-pressure on that one client only. A Reader that is a pointer
// goes into the workers.Task interface without allocating.
type Reader = workers.Task

// RoundReader is a Reader that wants to know its round: Claimed is called
// for each reader the poller claims on one wake-up (the events of one
// epoll_wait) before any of them starts, on the poller's goroutine, and
// must not wait. Exactly one Run follows each Claimed. A server uses it to
// hold back what one round's readers produce until the last is done, so
// that frames of several clients that arrived together leave in one write
// per receiver (as uWebSockets corks its sockets).
type RoundReader interface {
	Reader
	Claimed()
}

// ErrNoPoller is wrapped by Register's error, with the cause, when the
// process could not make its epoll instance.
var ErrNoPoller = errors.New("netpoll: no epoll instance")

// Registration is a socket registered with the poller for its Reader
// (Register). From Register on, the reader counts as running: the caller
// runs it (or starts it) once at once, as bytes may be there already. Its
// zero value is no registration: Closed reports false, Unregister does
// nothing, and Arm is not to be called.
type Registration struct{ p pollee }

// Arm is the running reader's last step once it has read everything the
// socket holds: the poller runs the reader again when the socket is
// readable, at once if bytes came meanwhile. It reports false when the
// socket is closed and nobody else will end the reader: the caller ends it
// then (no event will come for a closed socket).
func (r Registration) Arm() bool {
	st := r.p.state()
	st.Store(readArmed)
	if err := r.p.arm(); err != nil && st.CompareAndSwap(readArmed, readEnded) {
		return false
	}
	return true
}

// Closed is for whoever closes the socket but the reader: a closed socket
// leaves epoll silently, so a reader waiting in the poller would never run
// again. It reports true, once, when the reader was armed: the caller ends
// it. False: the reader runs (it finds the socket closed on its next
// read), has ended, or r is no registration.
func (r Registration) Closed() bool {
	return r.p != nil && r.p.state().CompareAndSwap(readArmed, readEnded)
}

// Unregister lets the socket's token go once its reader has ended and the
// socket is closed (a socket HandOver made lets it go as it closes).
func (r Registration) Unregister() {
	if r.p != nil {
		r.p.unregister()
	}
}

// The reader's states (readState).
const (
	readRunning = iota // runs: from Register on, and from each claim
	readArmed          // waits in the poller (Arm)
	readEnded          // ended while armed: a failed Arm, or Closed
)

// readState is a registration's reader state. The poller claims a reader
// (claim) before it runs it, so that events of a socket never start two.
type readState struct{ atomic.Int32 }

// claim takes an armed reader for the poller to run.
func (s *readState) claim() bool { return s.CompareAndSwap(readArmed, readRunning) }

// pollee is what a token of the poller stands for: a socket HandOver made
// (fdConn), or one the runtime's poller keeps (kept).
type pollee interface {
	// ready takes an event of the socket, on the poller's loop: it wakes
	// the waiters the event concerns and returns the reader to run,
	// claimed, or nil.
	ready(events uint32) Reader
	state() *readState
	// arm asks for the reader's next readable event; it fails once the
	// socket is closed.
	arm() error
	unregister()
	// tokenIs and setToken read and set its token (poller.add), under the
	// poller's mu.
	tokenIs() uint32
	setToken(t uint32)
}
