package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
)

// mutations changes exactly one key of a Config; one entry per key of
// Keys(). TestDiffCoversEveryKey fails when a key is missing here or in Diff.
var mutations = map[string]func(*Config){
	"host":                     func(c *Config) { c.Bus.Host = "0.0.0.0" },
	"port":                     func(c *Config) { c.Bus.Port++ },
	"route":                    func(c *Config) { c.Bus.Route = "/other" },
	"ssl":                      func(c *Config) { c.SSL = !c.SSL },
	"ssl_cert":                 func(c *Config) { c.SSLCert = "/c.pem" },
	"ssl_key":                  func(c *Config) { c.SSLKey = "/k.pem" },
	"max_msg_size":             func(c *Config) { c.Bus.MaxMsgSize = MiB },
	"filter":                   func(c *Config) { c.Bus.Filter = !c.Bus.Filter },
	"filter_logs":              func(c *Config) { c.Bus.FilterLogs = append(c.Bus.FilterLogs, "x") },
	"shared_connection":        func(c *Config) { c.SharedConnection = !c.SharedConnection },
	"max_queue_bytes":          func(c *Config) { c.Bus.MaxQueueBytes++ },
	"max_inflight_bytes":       func(c *Config) { c.Bus.MaxInflightBytes++ },
	"max_queue_messages":       func(c *Config) { c.Bus.MaxQueueMessages++ },
	"write_timeout":            func(c *Config) { c.Bus.WriteTimeout += time.Second },
	"handshake_timeout":        func(c *Config) { c.Bus.HandshakeTimeout += time.Second },
	"max_connections":          func(c *Config) { c.Bus.MaxConnections = 5 },
	"send_buffer":              func(c *Config) { c.Bus.SendBuffer = 1 << 20 },
	"shutdown_timeout":         func(c *Config) { c.Bus.ShutdownTimeout += time.Second },
	"close_frames_on_shutdown": func(c *Config) { c.Bus.CloseFramesOnShutdown = !c.Bus.CloseFramesOnShutdown },
	"compression":              func(c *Config) { c.Bus.DisableCompression = !c.Bus.DisableCompression },
	"compression_context":      func(c *Config) { c.Bus.CompressionContext = 1024 },
	"metrics_address":          func(c *Config) { c.Bus.MetricsAddress = "127.0.0.1:9181" },
	"allowed_origins":          func(c *Config) { c.Bus.AllowedOrigins = []string{"http://x"} },
	"auth":                     func(c *Config) { c.Bus.Auth.Tokens = map[string]bus.Permissions{"t": {}} },
	"monitor_address":          func(c *Config) { c.MonitorAddress = "127.0.0.1:9182" },
	"monitor_allow_remote":     func(c *Config) { c.MonitorAllowRemote = !c.MonitorAllowRemote },
	"log_file":                 func(c *Config) { c.LogFile = "/x.log" },
	"log_level":                func(c *Config) { c.LogLevel = "DEBUG" },
}

func TestDiffCoversEveryKey(t *testing.T) {
	restartKeys := []string{"host", "port", "route", "ssl", "ssl_cert", "ssl_key", "handshake_timeout", "compression", "metrics_address", "monitor_address", "monitor_allow_remote", "log_file", "max_inflight_bytes"}
	for _, key := range Keys() {
		mutate, ok := mutations[key]
		if !ok {
			t.Errorf("no mutation for key %s", key)
			continue
		}
		old := Default()
		new := old.Clone()
		mutate(new)
		live, restart := Diff(old, new)
		all := slices.Concat(live, restart)
		if len(all) != 1 || all[0] != key {
			t.Errorf("changing %s: Diff = live %v restart %v", key, live, restart)
			continue
		}
		if wantRestart := slices.Contains(restartKeys, key) || strings.HasPrefix(key, "cluster."); wantRestart != (len(restart) == 1) {
			t.Errorf("%s: restart = %v, want restart %v", key, restart, wantRestart)
		}
		if k := lookupKey(key); k.value(old) == nil && k.kind != kindFile && k.kind != kindSecret {
			t.Errorf("Print shows no value for %s", key)
		}
	}
	if len(mutations) != len(Keys()) {
		t.Errorf("mutations has %d keys, Keys() %d", len(mutations), len(Keys()))
	}
}

func TestDiff(t *testing.T) {
	old := Default()
	new := old.Clone()
	if live, restart := Diff(old, new); live != nil || restart != nil {
		t.Fatalf("Diff of clones = %v %v", live, restart)
	}
	new.Bus.Port = 9000
	new.Bus.Filter = true
	new.LogLevel = "DEBUG"
	new.Bus.DisableCompression = true
	live, restart := Diff(old, new)
	if got := strings.Join(live, ","); got != "filter,log_level" {
		t.Errorf("live = %s", got)
	}
	if got := strings.Join(restart, ","); got != "port,compression" {
		t.Errorf("restart = %s", got)
	}

	// Permissions: absent (all) and empty (none) differ.
	a, b := Default(), Default()
	a.Bus.Auth.Tokens = map[string]bus.Permissions{"t": {Emit: nil}}
	b.Bus.Auth.Tokens = map[string]bus.Permissions{"t": {Emit: []string{}}}
	if live, _ := Diff(a, b); !slices.Equal(live, []string{"auth"}) {
		t.Errorf("nil vs empty emit: live = %v", live)
	}
	b.Bus.Auth.Tokens = map[string]bus.Permissions{"t": {}}
	if live, _ := Diff(a, b); live != nil {
		t.Errorf("equal auth: live = %v", live)
	}
}

func TestCloneIsDeep(t *testing.T) {
	c := Default()
	c.Bus.Auth.Tokens = map[string]bus.Permissions{"t": {Emit: []string{"a"}}}
	d := c.Clone()
	d.Bus.FilterLogs[0] = "changed"
	d.Bus.Auth.Tokens["t"].Emit[0] = "changed"
	d.Bus.Auth.Tokens["u"] = bus.Permissions{}
	if c.Bus.FilterLogs[0] == "changed" || c.Bus.Auth.Tokens["t"].Emit[0] == "changed" || len(c.Bus.Auth.Tokens) != 1 {
		t.Error("Clone shares memory with the original")
	}
}

func TestReloadScenario(t *testing.T) {
	f := newFixture(t)
	f.write(userConf, `{"websocket": {"filter": false, "port": 8181}}`)
	old, _ := f.mustLoad()
	f.write(userConf, `{"websocket": {"filter": true, "port": 8282, "max_msg_size": 5}}`)
	new, _ := f.mustLoad()
	live, restart := Diff(old, new)
	if strings.Join(live, ",") != "max_msg_size,filter" || strings.Join(restart, ",") != "port" {
		t.Errorf("live %v restart %v", live, restart)
	}
}
