// Package clusterconf holds the options of a cluster node: their fields,
// built-in values and checks. It is apart from package cluster so that what
// reads a configuration (package config) does not compile NATS; package
// cluster names the same types.
package clusterconf

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Order says which order the clients of a cluster see.
type Order string

const (
	// OrderTotal (the default): every client on every node sees every frame
	// in one and the same order, as on a single node. A JetStream stream is
	// the sequencer; a frame reaches even its own node's clients only after
	// the stream has stored it.
	OrderTotal Order = "total"
	// OrderSender: core NATS, the lowest latency. Each sender's frames keep
	// the order it sent them in, everywhere; frames of senders on different
	// nodes may be seen in different orders on different nodes (see the
	// package documentation).
	OrderSender Order = "sender"
)

// totalInside: this build can run order "total" with NATS inside ovbus.
// That needs nats-server's clustered JetStream, which stops the process on
// 32-bit systems (an unaligned 64-bit atomic operation in nats-server
// v2.15, on every statistics heartbeat of a node in the JetStream group).
// An external NATS, or order "sender", works there.
var totalInside = strconv.IntSize == 64

// TotalInside reports whether this build can run order "total" with NATS
// inside ovbus (Validate refuses it otherwise): false on 32-bit systems.
func TotalInside() bool { return totalInside }

// Built-in values for zero Options fields.
const (
	DefaultName           = "ovbus"
	DefaultStreamMaxAge   = time.Minute
	DefaultStreamMaxBytes = 64 << 20
	DefaultMaxInflight    = 16384
	// HeaderRoom is what the NATS headers of one frame take at most on top
	// of the frame: a server's max_payload must leave it.
	HeaderRoom = 512
	// maxEmbeddedPayload is the largest max_payload nats-server accepts.
	maxEmbeddedPayload = 64 << 20
)

// Options configures a node (cluster.Node). Exactly one of NATSURL (an existing NATS
// server or cluster) and Listen/Routes (a nats-server embedded in this
// process) must be set.
type Options struct {
	// Name is the cluster's name: nodes with the same name form one bus. It
	// prefixes the NATS subjects and names the JetStream stream, so it is
	// one token of letters, digits, '-' and '_'. Default DefaultName.
	Name string
	// NodeName tags the frames this node's clients send (a NATS header,
	// never in the frame) and names the embedded server. Every node of a
	// cluster needs its own; "" means "<hostname>-<port>", the port being
	// Listen's, else DefaultPort.
	NodeName string
	// DefaultPort is the bus's port, used in the default NodeName of a node
	// on an external NATS.
	DefaultPort int
	// Order is OrderTotal ("" too) or OrderSender.
	Order Order

	// NATSURL lists the external servers, comma-separated
	// ("nats://a:4222,nats://b:4222").
	NATSURL string
	// User and Password, Token, or CredsFile (a JWT + nkey file)
	// authenticate to the external server; at most one way.
	User, Password string
	Token          string
	CredsFile      string
	// TLSCA verifies the external server's certificate (PEM); TLSCert and
	// TLSKey are this node's client certificate. With any of them set the
	// connection uses TLS.
	TLSCA, TLSCert, TLSKey string

	// Listen is the address ("host:port") the embedded server takes routes
	// from the other nodes on.
	Listen string
	// Routes are the other nodes' Listen addresses, as nats://host:port.
	Routes []string
	// Advertise is the host:port at which the other nodes reach Listen,
	// when that is not the address they see (NAT, a proxy): the nodes tell
	// each other where the others are, and complete the mesh by themselves.
	Advertise string
	// RouteToken, when set, closes the route port: a node joins only with
	// the same token (nats-server's cluster authorization, user "ovbus"
	// and this token as its password, sent on the routes this node opens
	// and required on the ones it accepts). Give every node the same one.
	// "" leaves the route port open to any node that reaches it.
	RouteToken string
	// StoreDir holds the embedded JetStream's cluster state (the streams
	// themselves are in memory); "" means a temporary directory, removed on
	// Shutdown.
	StoreDir string

	// Replicas is the number of copies of the stream (order "total"): 3
	// survives the loss of one node. 0 means the number of nodes named by
	// Routes plus this one, at most 3, for the embedded server; 1 for an
	// external one.
	Replicas int
	// Lead asks, each time this node's link comes up, that the stream's
	// leader be this node (order "total"). A frame is sequenced by the
	// leader: on the leader's node it crosses one route fewer each way, so
	// set it on the node whose clients send the most (the one with the
	// skills and the intent service), on one node only. Off, the cluster
	// places the leader where it likes.
	Lead bool
	// StreamMaxAge and StreamMaxBytes bound the stream (memory storage)
	// and each node's ring of its own recent frames (replays): how far
	// behind a node may fall, or how long it may be cut off, and still get
	// every frame. Defaults: DefaultStreamMaxAge, and DefaultStreamMaxBytes
	// or 2 × MaxMsgSize when that is larger.
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
	// MaxInflight bounds the frames of this node's clients that the stream
	// has not confirmed yet (order "total"): queued, on their way, or kept
	// while the stream does not answer. While it answers, the messages in
	// flight are bounded by a sixteenth of it (each carries one or more
	// frames), and a sender whose frame finds MaxInflight frames queued
	// waits up to a second for room, after which the frame reaches only
	// this node's clients ("backpressure"). While it does not, the oldest
	// frames kept beyond MaxInflight are given up for the stream
	// ("unstored"; they reached the nodes that got them directly). Default
	// DefaultMaxInflight.
	MaxInflight int
	// MaxPendingMessages and MaxPendingBytes bound what this node has
	// received from the cluster and not yet put into its log (nats.go's
	// pending limits). What is dropped beyond them is asked for again.
	// Use the bus's MaxQueueMessages and MaxQueueBytes.
	MaxPendingMessages int
	MaxPendingBytes    int64

	// MaxMsgSize is the bus's largest frame, in bytes: every frame up to it
	// must cross. The embedded server is configured for it; an external
	// server with a smaller max_payload is an error.
	MaxMsgSize int64

	// Logger receives the cluster's log lines; nil means slog.Default().
	Logger *slog.Logger
}

// External reports whether the node connects to an existing NATS.
func (o *Options) External() bool { return o.NATSURL != "" }

// Enabled reports whether the options ask for a cluster at all: NATSURL,
// Listen or Routes is set. Clustering is off by default.
func (o *Options) Enabled() bool { return o.NATSURL != "" || o.Listen != "" || len(o.Routes) > 0 }

// Defaults returns the options with the built-in values that do not depend
// on others: what a configuration shows for keys no layer set. (NodeName,
// Replicas and StreamMaxBytes stay 0: they are derived at New.)
func Defaults() Options {
	return Options{Name: DefaultName, Order: OrderTotal, StreamMaxAge: DefaultStreamMaxAge, MaxInflight: DefaultMaxInflight}
}

// WithDefaults returns a copy of o with every zero field set, as a node
// runs it.
func (o Options) WithDefaults() Options {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Order == "" {
		o.Order = OrderTotal
	}
	if o.NodeName == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "ovbus"
		}
		port := strconv.Itoa(o.DefaultPort)
		if _, p, err := net.SplitHostPort(o.Listen); err == nil && !o.External() {
			port = p
		}
		o.NodeName = sanitizeName(host) + "-" + port
	}
	if o.Replicas == 0 {
		if o.External() {
			o.Replicas = 1
		} else {
			o.Replicas = min(3, len(o.Routes)+1)
		}
	}
	if o.StreamMaxAge == 0 {
		o.StreamMaxAge = DefaultStreamMaxAge
	}
	if o.StreamMaxBytes == 0 {
		o.StreamMaxBytes = max(DefaultStreamMaxBytes, 2*o.MaxMsgSize)
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.MaxPendingMessages == 0 {
		o.MaxPendingMessages = 100000
	}
	if o.MaxPendingBytes == 0 {
		o.MaxPendingBytes = max(64<<20, 2*o.MaxMsgSize)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Routes = append([]string(nil), o.Routes...)
	return o
}

// sanitizeName keeps the characters a node name may have.
func sanitizeName(s string) string {
	return strings.Map(func(r rune) rune {
		if validNameRune(r) {
			return r
		}
		return '-'
	}, s)
}

func validNameRune(r rune) bool {
	return r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !validNameRune(r) {
			return false
		}
	}
	return true
}

// KeyError is a validation failure of the configuration keys it names
// (cluster.name, cluster.nats_url…).
type KeyError struct {
	Keys []string
	Msg  string
}

func (e *KeyError) Error() string { return strings.Join(e.Keys, ", ") + ": " + e.Msg }

func keyErr(msg string, keys ...string) error { return &KeyError{Keys: keys, Msg: msg} }

// Validate checks the options, field against field. Its errors are
// *KeyError values naming the websocket.cluster keys at fault.
func (o *Options) Validate() error {
	var errs []error
	if o.Name != "" && !validName(o.Name) {
		errs = append(errs, keyErr(fmt.Sprintf("expected a name of letters, digits, '-' and '_' (at most 64), got %q", o.Name), "cluster.name"))
	}
	if o.NodeName != "" && !validName(o.NodeName) {
		errs = append(errs, keyErr(fmt.Sprintf("expected a name of letters, digits, '-' and '_' (at most 64), got %q", o.NodeName), "cluster.node_name"))
	}
	switch o.Order {
	case "", OrderTotal, OrderSender:
	default:
		errs = append(errs, keyErr(fmt.Sprintf(`expected "total" or "sender", got %q`, o.Order), "cluster.order"))
	}
	embedded := o.Listen != "" || len(o.Routes) > 0
	switch {
	case o.NATSURL != "" && embedded:
		errs = append(errs, keyErr("set either nats_url (an existing NATS) or listen and routes (NATS inside ovbus), not both",
			"cluster.nats_url", "cluster.listen", "cluster.routes"))
	case o.NATSURL == "" && !embedded:
		errs = append(errs, keyErr("set nats_url (an existing NATS) or listen (NATS inside ovbus, with routes to the other nodes)",
			"cluster.nats_url", "cluster.listen"))
	case o.NATSURL == "" && o.Listen == "":
		errs = append(errs, keyErr("routes need listen: the address this node takes routes on", "cluster.listen", "cluster.routes"))
	}
	if o.NATSURL != "" {
		for _, u := range strings.Split(o.NATSURL, ",") {
			if err := checkURL(strings.TrimSpace(u), "nats", "tls", "ws", "wss"); err != nil {
				errs = append(errs, keyErr(err.Error(), "cluster.nats_url"))
			}
		}
		auth := 0
		if o.User != "" || o.Password != "" {
			auth++
			if o.User == "" {
				errs = append(errs, keyErr("password without user", "cluster.user", "cluster.password"))
			}
		}
		if o.Token != "" {
			auth++
		}
		if o.CredsFile != "" {
			auth++
		}
		if auth > 1 {
			errs = append(errs, keyErr("set one way to authenticate", "cluster.user", "cluster.token", "cluster.creds"))
		}
		if (o.TLSCert == "") != (o.TLSKey == "") {
			errs = append(errs, keyErr("a client certificate needs both files", "cluster.tls_cert", "cluster.tls_key"))
		}
	} else {
		for k, v := range map[string]string{"cluster.user": o.User, "cluster.password": o.Password, "cluster.token": o.Token,
			"cluster.creds": o.CredsFile, "cluster.tls_ca": o.TLSCA, "cluster.tls_cert": o.TLSCert, "cluster.tls_key": o.TLSKey} {
			if v != "" && embedded {
				errs = append(errs, keyErr("applies only with nats_url (an external NATS)", k))
			}
		}
	}
	if o.RouteToken != "" && o.External() {
		errs = append(errs, keyErr("applies only with listen (NATS inside ovbus); protect an external NATS in its own configuration", "cluster.route_token"))
	}
	if embedded && o.Order != OrderSender && !totalInside {
		errs = append(errs, keyErr(`expected "sender" with NATS inside ovbus on a 32-bit system: order "total" needs nats-server's clustered JetStream, which fails there; or set nats_url to a NATS on a 64-bit machine`, "cluster.order"))
	}
	if o.Lead && o.Order == OrderSender {
		errs = append(errs, keyErr(`applies only with order "total" (order "sender" has no stream)`, "cluster.lead", "cluster.order"))
	}
	if o.Listen != "" {
		if _, p, err := net.SplitHostPort(o.Listen); err != nil {
			errs = append(errs, keyErr(fmt.Sprintf("expected host:port such as \"0.0.0.0:6222\", got %q", o.Listen), "cluster.listen"))
		} else if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			errs = append(errs, keyErr(fmt.Sprintf("expected a port 1-65535 in %q", o.Listen), "cluster.listen"))
		}
	}
	if o.Advertise != "" {
		if _, _, err := net.SplitHostPort(o.Advertise); err != nil || o.External() {
			errs = append(errs, keyErr(fmt.Sprintf("expected host:port with listen, got %q", o.Advertise), "cluster.advertise"))
		}
	}
	for _, r := range o.Routes {
		if err := checkURL(r, "nats"); err != nil {
			errs = append(errs, keyErr(err.Error(), "cluster.routes"))
		}
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		errs = append(errs, keyErr(fmt.Sprintf("expected 1 to 5 copies of the stream, got %d", o.Replicas), "cluster.replicas"))
	}
	if o.StreamMaxAge < 0 {
		errs = append(errs, keyErr("must not be negative", "cluster.stream_max_age"))
	}
	if o.StreamMaxBytes < 0 || (o.StreamMaxBytes > 0 && o.StreamMaxBytes < o.MaxMsgSize+HeaderRoom) {
		errs = append(errs, keyErr(fmt.Sprintf("%d bytes cannot hold one frame of max_msg_size (%d bytes)", o.StreamMaxBytes, o.MaxMsgSize),
			"cluster.stream_max_bytes", "max_msg_size"))
	}
	if o.MaxInflight < 0 {
		errs = append(errs, keyErr("must not be negative", "cluster.max_inflight"))
	}
	if !o.External() && o.MaxMsgSize+HeaderRoom > maxEmbeddedPayload {
		errs = append(errs, keyErr(fmt.Sprintf("%d bytes is more than the embedded NATS can carry (%d bytes with its headers)", o.MaxMsgSize, maxEmbeddedPayload-HeaderRoom),
			"max_msg_size", "cluster.listen"))
	}
	return errors.Join(errs...)
}

// checkURL checks one server URL.
func checkURL(s string, schemes ...string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("expected a URL such as nats://host:4222, got %q", s)
	}
	for _, sc := range schemes {
		if u.Scheme == sc {
			return nil
		}
	}
	return fmt.Errorf("%q: the scheme must be one of %s", s, strings.Join(schemes, ", "))
}
