package bus

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// GET /health: "ok", and a line per check an embedder added (AddHealth).

type healthCheck struct {
	name  string
	check func() (state string, ok bool)
}

// AddHealth adds a line to GET /health. With no checks the body stays
// exactly "ok". Each check returns a short state ("up", "down: dial tcp
// …"); ok false makes /health answer 503. The body is then "ok" (or
// "unhealthy") followed by one line "name: state" per check.
func (s *Server) AddHealth(name string, check func() (state string, ok bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = append(s.health, healthCheck{name, check})
}

func (s *Server) serveHealth(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.closing.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("shutting down"))
		return
	}
	s.mu.Lock()
	checks := slices.Clone(s.health)
	s.mu.Unlock()
	if len(checks) == 0 {
		w.Write([]byte("ok"))
		return
	}
	var lines strings.Builder
	healthy := true
	for _, c := range checks {
		state, ok := c.check()
		healthy = healthy && ok
		fmt.Fprintf(&lines, "\n%s: %s", c.name, state)
	}
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("unhealthy" + lines.String()))
		return
	}
	w.Write([]byte("ok" + lines.String()))
}
