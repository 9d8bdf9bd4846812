package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The floor's three servers: this program run again with -server, each an
// embedded nats-server configured as cluster/embedded.go configures ovbus's
// (routes on loopback without compression, JetStream), with a client port
// on 127.0.0.1 that the driver connects to.

// runServer is the -server mode: it serves until stdin closes or a signal.
func runServer(name string, clientPort, routePort int, routes, dir string) error {
	o := &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       clientPort,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 25<<20 + 512, // ovbus's default max_msg_size and header room
		MaxPending: 64 << 20,
		Cluster: server.ClusterOpts{
			Name:        "floor",
			Host:        "127.0.0.1",
			Port:        routePort,
			Compression: server.CompressionOpts{Mode: server.CompressionOff},
		},
		Routes:             server.RoutesFromStr(routes),
		JetStream:          true,
		JetStreamMaxMemory: 2*64<<20 + 64<<20,
		StoreDir:           dir,
	}
	s, err := server.NewServer(o)
	if err != nil {
		return err
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("%s did not start", name)
	}
	fmt.Println("ready")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n')
		close(eof)
	}()
	select {
	case <-sigs:
	case <-eof:
	}
	s.Shutdown()
	return nil
}

// floorServer is one child process.
type floorServer struct {
	name          string
	client, route int
	routes        string
	dir           string
	cmd           *exec.Cmd
	stdin         interface{ Close() error }
}

func (f *floorServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(f.client) }

func (f *floorServer) start() error {
	cmd := exec.Command(os.Args[0], "-server", f.name, "-client-port", strconv.Itoa(f.client),
		"-route-port", strconv.Itoa(f.route), "-routes", f.routes, "-dir", f.dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("%s: %q %v", f.name, line, err)
	}
	f.cmd, f.stdin = cmd, in
	return nil
}

// kill ends the child at once (SIGKILL), as a node dies.
func (f *floorServer) kill() {
	f.cmd.Process.Kill()
	f.cmd.Wait()
}

// stop ends the child cleanly.
func (f *floorServer) stop() {
	f.stdin.Close()
	done := make(chan struct{})
	go func() { f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		f.kill()
	}
}

// startServers starts the three children, routed to each other.
func startServers(dir string) ([]*floorServer, error) {
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	var fs []*floorServer
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(ports[3+j]))
			}
		}
		fs = append(fs, &floorServer{name: "f" + strconv.Itoa(i), client: ports[i], route: ports[3+i],
			routes: strings.Join(routes, ","), dir: dir + "/f" + strconv.Itoa(i)})
	}
	for _, f := range fs {
		if err := f.start(); err != nil {
			stopServers(fs)
			return nil, err
		}
	}
	return fs, nil
}

func stopServers(fs []*floorServer) {
	for _, f := range fs {
		if f.cmd != nil && f.cmd.ProcessState == nil {
			f.stop()
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// floorStream is the stream order "total" uses (cluster/stream.go):
// memory, R3, what a node stores republished in the stream's order.
func floorStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       streamName,
		Subjects:   []string{subjStore},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.MemoryStorage,
		Discard:    jetstream.DiscardOld,
		MaxAge:     time.Minute,
		MaxBytes:   64 << 20,
		MaxMsgSize: 25<<20 + 512,
		Replicas:   3,
		Duplicates: time.Minute,
		RePublish:  &jetstream.RePublish{Source: subjStore, Destination: subjOrdered},
	})
}

const (
	streamName  = "FLOOR"
	subjStore   = "floor.total"
	subjOrdered = "floor.ordered"
)

// lead moves the stream's leadership to server want (as cluster.lead does
// for a node) and waits until it is there.
func lead(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream, want string) error {
	for {
		s, err := js.Stream(ctx, stream)
		if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader == want {
			return nil
		}
		if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" {
			req := `{"placement":{"preferred":"` + want + `"}}`
			nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(req))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not lead %s: %w", want, stream, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
