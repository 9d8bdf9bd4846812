package cluster

import "github.com/ovbus/ovbus/cluster/clusterconf"

// The options of a node are package clusterconf's, which reads no NATS, so
// that what loads a configuration does not compile nats-server; these
// names are the same types.
type (
	// Options configures a Node; see clusterconf.Options.
	Options = clusterconf.Options
	// Order says which order the clients of a cluster see.
	Order = clusterconf.Order
	// KeyError is a validation failure of the configuration keys it names.
	KeyError = clusterconf.KeyError
)

const (
	OrderTotal  = clusterconf.OrderTotal
	OrderSender = clusterconf.OrderSender
)

// Defaults returns the options with the built-in values that do not depend
// on others (clusterconf.Defaults).
func Defaults() Options { return clusterconf.Defaults() }

// headerRoom is what the NATS headers of one frame take at most on top of
// the frame.
const headerRoom = clusterconf.HeaderRoom
