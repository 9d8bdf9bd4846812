package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ovbus/ovbus/bus"
)

// embedded is a nats-server running inside this process: no client port
// (the node talks to it without a socket), a route port for the other
// nodes, JetStream for the order "total" stream.
type embedded struct {
	srv      *server.Server
	storeDir string
	tempDir  bool
	token    string // the client port's secret
	log      *serverLog
}

// startEmbedded starts the server and waits until it is ready.
func startEmbedded(o *Options) (*embedded, error) {
	host, portStr, _ := net.SplitHostPort(o.Listen)
	port, _ := strconv.Atoi(portStr)
	routes := server.RoutesFromStr(strings.Join(o.Routes, ","))
	var routeUser string
	if o.RouteToken != "" {
		// The routes this node opens carry the token (unless their URL
		// names its own credentials); the ones it learns from the others
		// get it from Cluster.Username and Password.
		routeUser = "ovbus"
		for _, r := range routes {
			if r.User == nil {
				r.User = url.UserPassword(routeUser, o.RouteToken)
			}
		}
	}
	e := &embedded{storeDir: o.StoreDir, log: newServerLog(o.Logger.With("nats", o.NodeName))}
	if e.storeDir == "" {
		d, err := os.MkdirTemp("", "ovbus-cluster-")
		if err != nil {
			return nil, fmt.Errorf("cluster: store directory: %w", err)
		}
		e.storeDir, e.tempDir = d, true
	}
	token, err := randomToken()
	if err != nil {
		e.cleanup()
		return nil, err
	}
	e.token = token
	payload := int32(o.MaxMsgSize + headerRoom)
	sopts := &server.Options{
		ServerName: o.NodeName,
		// The node connects to a client port on loopback, on a free
		// port, closed by a random token (node.go says why not
		// in-process; nats-server also starts routing only once its
		// client port listens).
		Host:          "127.0.0.1",
		Port:          server.RANDOM_PORT,
		Authorization: token,
		NoSigs:        true, // ovbus serve owns the signals
		NoLog:         true,
		MaxPayload:    payload,
		MaxPending:    max(64<<20, 4*int64(payload)),
		Cluster: server.ClusterOpts{
			Name:      "ovbus-" + o.Name,
			Host:      host,
			Port:      port,
			Advertise: o.Advertise,
			Username:  routeUser,
			Password:  o.RouteToken,
			// No s2 on the routes: on a LAN (nats-server's s2_auto picks
			// "uncompressed" under 10 ms of round trip anyway) it costs
			// CPU per message and compresses nothing.
			Compression: server.CompressionOpts{Mode: server.CompressionOff},
		},
		Routes:             routes,
		JetStream:          o.Order == OrderTotal,
		JetStreamMaxMemory: 2*o.StreamMaxBytes + 64<<20,
		StoreDir:           e.storeDir,
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		e.cleanup()
		return nil, fmt.Errorf("cluster: embedded NATS: %w", err)
	}
	srv.SetLoggerV2(e.log, false, false, false)
	e.srv = srv
	srv.Start()
	for deadline := time.Now().Add(10 * time.Second); !srv.ReadyForConnections(50 * time.Millisecond); {
		err := e.log.fatal()
		if err == nil && time.Now().After(deadline) {
			err = errors.New("did not start in 10s")
		}
		if err != nil {
			srv.Shutdown()
			e.cleanup()
			return nil, fmt.Errorf("cluster: embedded NATS on %s: %w", o.Listen, err)
		}
	}
	return e, nil
}

// peers reports how many other nodes the server has routes to.
func (e *embedded) peers() int { return e.srv.NumRemotes() }

// shutdown stops the server (stepping down the stream leaders it holds,
// so that the others elect new ones at once) and removes a temporary store.
func (e *embedded) shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.log.flush()
	e.cleanup()
}

func (e *embedded) cleanup() {
	if e.tempDir {
		os.RemoveAll(e.storeDir)
	}
}

// serverLog passes nats-server's log lines to slog: its notices (many at
// start) at DEBUG, warnings and errors as such. The first fatal error is
// kept for startEmbedded.
//
// A link error repeats as long as its cause lasts (a peer refusing this
// node's route token, about once a second), so its warnings and errors are
// rate-limited as the bus's are, to serverLogLimit lines of a kind per
// serverLogWindow, with one line saying how many were left out. The kind is
// the message without the connection nats-server puts before it
// ("127.0.0.1:6222 - rid:5 - "), which goes into the attribute conn.
type serverLog struct {
	l       *slog.Logger
	flush   func()
	mu      sync.Mutex
	fatalEr error
}

const (
	serverLogLimit  = 1
	serverLogWindow = time.Minute
)

func newServerLog(l *slog.Logger) *serverLog {
	h, flush := bus.RateLimitWarnings(l.Handler(), serverLogLimit, serverLogWindow)
	return &serverLog{l: slog.New(h), flush: flush}
}

// splitConn splits "127.0.0.1:6222 - rid:5 - authentication error" into
// the connection and the message.
func splitConn(msg string) (conn, rest string) {
	i := strings.Index(msg, " - ")
	if i <= 0 {
		return "", msg
	}
	tail := msg[i+3:]
	j := strings.Index(tail, " - ")
	if j <= 0 {
		return "", msg
	}
	id := tail[:j]
	c := strings.IndexByte(id, ':')
	if c <= 0 || c == len(id)-1 || strings.Trim(id[c+1:], "0123456789") != "" || strings.Trim(id[:c], "abcdefghijklmnopqrstuvwxyz") != "" {
		return "", msg
	}
	return msg[:i+3+j], tail[j+3:]
}

func (s *serverLog) fatal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatalEr
}

// quiet are nats-server lines that repeat while a peer is away, or say
// what the node's own link state already says: DEBUG, not WARNING/ERROR
// (the node logs each change of its link once).
var quiet = []string{
	"Error trying to connect to route",
	"Waiting for routing to be established",
	"JetStream has not established contact with a meta leader",
	"Maximum payloads over",
	"JetStream cluster no metadata leader",
	"Healthcheck failed",
	"RAFT [",
	"is not current",
	"Metalayer blocking snapshot",
}

func (s *serverLog) at(level slog.Level, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	for _, q := range quiet {
		if strings.Contains(msg, q) {
			level = slog.LevelDebug
			break
		}
	}
	if conn, rest := splitConn(msg); conn != "" {
		s.l.Log(context.Background(), level, rest, "conn", conn)
		return
	}
	s.l.Log(context.Background(), level, msg)
}

func (s *serverLog) Noticef(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s *serverLog) Warnf(format string, v ...any)   { s.at(slog.LevelWarn, format, v...) }
func (s *serverLog) Errorf(format string, v ...any)  { s.at(slog.LevelError, format, v...) }
func (s *serverLog) Debugf(format string, v ...any)  {}
func (s *serverLog) Tracef(format string, v ...any)  {}
func (s *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	s.l.Error(msg)
	s.mu.Lock()
	if s.fatalEr == nil {
		s.fatalEr = fmt.Errorf("%s", msg)
	}
	s.mu.Unlock()
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	return hex.EncodeToString(b), nil
}
