package bus

import "github.com/prometheus/client_golang/prometheus"

// The metrics of access control: why connections were refused, and who is
// connected, by identity (SessionInfo.Identity: a token's name or an
// address rule, never a token). An identity is a rule of the
// configuration, not a client, so the label's values stay few.

var clientsDesc = prometheus.NewDesc("ovbus_clients", "Connected WebSocket clients, by the rule that let them in: token:NAME, network:CIDR, loopback, unix or anyone.", []string{"identity"}, nil)

// clientsByIdentity counts the connected clients by identity when scraped.
type clientsByIdentity struct{ s *Server }

func (c clientsByIdentity) Describe(ch chan<- *prometheus.Desc) { ch <- clientsDesc }

func (c clientsByIdentity) Collect(ch chan<- prometheus.Metric) {
	n := map[string]int{}
	c.s.mu.Lock()
	for _, sc := range c.s.sessions {
		if sc.acc != nil {
			n[sc.acc.identity]++
		}
	}
	c.s.mu.Unlock()
	for id, k := range n {
		ch <- prometheus.MustNewConstMetric(clientsDesc, prometheus.GaugeValue, float64(k), id)
	}
}

// registerAccessMetrics registers them in reg and returns the refusal
// counters by cause.
func registerAccessMetrics(reg *prometheus.Registry, s *Server) map[string]prometheus.Counter {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ovbus", Name: "auth_refused_total",
		Help: "Connections refused with 401 (also counted in ovbus_rejected_total{reason=\"auth\"}), by cause: address (no token, and the address rules refuse it), unknown_token, empty_token, long_token, repeated_token, malformed_token."},
		[]string{"cause"})
	reg.MustRegister(vec, clientsByIdentity{s})
	by := make(map[string]prometheus.Counter, len(refusedCauses))
	for _, c := range refusedCauses {
		by[c] = vec.WithLabelValues(c)
	}
	return by
}
