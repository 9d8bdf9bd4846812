package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// mutations changes exactly one key of a Config; one entry per key of
// Keys(). TestDiffCoversEveryKey fails when a key is missing here or in Diff.
var mutations = map[string]func(*Config){
	"host":                     func(c *Config) { c.Host = "0.0.0.0" },
	"port":                     func(c *Config) { c.Port++ },
	"route":                    func(c *Config) { c.Route = "/other" },
	"ssl":                      func(c *Config) { c.SSL = !c.SSL },
	"ssl_cert":                 func(c *Config) { c.SSLCert = "/c.pem" },
	"ssl_key":                  func(c *Config) { c.SSLKey = "/k.pem" },
	"max_msg_size":             func(c *Config) { c.MaxMsgSizeMiB = 1 },
	"filter":                   func(c *Config) { c.Filter = !c.Filter },
	"filter_logs":              func(c *Config) { c.FilterLogs = append(c.FilterLogs, "x") },
	"shared_connection":        func(c *Config) { c.SharedConnection = !c.SharedConnection },
	"max_queue_bytes":          func(c *Config) { c.MaxQueueBytes++ },
	"max_queue_messages":       func(c *Config) { c.MaxQueueMessages++ },
	"write_timeout":            func(c *Config) { c.WriteTimeout += time.Second },
	"handshake_timeout":        func(c *Config) { c.HandshakeTimeout += time.Second },
	"shutdown_timeout":         func(c *Config) { c.ShutdownTimeout += time.Second },
	"close_frames_on_shutdown": func(c *Config) { c.CloseFramesOnShutdown = !c.CloseFramesOnShutdown },
	"compression":              func(c *Config) { c.Compression = !c.Compression },
	"metrics_address":          func(c *Config) { c.MetricsAddress = "127.0.0.1:9181" },
	"allowed_origins":          func(c *Config) { c.AllowedOrigins = []string{"http://x"} },
	"auth":                     func(c *Config) { c.Auth.Tokens = map[string]Permissions{"t": {}} },
	"log_file":                 func(c *Config) { c.LogFile = "/x.log" },
	"log_level":                func(c *Config) { c.LogLevel = "DEBUG" },
}

func TestDiffCoversEveryKey(t *testing.T) {
	restartKeys := []string{"host", "port", "route", "ssl", "ssl_cert", "ssl_key", "compression", "metrics_address", "log_file"}
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
		if wantRestart := slices.Contains(restartKeys, key); wantRestart != (len(restart) == 1) {
			t.Errorf("%s: restart = %v, want restart %v", key, restart, wantRestart)
		}
		if old.value(key) == nil && key != "ssl_cert" && key != "ssl_key" {
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
	new.Port = 9000
	new.Filter = true
	new.LogLevel = "DEBUG"
	new.Compression = false
	live, restart := Diff(old, new)
	if got := strings.Join(live, ","); got != "filter,log_level" {
		t.Errorf("live = %s", got)
	}
	if got := strings.Join(restart, ","); got != "port,compression" {
		t.Errorf("restart = %s", got)
	}

	// Permissions: absent (all) and empty (none) differ.
	a, b := Default(), Default()
	a.Auth.Tokens = map[string]Permissions{"t": {Emit: nil}}
	b.Auth.Tokens = map[string]Permissions{"t": {Emit: []string{}}}
	if live, _ := Diff(a, b); !slices.Equal(live, []string{"auth"}) {
		t.Errorf("nil vs empty emit: live = %v", live)
	}
	b.Auth.Tokens = map[string]Permissions{"t": {}}
	if live, _ := Diff(a, b); live != nil {
		t.Errorf("equal auth: live = %v", live)
	}
}

func TestCloneIsDeep(t *testing.T) {
	c := Default()
	c.Auth.Tokens = map[string]Permissions{"t": {Emit: []string{"a"}}}
	d := c.Clone()
	d.FilterLogs[0] = "changed"
	d.Auth.Tokens["t"].Emit[0] = "changed"
	d.Auth.Tokens["u"] = Permissions{}
	if c.FilterLogs[0] == "changed" || c.Auth.Tokens["t"].Emit[0] == "changed" || len(c.Auth.Tokens) != 1 {
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
