package bus

import (
	"net/http"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the bus's Prometheus metrics, in a registry of the Server's
// own. Hot-path counters are resolved once, so counting is an atomic add.
type metrics struct {
	reg *prometheus.Registry

	connections      prometheus.Gauge
	connectionsTotal prometheus.Counter
	framesIn         prometheus.Counter
	bytesIn          prometheus.Counter
	framesOut        prometheus.Counter
	bytesOut         prometheus.Counter
	latency          prometheus.Histogram
	inprocDropped    prometheus.Counter

	rejectedVec *prometheus.CounterVec
	rejectedBy  map[string]prometheus.Counter
	closesVec   *prometheus.CounterVec
	closesBy    map[string]prometheus.Counter
	laggedVec   *prometheus.CounterVec
	refusedBy   map[string]prometheus.Counter // connections refused with 401, by cause (access.go)
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ovbus", Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	m.connections = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ovbus", Name: "connections", Help: "Connected WebSocket clients."})
	m.reg.MustRegister(m.connections)
	m.connectionsTotal = counter("connections_total", "WebSocket clients accepted since start.")
	m.framesIn = counter("frames_received_total", "Messages received from clients (and emitted in-process).")
	m.bytesIn = counter("bytes_received_total", "Payload bytes of the messages received.")
	m.framesOut = counter("frames_sent_total", "Messages written to clients (one per delivery).")
	m.bytesOut = counter("bytes_sent_total", "Frame bytes written to clients.")
	m.inprocDropped = counter("inprocess_dropped_total", "Messages the in-process handlers missed by falling behind the queue bounds.")
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "ovbus", Name: "relay_latency_seconds",
		Help:    "Time from a message's arrival to the write of the batch carrying it to a client (observed once per batch, for its oldest message).",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18), // 25µs .. ~3.3s
	})
	m.reg.MustRegister(m.latency)
	m.rejectedVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ovbus", Name: "rejected_total",
		Help: "Frames dropped and connections refused, by reason."}, []string{"reason"})
	m.closesVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ovbus", Name: "closes_total",
		Help: "Closed client connections, by reason."}, []string{"reason"})
	m.laggedVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ovbus", Name: "followers_lagged_total",
		Help: "Followers (Server.Follow) cut for falling behind the queue bounds, by name."}, []string{"follower"})
	m.reg.MustRegister(m.rejectedVec, m.closesVec, m.laggedVec)
	m.rejectedBy = map[string]prometheus.Counter{}
	for _, r := range []string{rejectMalformedCarrier, rejectPermission, rejectOrigin, rejectAuth, rejectHandshake, rejectShuttingDown, rejectMaxConnections, rejectRateLimited,
		rejectTLSTimeout, rejectTLSAborted, rejectTLSNotTLS, rejectTLSError} {
		m.rejectedBy[r] = m.rejectedVec.WithLabelValues(r)
	}
	m.closesBy = map[string]prometheus.Counter{}
	for _, r := range []string{reasonSlowConsumer, reasonOversize, reasonProtocolError, reasonOverloaded, reasonRateLimited, reasonClientClose, reasonDisconnect, reasonWriteError, reasonShutdown} {
		m.closesBy[r] = m.closesVec.WithLabelValues(r)
	}
	m.refusedBy = registerAccessMetrics(m.reg, s)
	m.reg.MustRegister(
		// Counted by the log as it appends (hub.relayed), under its lock,
		// instead of one more atomic add per message here.
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ovbus", Name: "messages_relayed_total",
			Help: "Messages appended to the fan-out log."}, func() float64 { return float64(s.hub.relayed.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ovbus", Name: "log_messages",
			Help: "Messages held in the fan-out log."}, func() float64 { n, _ := s.hub.retained(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ovbus", Name: "log_bytes",
			Help: "Bytes the fan-out log holds: its encoded frames, each shared segment counted whole while it holds a retained frame."}, func() float64 { _, b := s.hub.retained(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ovbus", Name: "departed_writers",
			Help: "Closed clients whose writer is still finishing a write; each is let go when its write ends (within write_timeout)."}, func() float64 { return float64(s.hub.departedCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ovbus", Name: "inflight_bytes",
			Help: "Bytes held of the messages being read from clients (max_inflight_bytes bounds them)."}, func() float64 { return float64(s.inflight.InUse()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ovbus", Name: "inflight_refused_total",
			Help: "Messages refused, and their senders closed with 1013, because max_inflight_bytes was taken."}, func() float64 { return float64(s.inflight.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ovbus", Name: "reader_lingers_total",
			Help: "Times a reader waited a moment for more frames of a client that sends them back to back, so that they are read and written in batches."}, func() float64 { return float64(s.hub.lingers.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ovbus", Name: "memory_releases_total",
			Help: "Times the bus returned freed memory to the OS after a burst of large messages drained max_inflight_bytes or a burst of handshakes ended (rate-limited: at most 2 % of the time)."}, func() float64 { return float64(s.mem.count.Load()) }),
		// The default Go metrics, plus go_gc_heap_live_bytes: the heap the
		// last collection found live, which is what the bus's memory
		// bounds are about (heap_alloc counts garbage not yet collected);
		// and go_memory_classes_*: what the runtime has mapped, by use
		// (objects, free heap, stacks, its own metadata), which says where
		// a process's RSS beyond the live heap went.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/(gc/heap/live|memory/classes/.*):bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) connected() {
	m.connections.Inc()
	m.connectionsTotal.Inc()
}

func (m *metrics) disconnected() { m.connections.Dec() }

func (m *metrics) received(n int) {
	m.framesIn.Inc()
	m.bytesIn.Add(float64(n))
}

// sent counts one batch: n frames, size bytes, the oldest one published
// latencyNS ago.
func (m *metrics) sent(n int, size int64, latencyNS int64) {
	m.framesOut.Add(float64(n))
	m.bytesOut.Add(float64(size))
	m.latency.Observe(float64(latencyNS) / 1e9)
}

func (m *metrics) rejected(reason string) {
	if c, ok := m.rejectedBy[reason]; ok {
		c.Inc()
		return
	}
	m.rejectedVec.WithLabelValues(reason).Inc()
}

func (m *metrics) closed(reason string) {
	if c, ok := m.closesBy[reason]; ok {
		c.Inc()
		return
	}
	m.closesVec.WithLabelValues(reason).Inc()
}

// authRefused counts a connection refused with 401 for cause.
func (m *metrics) authRefused(cause string) { m.refusedBy[cause].Inc() }

func (m *metrics) followerLagged(name string) { m.laggedVec.WithLabelValues(name).Inc() }

// Metrics returns the registry served at /metrics, for packages that add
// their own collectors.
func (s *Server) Metrics() *prometheus.Registry { return s.m.reg }

// MetricsHandler returns the Prometheus handler of the bus's metrics, for
// embedders that serve it themselves (Start serves it on MetricsAddress).
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{})
}
