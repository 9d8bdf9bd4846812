package cluster

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the node's collectors, registered on the bus's registry.
type metrics struct {
	outMsgs, outBytes prometheus.Counter
	inMsgs, inBytes   prometheus.Counter
	dropped           *prometheus.CounterVec
	linkUp            prometheus.Gauge
	linkChanges       prometheus.Counter
	latency           *prometheus.HistogramVec
	latPeer, latSelf  prometheus.Observer // latency's two series
}

func newMetrics() *metrics {
	return &metrics{
		outMsgs: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovbus_cluster_sent_messages_total",
			Help: "Frames of this node's clients sent to the cluster (order total: to the stream)."}),
		outBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovbus_cluster_sent_bytes_total",
			Help: "Bytes of the frames sent to the cluster (the frames only, not the NATS headers)."}),
		inMsgs: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovbus_cluster_received_messages_total",
			Help: "Frames received from the cluster (order total: everything read from the stream, this node's own frames included)."}),
		inBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovbus_cluster_received_bytes_total",
			Help: "Bytes of the frames received from the cluster."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovbus_cluster_dropped_total",
			Help: "Frames that did not cross. direction out: link_down, backpressure and no_stream frames still reached this node's clients, unconfirmed ones may have reached every node, lagged ones (order sender) reached only this node's clients; direction in: behind (order total: messages of the stream, each of one or more frames, this node did not get while cut off or over the pending limits), slow (order sender: NATS messages over the pending limits), malformed, publish (refused by the bus)."},
			[]string{"direction", "reason"}),
		linkUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovbus_cluster_link_up",
			Help: "1 while this node's link to the cluster is up, else 0."}),
		linkChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovbus_cluster_link_changes_total",
			Help: "How often the link went up or down."}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ovbus_cluster_relay_latency_seconds",
			Help:    "From the moment the origin node accepted a frame to the moment this node put it into its log. origin=peer: another node's frame (clocks of different machines included); origin=self: this node's own frame back from the stream (order total).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}},
			[]string{"origin"}),
	}
}

func (m *metrics) observers() *metrics {
	m.latPeer, m.latSelf = m.latency.WithLabelValues("peer"), m.latency.WithLabelValues("self")
	return m
}

func (m *metrics) register(r *prometheus.Registry) error {
	if r == nil {
		return nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.outMsgs, m.outBytes, m.inMsgs, m.inBytes, m.dropped, m.linkUp, m.linkChanges, m.latency} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}
