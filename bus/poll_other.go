//go:build !linux

package bus

// Without epoll every session's reader is a goroutine (readLoop); see
// poll_linux.go.

var pollDisabled = true

func (s *Server) poll(*session) bool { return false }
func (s *Server) arm(*session) error { panic("bus: no poller on this system") }
func (s *Server) unpoll(*session)    {}
