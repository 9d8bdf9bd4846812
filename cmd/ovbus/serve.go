package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/config"
	"github.com/ovbus/ovbus/monitor"
)

func init() {
	register("serve", "run the message bus (a drop-in for ovos-messagebus)", runServe)
}

const serveSynopsis = `ovbus serve [flags]

Runs the OVOS message bus with the configuration of ovos-messagebus: the
websocket section of the OVOS configuration stack (mycroft.conf), then
OVOS_BUS_CONFIG_FILE, the OVOS_BUS_* variables and these flags. A file of
the stack that cannot be read or parsed is skipped, as ovos-config does, and
logged with its file:line:col (--strict-config makes it an error); a value of
the wrong type is an error. SIGINT and SIGTERM stop it (exit 0), SIGHUP
reloads the configuration.`

const serveExitHelp = `
Exit status: 0 stopped by SIGINT or SIGTERM (or --print-config done); 1 cannot start (configuration,
TLS, bind); 2 bad usage.
`

// Log file rotation, as ovos_utils does it: 50 MB × 3 backups.
const (
	logFileMaxBytes = 50_000_000
	logFileBackups  = 3
)

// serveSignals delivers the signals serve acts on; tests replace it.
var serveSignals = defaultServeSignals

func defaultServeSignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", serveSynopsis, serveExitHelp, stderr)
	flags := config.RegisterFlags(fs)
	printConfig := fs.Bool("print-config", false, "print the merged configuration and the layer that set each key, then exit")
	if code, ok := parseFlagsOnly(fs, args, stdout, stderr, ""); !ok {
		return code
	}
	load := func(prev *config.Provenance) (*config.Config, *config.Provenance, error) {
		return config.Load(config.LoadOptions{Flags: flags, Previous: prev})
	}
	cfg, prov, err := load(nil)
	if err != nil {
		fmt.Fprintln(stderr, "ovbus serve:", err)
		return 1
	}
	if *printConfig {
		if err := cfg.Print(stdout, prov); err != nil {
			fmt.Fprintln(stderr, "ovbus serve:", err)
			return 1
		}
		return 0
	}

	// The logger: stdout plus the rotating log file (docs/protocol.md §7).
	level := new(slog.LevelVar)
	level.Set(cfg.SlogLevel())
	out := stdout
	var logFileErr error
	if cfg.LogFile != "" {
		f, err := bus.OpenRotatingFile(cfg.LogFile, logFileMaxBytes, logFileBackups)
		if err != nil {
			logFileErr = err
		} else {
			defer f.Close()
			out = io.MultiWriter(stdout, f)
		}
	}
	handler := bus.NewLogHandler(out, level)
	logger := slog.New(handler).With("logger", "bus")

	logger.Info("Starting message bus service...")
	logger.Info("Loading message bus configs")
	if logFileErr != nil {
		logger.Warn("Cannot open the log file; logging to stdout only", "file", cfg.LogFile, "error", logFileErr)
	}
	for _, w := range prov.Warnings {
		logger.Warn(w)
	}
	files := &configFiles{}
	files.set(prov, logger)
	var tlsConfig *tls.Config
	if cfg.SSL {
		var err error
		if tlsConfig, err = serveTLS(cfg, logger); err != nil {
			logger.Error("Cannot set up TLS", "error", err)
			fmt.Fprintln(stderr, "ovbus serve:", err)
			return 1
		}
	}
	clusterLog := slog.New(handler).With("logger", "cluster")
	node, err := newClusterNode(cfg, clusterLog)
	if err != nil {
		clusterLog.Error("Cannot start the cluster", "error", err)
		fmt.Fprintln(stderr, "ovbus serve:", err)
		return 1
	}
	defer stopClusterNode(context.Background(), node, clusterLog) // after a failed start; a no-op after the drain below
	srv, err := bus.New(withSequencer(busOptions(cfg, tlsConfig, logger), node))
	if err != nil {
		logger.Error("Invalid configuration", "error", err)
		fmt.Fprintln(stderr, "ovbus serve:", err)
		return 1
	}
	files.attach(srv)
	var mon *monitor.Monitor
	if cfg.MonitorAddress != "" {
		mon, err = monitor.New(srv, monitor.Options{Addr: cfg.MonitorAddress, AllowRemote: cfg.MonitorAllowRemote, Logger: logger})
		if err != nil {
			logger.Error("Invalid configuration", "error", err)
			fmt.Fprintln(stderr, "ovbus serve:", err)
			return 1
		}
	}
	sigs, stopSignals := serveSignals()
	defer stopSignals()
	if err := srv.Start(); err != nil {
		logger.Error("Cannot start the message bus", "address", cfg.Address(), "error", err)
		fmt.Fprintln(stderr, "ovbus serve:", err)
		return 1
	}
	if node != nil {
		if err := node.Start(srv); err != nil {
			clusterLog.Error("Cannot start the cluster", "error", err)
			fmt.Fprintln(stderr, "ovbus serve:", err)
			return 1
		}
	}
	attrs := []any{"url", busURL(cfg, srv.Addr())}
	if a := srv.MetricsAddr(); a != nil {
		attrs = append(attrs, "metrics", "http://"+a.String()+"/metrics")
	}
	if mon != nil {
		if err := mon.Start(); err != nil {
			logger.Error("Cannot start the monitor", "address", cfg.MonitorAddress, "error", err)
			fmt.Fprintln(stderr, "ovbus serve:", err)
			srv.Shutdown(context.Background())
			return 1
		}
		attrs = append(attrs, "monitor", "http://"+mon.Addr().String()+"/")
		if a := cfg.Bus.Auth; cfg.MonitorAllowRemote && !a.Required && (a.Anyone == bus.SetAll || slices.Contains(slices.Collect(maps.Values(a.Networks)), bus.SetAll)) {
			logger.Warn("The monitor is open to other machines and auth lets some of them in without a token: whoever of them reaches it sees and sends every message", "address", cfg.MonitorAddress)
		}
	}
	logger.Info("Message bus service started!", attrs...)
	sdNotify("READY=1")

	running := loaded{cfg, prov}
	for sig := range sigs {
		if sig != syscall.SIGHUP {
			break
		}
		sdNotify("RELOADING=1")
		running = reload(srv, running, load, files, tlsConfig, level, logger)
		sdNotify("READY=1")
	}

	sdNotify("STOPPING=1")
	logger.Info("Message bus is shutting down...")
	live := srv.Live()
	ctx, cancel := context.WithTimeout(context.Background(), max(live.ShutdownTimeout, 0)+5*time.Second)
	defer cancel()
	if mon != nil {
		mon.Shutdown(ctx) // the pages are told the bus is going
	}
	if err := srv.Shutdown(ctx); err != nil {
		logger.Warn("Shutdown did not finish in time; connections dropped", "error", err)
	}
	stopClusterNode(ctx, node, clusterLog)
	logger.Info("Message bus stopped")
	return 0
}

// serveTLS returns the TLS configuration of ssl: true, and logs which certificate it serves:
// ssl_cert and ssl_key, or the self-signed pair, saying so when it was created (first start,
// or the old pair was unusable) and where, so that clients can be given it (--ca).
func serveTLS(cfg *config.Config, logger *slog.Logger) (*tls.Config, error) {
	certPath, keyPath := cfg.SSLCert, cfg.SSLKey
	selfSigned := certPath == "" || keyPath == ""
	var before time.Time
	if selfSigned {
		var err error
		if certPath, keyPath, err = config.CertificatePaths(nil); err != nil {
			return nil, err
		}
		if fi, err := os.Stat(certPath); err == nil {
			before = fi.ModTime()
		}
	}
	cert, err := cfg.Certificate()
	if err != nil {
		return nil, err
	}
	switch fi, err := os.Stat(certPath); {
	case selfSigned && err == nil && !fi.ModTime().Equal(before):
		logger.Info("Created a self-signed TLS certificate; give it to clients to trust (ovbus listen --ca FILE)",
			"cert", certPath, "key", keyPath)
	case selfSigned:
		logger.Info("Serving the self-signed TLS certificate", "cert", certPath)
	default:
		logger.Info("Serving the TLS certificate", "cert", certPath)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// loaded is a configuration and where it came from.
type loaded struct {
	cfg  *config.Config
	prov *config.Provenance
}

// reload re-reads the configuration on SIGHUP and applies what can change
// while the bus runs. Keys that need a restart keep their running values
// (and are reported again at the next reload); a file that can no longer be
// read or parsed keeps the version read before (config.LoadOptions.Previous).
// It returns the configuration now in force.
func reload(srv *bus.Server, running loaded, load func(*config.Provenance) (*config.Config, *config.Provenance, error),
	files *configFiles, tlsConfig *tls.Config, level *slog.LevelVar, logger *slog.Logger) loaded {
	next, prov, err := load(running.prov)
	if err != nil {
		logger.Error("Reload failed; the running configuration stays", "error", err)
		return running
	}
	for _, w := range prov.Warnings {
		logger.Warn(w)
	}
	applied, live, restart := running.cfg.Reload(next)
	if _, _, err := srv.Apply(busOptions(applied, tlsConfig, logger)); err != nil {
		logger.Error("Reload failed; the running configuration stays", "error", err)
		return running
	}
	files.set(prov, logger)
	level.Set(applied.SlogLevel())
	if len(live) == 0 && len(restart) == 0 {
		logger.Info("Configuration reloaded: nothing changed")
	} else {
		logger.Info("Configuration reloaded", "changed", fmt.Sprint(live), "needs_restart", fmt.Sprint(restart))
	}
	return loaded{applied, prov}
}

// busOptions maps the configuration onto the bus's options, with the TLS
// configuration made from it and the logger.
func busOptions(cfg *config.Config, tlsConfig *tls.Config, logger *slog.Logger) bus.Options {
	o := cfg.Options()
	o.TLSConfig, o.Logger = tlsConfig, logger
	return o
}

// busURL is the URL clients dial, with the port actually bound.
func busURL(cfg *config.Config, addr net.Addr) string {
	c := *cfg
	if ta, ok := addr.(*net.TCPAddr); ok {
		c.Bus.Port = ta.Port
	}
	return c.URL()
}

// sdNotify tells systemd about the service's state when it runs under a
// unit with Type=notify (as the units of deploy/systemd do); without
// $NOTIFY_SOCKET it does nothing (sd_notify(3)).
func sdNotify(state string) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return
	}
	if name[0] == '@' {
		name = "\x00" + name[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte(state))
}
