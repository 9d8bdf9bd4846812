//go:build !linux

package bus

import "net/http"

// Without epoll every session's reader is a goroutine (readLoop); see
// poll_linux.go.

var pollDisabled = true

// handOverWriter returns w: sockets stay in the runtime's poller.
func handOverWriter(w http.ResponseWriter) http.ResponseWriter { return w }

func (s *Server) poll(*session) bool { return false }
func (s *Server) arm(*session) error { panic("bus: no poller on this system") }
func (s *Server) unpoll(*session)    {}
