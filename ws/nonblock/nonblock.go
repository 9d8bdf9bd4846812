// Package nonblock has the calls of a ws.Conn that never wait for the
// socket, for a server that waits for readiness itself (one epoll loop for
// every connection) instead of parking a goroutine on each.
//
// Such a server reads a connection with NextMessage when its socket is
// readable, on a goroutine of its own choosing, until ErrWouldBlock; between
// messages an idle connection then holds no goroutine and no read buffer.
// It writes with TryWrite on whatever goroutine has the frames in hand, and
// hands the write to a goroutine that may wait only when the socket is full:
// the Write that TryWrite returns says so (Pending) and carries the rest
// (Finish).
//
// Both need a socket ws can read and write with raw system calls: a plain
// *net.TCPConn or *net.UnixConn on Linux, or a Socket of the server's own
// (Supported). Everything else about the Conn is as package ws documents:
// reads are for one goroutine at a time, writes are serialised by the Conn,
// and a TryWrite is one of its writes.
package nonblock

import (
	"context"
	"net"
	"syscall"

	"github.com/ovbus/ovbus/ws"
	"github.com/ovbus/ovbus/ws/internal/connx"
)

// ErrWouldBlock is returned by NextMessage when the socket holds no more
// bytes for now. The connection is intact; call again once the socket is
// readable.
var ErrWouldBlock = connx.ErrWouldBlock

// Socket is a net.Conn of a server's own (a socket it took out of Go's
// runtime poller, say) that ws may read and write with raw system calls:
// RawSocket reports true, and its SyscallConn behaves like net's: Read and
// Write call f with the descriptor until it returns true, waiting for
// readiness and honouring the deadlines in between, and its Read and Write
// are the socket's own. A Conn made over such a net.Conn (ws.UpgradeConn,
// or an http.Hijacker that returns it) is Supported. (A type that merely
// embeds a *net.TCPConn has SyscallConn too, but its Read may be its own:
// it is not taken for a socket.)
type Socket interface {
	net.Conn
	syscall.Conn
	RawSocket() bool
}

// Supported reports whether c can be read and written without waiting: its
// connection is a plain TCP or Unix socket, or a Socket, on Linux. When it
// is not, NextMessage returns an error and TryWrite writes nothing.
func Supported(c *ws.Conn) bool { return connx.Supported(c) }

// NextMessage is c.NextMessage that reads what the socket holds without
// waiting for more: it returns ErrWouldBlock when that is not yet a whole
// message, and keeps the part already read for the next call; when it holds
// none, the message and receive buffers go back to ws's pools. All else is
// c.NextMessage's: a ping is answered (the pong's write may wait up to the
// write deadline), and a protocol error is answered with its close code and
// a linger of up to a second. So call it from a goroutine that may wait
// that long, not from the loop that waits for readiness.
func NextMessage(c *ws.Conn) (ws.Opcode, []byte, error) {
	op, p, err := connx.NextMessage(c)
	return ws.Opcode(op), p, err
}

// Write is what TryWrite did with a run of frames: how many bytes the socket
// took, and, when it could not take them all at once, whether the rest is
// pending.
type Write struct {
	c    *ws.Conn
	rest []byte
	n    int
	held bool
}

// N is how many bytes of the frames the socket took.
func (w Write) N() int { return w.n }

// Pending reports that the socket took part of the frames (N bytes, perhaps
// part of a frame; or all of them, with a control frame queued meanwhile)
// and that the Conn keeps its write lock for the rest: Finish must be called
// before anything else can be written on the connection.
func (w Write) Pending() bool { return w.held }

// Finish writes the rest of a pending write, waiting for the socket as
// c.WritePreparedFrames does (ctx and the write deadline apply), then the
// control frames queued meanwhile, and lets the write lock go. It may be
// called from any goroutine, once. For a Write that is not pending it does
// nothing and returns nil.
func (w Write) Finish(ctx context.Context) error {
	if !w.held {
		return nil
	}
	return connx.Finish(w.c, ctx, w.rest)
}

// TryWrite writes frames, prepared frames encoded back to back (as
// c.WritePreparedFrames takes them), with system calls that never wait:
//
//   - all written: N() == len(frames), not Pending;
//   - nothing written, nothing changed (N() == 0, not Pending, no error):
//     another write holds the connection, frames or control frames are
//     queued before these, the socket is full, or c is not Supported.
//     Write them with c.WritePreparedFrames;
//   - Pending: the socket took N() bytes; call Finish for the rest;
//   - an error: as c.WritePreparedFrames's; nothing is pending.
//
// Only a server connection sends prepared frames. The write deadline does
// not apply (nothing waits); it applies to Finish.
func TryWrite(c *ws.Conn, frames []byte) (Write, error) {
	n, held, err := connx.TryWrite(c, frames)
	w := Write{c: c, n: n, held: held}
	if held {
		w.rest = frames[n:]
	}
	return w, err
}
