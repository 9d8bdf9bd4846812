package main

import (
	"context"
	"log/slog"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/cluster"
	"github.com/ovbus/ovbus/config"
)

// newClusterNode starts the cluster node the configuration asks for
// (websocket.cluster), or returns nil when clustering is off.
func newClusterNode(cfg *config.Config, logger *slog.Logger) (*cluster.Node, error) {
	o := cfg.ClusterOptions()
	if !o.Enabled() {
		return nil, nil
	}
	o.Logger = logger
	return cluster.New(o)
}

// withSequencer sets the node's sequencer in the bus's options.
func withSequencer(o bus.Options, node *cluster.Node) bus.Options {
	if node != nil {
		o.Sequencer = node.Sequencer()
	}
	return o
}

// stopClusterNode drains the node after the bus has shut down, so that what
// the bus accepted before still reaches the other nodes.
func stopClusterNode(ctx context.Context, node *cluster.Node, logger *slog.Logger) {
	if node == nil {
		return
	}
	if err := node.Shutdown(ctx); err != nil {
		logger.Warn("Cluster drain did not finish", "error", err)
	}
}
