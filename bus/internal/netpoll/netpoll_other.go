//go:build !linux

package netpoll

import (
	"errors"
	"net"
	"net/http"
)

// Supported reports whether this system has the poller: without epoll it
// has not, and every socket stays in the runtime's poller, read by a
// goroutine of its own (see poller_linux.go).
const Supported = false

// Register fails with errors.ErrUnsupported: there is no poller here.
func Register(net.Conn, Reader) (Registration, error) {
	return Registration{}, errors.ErrUnsupported
}

// HandOver returns w: sockets stay in the runtime's poller.
func HandOver(w http.ResponseWriter) http.ResponseWriter { return w }
