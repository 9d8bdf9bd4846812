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
	recovered         *prometheus.CounterVec
	linkUp            prometheus.Gauge
	linkChanges       prometheus.Counter
	peers             prometheus.Gauge
	relaxed           prometheus.Gauge
	relaxedWindows    prometheus.Counter
	relaxedFrames     prometheus.Counter
	latency           *prometheus.HistogramVec
	latPeer, latSelf  prometheus.Observer // latency's two series
}

func newMetrics() *metrics {
	return &metrics{
		outMsgs:  counter("sent_messages_total", "Frames of this node's clients sent to the cluster."),
		outBytes: counter("sent_bytes_total", "Bytes of the frames sent to the cluster (the frames only, not the NATS headers)."),
		inMsgs:   counter("received_messages_total", "Frames from the cluster put into this node's log (order total: this node's own frames back from the stream included)."),
		inBytes:  counter("received_bytes_total", "Bytes of the frames received from the cluster."),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovbus_cluster_dropped_total",
			Help: "Frames lost on their way. direction out: backpressure (the stream too slow for a sender for a second: the frame reached only this node's clients), unstored (kept for the stream beyond stream_max_age, stream_max_bytes or max_inflight while it did not answer: it reached the nodes that got it directly, not the stream), lagged (order sender: NATS too slow for this node's clients; an upper bound); direction in: behind (no longer held by the stream or the origin when this node asked; order total counts messages of the stream, each of one or more frames), gap (frames a node announced and never supplied: it died with them), malformed, publish (refused by the bus)."},
			[]string{"direction", "reason"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovbus_cluster_recovered_frames_total",
			Help: "Frames this node missed and then got: how=stream, fetched from the stream by sequence (order total); how=replay, sent again by their origin on request."},
			[]string{"how"}),
		linkUp:         gauge("link_up", "1 while this node's frames cross to the cluster (its link is up or relaxed), else 0."),
		linkChanges:    counter("link_changes_total", "How often the link went up or down."),
		peers:          gauge("peers", "Other nodes this node hears (their heartbeats)."),
		relaxed:        gauge("order_relaxed", "Order total: 1 while frames cross outside the stream's order (each sender's order kept), else 0."),
		relaxedWindows: counter("relaxed_windows_total", "Order total: how often this node's frames went directly to the other nodes because the stream did not answer."),
		relaxedFrames:  counter("relaxed_frames_total", "Order total: frames this node put into its log outside the stream's order (each sender's order kept): sent directly while the stream did not answer, replayed, or held for a missing predecessor."),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ovbus_cluster_relay_latency_seconds",
			Help:    "From the moment the origin node accepted a frame to the moment this node put it into its log. origin=peer: another node's frame (clocks of different machines included); origin=self: this node's own frame back from the stream (order total).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}},
			[]string{"origin"}),
	}
}

// counter and gauge make the node's plain collectors, named
// ovbus_cluster_NAME.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "ovbus_cluster_" + name, Help: help})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovbus_cluster_" + name, Help: help})
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
	for _, c := range []prometheus.Collector{m.outMsgs, m.outBytes, m.inMsgs, m.inBytes, m.dropped, m.recovered, m.linkUp,
		m.linkChanges, m.peers, m.relaxed, m.relaxedWindows, m.relaxedFrames, m.latency} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}
