package config

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
)

// fixture is a fake machine: every path Load reads points into a temporary
// directory through an injected environment.
type fixture struct {
	t    *testing.T
	root string
	env  map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	return &fixture{t: t, root: root, env: map[string]string{
		"HOME":                     filepath.Join(root, "home"),
		"XDG_CONFIG_HOME":          filepath.Join(root, "home/.config"),
		"XDG_CONFIG_DIRS":          filepath.Join(root, "etc/xdg"),
		"XDG_STATE_HOME":           filepath.Join(root, "home/.local/state"),
		"XDG_DATA_HOME":            filepath.Join(root, "home/.local/share"),
		"OVOS_DISTRIBUTION_CONFIG": filepath.Join(root, "usr/share/mycroft/mycroft.conf"),
		"MYCROFT_SYSTEM_CONFIG":    filepath.Join(root, "etc/mycroft/mycroft.conf"),
	}}
}

// Paths of the stack's files in a fixture, relative to its root.
const (
	userConf   = "home/.config/mycroft/mycroft.conf"
	xdgConf    = "etc/xdg/mycroft/mycroft.conf"
	systemConf = "etc/mycroft/mycroft.conf"
	distConf   = "usr/share/mycroft/mycroft.conf"
	webCache   = "home/.config/mycroft/web_cache.json"
)

func (f *fixture) path(rel string) string { return filepath.Join(f.root, rel) }

// write creates root/rel with content and returns its path.
func (f *fixture) write(rel, content string) string {
	f.t.Helper()
	p := f.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) lookup(k string) (string, bool) {
	v, ok := f.env[k]
	return v, ok
}

func (f *fixture) load(flags ...string) (*Config, *Provenance, error) {
	f.t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fo := RegisterFlags(fs)
	if err := fs.Parse(flags); err != nil {
		f.t.Fatal(err)
	}
	return Load(LoadOptions{LookupEnv: f.lookup, Flags: fo})
}

func (f *fixture) mustLoad(flags ...string) (*Config, *Provenance) {
	f.t.Helper()
	c, p, err := f.load(flags...)
	if err != nil {
		f.t.Fatalf("Load: %v", err)
	}
	return c, p
}

func TestDefaults(t *testing.T) {
	f := newFixture(t)
	c, p := f.mustLoad()
	want := Default()
	want.LogFile = f.path("home/.local/state/mycroft/bus.log")
	if live, restart := Diff(want, c); len(live)+len(restart) > 0 {
		t.Errorf("defaults differ from Default() in %v %v", live, restart)
	}
	for key, src := range map[string]string{
		"host":            "default (bundled)",
		"max_msg_size":    "default (bundled)",
		"filter_logs":     "default (bundled)",
		"max_queue_bytes": "built-in",
		"auth":            "built-in",
		"log_level":       "default (bundled) (logging.log_level)",
	} {
		if got := p.Source(key); got != src {
			t.Errorf("Source(%q) = %q, want %q", key, got, src)
		}
	}
	if len(p.Warnings) > 0 {
		t.Errorf("warnings: %v", p.Warnings)
	}
	var names []string
	for _, l := range p.Layers {
		names = append(names, l.Name+":"+l.Status)
	}
	wantLayers := "default:loaded (bundled) remote:not found distribution:not found system:not found user:not found xdg:not found"
	if got := strings.Join(names, " "); got != wantLayers {
		t.Errorf("layers = %s\nwant     %s", got, wantLayers)
	}
}

func TestLayerPrecedence(t *testing.T) {
	port := func(n string) string { return `{"websocket": {"port": ` + n + `}}` }
	tests := []struct {
		name  string
		files map[string]string // rel path -> content
		env   map[string]string
		want  int
		src   string // provenance prefix
	}{
		{"default file replaces bundled", map[string]string{"custom/default.conf": port("1001")},
			map[string]string{"OVOS_DEFAULT_CONFIG": "@custom/default.conf"}, 1001, "default "},
		{"distribution beats default", map[string]string{distConf: port("1002")}, nil, 1002, "distribution "},
		{"system beats distribution", map[string]string{distConf: port("1002"), systemConf: port("1003")}, nil, 1003, "system "},
		{"user beats system", map[string]string{systemConf: port("1003"), userConf: port("1004")}, nil, 1004, "user "},
		{"/etc/xdg beats user", map[string]string{userConf: port("1004"), xdgConf: port("1005")}, nil, 1005, "xdg "},
		{"bus file beats xdg", map[string]string{xdgConf: port("1005"), "bus.json": port("1006")},
			map[string]string{"OVOS_BUS_CONFIG_FILE": "@bus.json"}, 1006, "bus-file "},
		{"env beats bus file", map[string]string{"bus.json": port("1006")},
			map[string]string{"OVOS_BUS_CONFIG_FILE": "@bus.json", "OVOS_BUS_PORT": "1007"}, 1007, "env OVOS_BUS_PORT"},
		{"file name from OVOS_CONFIG_FILENAME", map[string]string{"home/.config/mycroft/other.conf": port("1008")},
			map[string]string{"OVOS_CONFIG_FILENAME": "other.conf"}, 1008, "user "},
		{"base folder from OVOS_CONFIG_BASE_FOLDER", map[string]string{"home/.config/neon/mycroft.conf": port("1009")},
			map[string]string{"OVOS_CONFIG_BASE_FOLDER": "neon"}, 1009, "user "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			for rel, content := range tt.files {
				f.write(rel, content)
			}
			for k, v := range tt.env {
				if strings.HasPrefix(v, "@") {
					v = f.path(v[1:])
				}
				f.env[k] = v
			}
			c, p := f.mustLoad()
			if c.Bus.Port != tt.want {
				t.Errorf("port = %d, want %d", c.Bus.Port, tt.want)
			}
			if src := p.Source("port"); !strings.HasPrefix(src, tt.src) {
				t.Errorf("Source(port) = %q, want prefix %q", src, tt.src)
			}
		})
	}
}

func TestXDGConfigDirsReverseOrder(t *testing.T) {
	f := newFixture(t)
	f.env["XDG_CONFIG_DIRS"] = f.path("first") + ":" + f.path("second")
	f.write(userConf, `{"websocket": {"port": 1, "host": "user", "route": "/user"}}`)
	f.write("second/mycroft/mycroft.conf", `{"websocket": {"port": 2, "host": "second"}}`)
	f.write("first/mycroft/mycroft.conf", `{"websocket": {"port": 3}}`)
	c, p := f.mustLoad()
	if c.Bus.Port != 3 || c.Bus.Host != "second" || c.Bus.Route != "/user" {
		t.Errorf("got port %d host %q route %q, want 3 second /user", c.Bus.Port, c.Bus.Host, c.Bus.Route)
	}
	if got, want := p.Source("port"), "xdg "+f.path("first/mycroft/mycroft.conf"); got != want {
		t.Errorf("Source(port) = %q, want %q", got, want)
	}
}

func TestDeepMerge(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"filter_logs": ["a", "b"], "auth": {"tokens": {"tok-system-0000": {"name": "sys"}}}}}`)
	f.write(userConf, `{"websocket": {"filter_logs": ["c"], "auth": {"tokens": {"tok-user-000000": {"name": "usr"}}}}}`)
	c, p := f.mustLoad()
	if strings.Join(c.Bus.FilterLogs, ",") != "c" {
		t.Errorf("lists replace, got %v", c.Bus.FilterLogs)
	}
	if len(c.Bus.Auth.Tokens) != 2 {
		t.Errorf("objects merge key by key, got %v", c.Bus.Auth.Tokens)
	}
	want := "system " + f.path(systemConf) + " + user " + f.path(userConf)
	if got := p.Source("auth"); got != want {
		t.Errorf("Source(auth) = %q, want %q", got, want)
	}
	if got := p.Source("host"); got != "default (bundled)" {
		t.Errorf("Source(host) = %q", got)
	}
}

func TestRemoteCache(t *testing.T) {
	f := newFixture(t)
	f.write(webCache, `{"websocket": {"port": 9999, "host": "0.0.0.0"}, "logging": {"log_level": "DEBUG"},
		"system": {"disable_user_config": true}}`)
	f.write(userConf, `{"websocket": {"route": "/user"}}`)
	c, p := f.mustLoad()
	if c.Bus.Port != 8181 || c.Bus.Host != "127.0.0.1" {
		t.Errorf("the remote cache changed the protected websocket section: %s:%d", c.Bus.Host, c.Bus.Port)
	}
	if c.LogLevel != "DEBUG" || !strings.HasPrefix(p.Source("log_level"), "remote "+f.path(webCache)) {
		t.Errorf("log_level = %s from %q, want DEBUG from the remote cache", c.LogLevel, p.Source("log_level"))
	}
	if c.Bus.Route != "/user" {
		t.Errorf("system from the remote cache applied: route %q", c.Bus.Route)
	}

	// MYCROFT_WEB_CACHE moves it.
	f.env["MYCROFT_WEB_CACHE"] = f.write("cache.json", `{"logging": {"log_level": "ERROR"}}`)
	c, _ = f.mustLoad()
	if c.LogLevel != "ERROR" {
		t.Errorf("MYCROFT_WEB_CACHE not read: %s", c.LogLevel)
	}
}

func TestSystemConstraints(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		wantRoute string
		wantLevel string
		skipped   string // layer name reported as skipped
	}{
		{"disable_user_config in system",
			map[string]string{
				systemConf: `{"system": {"disable_user_config": true}}`,
				userConf:   `{"websocket": {"route": "/user"}}`,
				xdgConf:    `{"websocket": {"route": "/xdg"}}`,
			}, "/core", "INFO", "user"},
		{"disable_user_config in distribution",
			map[string]string{
				distConf: `{"system": {"disable_user_config": true}}`,
				xdgConf:  `{"websocket": {"route": "/xdg"}}`,
			}, "/core", "INFO", "xdg"},
		{"disable_user_config in the user file does nothing",
			map[string]string{
				userConf: `{"system": {"disable_user_config": true}, "websocket": {"route": "/user"}}`,
			}, "/user", "INFO", ""},
		{"disable_remote_config",
			map[string]string{
				systemConf: `{"system": {"disable_remote_config": true}}`,
				webCache:   `{"logging": {"log_level": "DEBUG"}, this is not even JSON`,
			}, "/core", "INFO", "remote"},
		{"disable_remote_config in the remote cache does nothing",
			map[string]string{
				webCache: `{"system": {"disable_remote_config": true}, "logging": {"log_level": "DEBUG"}}`,
			}, "/core", "DEBUG", ""},
		{"system beats default for constraints",
			map[string]string{
				"default.conf": `{"system": {"disable_user_config": true}}`,
				systemConf:     `{"system": {"disable_user_config": false}}`,
				userConf:       `{"websocket": {"route": "/user"}}`,
			}, "/user", "INFO", ""},
		{"protected user keys",
			map[string]string{
				systemConf: `{"system": {"protected_keys": {"user": ["websocket:route", "logging"]}}}`,
				userConf:   `{"websocket": {"route": "/user", "port": 1234}, "logging": {"log_level": "DEBUG"}}`,
			}, "/core", "INFO", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			for rel, content := range tt.files {
				f.write(rel, content)
			}
			if _, ok := tt.files["default.conf"]; ok {
				f.env["OVOS_DEFAULT_CONFIG"] = f.path("default.conf")
			}
			c, p := f.mustLoad()
			if c.Bus.Route != tt.wantRoute || c.LogLevel != tt.wantLevel {
				t.Errorf("route %q level %s, want %q %s", c.Bus.Route, c.LogLevel, tt.wantRoute, tt.wantLevel)
			}
			if tt.skipped != "" {
				found := false
				for _, l := range p.Layers {
					if l.Name == tt.skipped && strings.HasPrefix(l.Status, "skipped: system.disable_") {
						found = true
					}
				}
				if !found {
					t.Errorf("layer %s not reported as skipped: %+v", tt.skipped, p.Layers)
				}
			}
		})
	}
	t.Run("protected user key keeps siblings", func(t *testing.T) {
		f := newFixture(t)
		f.write(systemConf, `{"system": {"protected_keys": {"user": ["websocket:route"]}}}`)
		f.write(userConf, `{"websocket": {"route": "/user", "port": 1234}}`)
		c, _ := f.mustLoad()
		if c.Bus.Port != 1234 {
			t.Errorf("port = %d", c.Bus.Port)
		}
	})
}

func TestCommentsAndFormats(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `// a mycroft.conf comment
{
  # hash comment
    // indented comment with "quotes" and { braces
  "websocket": {
    "port": 1111,
    // "port": 2222,
    "host": "0.0.0.0"
  }
}
`)
	c, _ := f.mustLoad()
	if c.Bus.Port != 1111 || c.Bus.Host != "0.0.0.0" {
		t.Errorf("got %s:%d", c.Bus.Host, c.Bus.Port)
	}

	// YAML, with an anchor and a merge key.
	f = newFixture(t)
	f.env["OVOS_CONFIG_FILENAME"] = "mycroft.yaml"
	f.env["MYCROFT_SYSTEM_CONFIG"] = f.path("etc/mycroft/mycroft.yaml")
	f.env["OVOS_DISTRIBUTION_CONFIG"] = f.path("usr/share/mycroft/mycroft.yaml")
	f.write("home/.config/mycroft/mycroft.yaml", `
common: &common
  route: /yaml
websocket:
  <<: *common
  port: 2222
  ssl: false
  max_msg_size: 0.5
  filter_logs: [a, b]
  write_timeout: 250ms
logging:
  bus:
    log_level: debug
`)
	c, p := f.mustLoad()
	if c.Bus.Port != 2222 || c.Bus.Route != "/yaml" || c.Bus.MaxMsgSize != 512*1024 || c.Bus.WriteTimeout != 250*time.Millisecond {
		t.Errorf("yaml: port %d route %q size %d write %v", c.Bus.Port, c.Bus.Route, c.Bus.MaxMsgSize, c.Bus.WriteTimeout)
	}
	if c.LogLevel != "DEBUG" || !strings.HasSuffix(p.Source("log_level"), "(logging.bus.log_level)") {
		t.Errorf("log level %s from %q", c.LogLevel, p.Source("log_level"))
	}

	// Empty and all-comment files are empty configurations.
	f = newFixture(t)
	f.write(systemConf, "")
	f.write(userConf, "// nothing here\n# really\n")
	f.mustLoad()
}

func TestBusConfigFile(t *testing.T) {
	tests := []struct {
		name, file, content string
		port                int
		queue               int
		level               string
	}{
		{"json", "bus.json", `{"websocket": {"port": 3001}}`, 3001, bus.DefaultMaxQueueMessages, "INFO"},
		{"conf with comments", "bus.conf", "// c\n{\"websocket\": {\"port\": 3002}}", 3002, bus.DefaultMaxQueueMessages, "INFO"},
		{"yaml", "bus.yaml", "websocket:\n  port: 3003\n  message_buffer_capacity: 2048\n", 3003, 2048, "INFO"},
		{"yaml without extension", "busconfig", "websocket:\n  port: 3004\n", 3004, bus.DefaultMaxQueueMessages, "INFO"},
		{"json without extension", "busconfig", "# c\n{\"websocket\": {\"port\": 3005}}", 3005, bus.DefaultMaxQueueMessages, "INFO"},
		{"whole mycroft.conf", "mycroft.conf",
			`{"lang": "en-us", "system": {"disable_user_config": true}, "websocket": {"port": 3006}, "logging": {"log_level": "WARNING"}}`,
			3006, bus.DefaultMaxQueueMessages, "WARNING"},
		{"alias and canonical", "bus.json",
			`{"websocket": {"message_buffer_capacity": 5, "max_queue_messages": 7}}`, 8181, 7, "INFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(userConf, `{"websocket": {"route": "/user"}}`)
			f.env["OVOS_BUS_CONFIG_FILE"] = f.write(tt.file, tt.content)
			c, p := f.mustLoad()
			if c.Bus.Port != tt.port || c.Bus.MaxQueueMessages != tt.queue || c.LogLevel != tt.level {
				t.Errorf("port %d queue %d level %s, want %d %d %s", c.Bus.Port, c.Bus.MaxQueueMessages, c.LogLevel, tt.port, tt.queue, tt.level)
			}
			if c.Bus.Route != "/user" {
				t.Errorf("the bus file's system section applied: route %q", c.Bus.Route)
			}
			if tt.port != 8181 {
				if want := "bus-file " + f.path(tt.file); p.Source("port") != want {
					t.Errorf("Source(port) = %q, want %q", p.Source("port"), want)
				}
			}
		})
	}
}

func TestEnvVariables(t *testing.T) {
	tests := []struct {
		env   string
		value string
		check func(*Config) bool
	}{
		{"OVOS_BUS_HOST", "0.0.0.0", func(c *Config) bool { return c.Bus.Host == "0.0.0.0" }},
		{"OVOS_BUS_PORT", "1337", func(c *Config) bool { return c.Bus.Port == 1337 }},
		{"OVOS_BUS_ROUTE", "/bus", func(c *Config) bool { return c.Bus.Route == "/bus" }},
		{"OVOS_BUS_MAX_MSG_SIZE", "42", func(c *Config) bool { return c.Bus.MaxMsgSize == 42*MiB }},
		{"OVOS_BUS_MAX_MSG_SIZE", "1.5", func(c *Config) bool { return c.Bus.MaxMsgSize == 3*MiB/2 }},
		{"OVOS_BUS_USE_SSL", "", func(c *Config) bool { return c.SSL }},
		{"OVOS_BUS_USE_SSL", "1", func(c *Config) bool { return c.SSL }},
		{"OVOS_BUS_USE_SSL", "false", func(c *Config) bool { return !c.SSL }},
		{"OVOS_BUS_MSG_BUFFER_CAPACITY", "4096", func(c *Config) bool { return c.Bus.MaxQueueMessages == 4096 }},
		{"OVOS_BUS_MAX_QUEUE_MESSAGES", "77", func(c *Config) bool { return c.Bus.MaxQueueMessages == 77 }},
		{"OVOS_BUS_MAX_QUEUE_BYTES", "104857600", func(c *Config) bool { return c.Bus.MaxQueueBytes == 100*MiB }},
		{"OVOS_BUS_SSL_CERT", "/c.pem", func(c *Config) bool { return c.SSLCert == "/c.pem" }},
		{"OVOS_BUS_SSL_KEY", "/k.pem", func(c *Config) bool { return c.SSLKey == "/k.pem" }},
		{"OVOS_BUS_FILTER", "true", func(c *Config) bool { return c.Bus.Filter }},
		{"OVOS_BUS_FILTER_LOGS", "a, b,,c", func(c *Config) bool { return strings.Join(c.Bus.FilterLogs, "|") == "a|b|c" }},
		{"OVOS_BUS_WRITE_TIMEOUT", "2.5", func(c *Config) bool { return c.Bus.WriteTimeout == 2500*time.Millisecond }},
		{"OVOS_BUS_HANDSHAKE_TIMEOUT", "3s", func(c *Config) bool { return c.Bus.HandshakeTimeout == 3*time.Second }},
		{"OVOS_BUS_SHUTDOWN_TIMEOUT", "0", func(c *Config) bool { return c.Bus.ShutdownTimeout < 0 }},
		{"OVOS_BUS_CLOSE_FRAMES_ON_SHUTDOWN", "yes", func(c *Config) bool { return c.Bus.CloseFramesOnShutdown }},
		{"OVOS_BUS_COMPRESSION", "off", func(c *Config) bool { return c.Bus.DisableCompression }},
		{"OVOS_BUS_METRICS_ADDRESS", "127.0.0.1:9181", func(c *Config) bool { return c.Bus.MetricsAddress == "127.0.0.1:9181" }},
		{"OVOS_BUS_ALLOWED_ORIGINS", "http://localhost:*,https://ovos.local", func(c *Config) bool { return len(c.Bus.AllowedOrigins) == 2 }},
		{"OVOS_BUS_LOG_FILE", "", func(c *Config) bool { return c.LogFile == "" }},
		{"OVOS_BUS_LOG_FILE", "/var/log/bus.log", func(c *Config) bool { return c.LogFile == "/var/log/bus.log" }},
		{"OVOS_BUS_LOG_LEVEL", "warn", func(c *Config) bool { return c.LogLevel == "WARNING" }},
	}
	for _, tt := range tests {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			f := newFixture(t)
			f.write(systemConf, `{"websocket": {"port": 1, "ssl": true, "compression": true}, "logging": {"bus": {"log_level": "ERROR"}}}`)
			f.env[tt.env] = tt.value
			c, p := f.mustLoad()
			if !tt.check(c) {
				t.Errorf("%s=%q not applied: %+v", tt.env, tt.value, c)
			}
			found := false
			for _, k := range Keys() {
				if p.Source(k) == "env "+tt.env {
					found = true
				}
			}
			if !found {
				t.Errorf("no key has source env %s", tt.env)
			}
		})
	}
	t.Run("both queue variables", func(t *testing.T) {
		f := newFixture(t)
		f.env["OVOS_BUS_MSG_BUFFER_CAPACITY"] = "10"
		f.env["OVOS_BUS_MAX_QUEUE_MESSAGES"] = "20"
		c, p := f.mustLoad()
		if c.Bus.MaxQueueMessages != 20 || p.Source("max_queue_messages") != "env OVOS_BUS_MAX_QUEUE_MESSAGES" {
			t.Errorf("got %d from %q", c.Bus.MaxQueueMessages, p.Source("max_queue_messages"))
		}
	})
}

func TestFlags(t *testing.T) {
	f := newFixture(t)
	f.env["OVOS_BUS_PORT"] = "1000"
	f.env["OVOS_BUS_HOST"] = "0.0.0.0"
	f.env["OVOS_BUS_COMPRESSION"] = "false"
	c, p := f.mustLoad("--port", "2000", "--ssl", "--log-level=debug", "--compression", "--allowed-origins", "a,b", "--port=3000")
	if c.Bus.Port != 3000 || p.Source("port") != "flag --port" {
		t.Errorf("port %d from %q, want 3000 from flag --port", c.Bus.Port, p.Source("port"))
	}
	if c.Bus.Host != "0.0.0.0" || p.Source("host") != "env OVOS_BUS_HOST" {
		t.Errorf("unset flag overrode env: host %q from %q", c.Bus.Host, p.Source("host"))
	}
	if !c.SSL || c.Bus.DisableCompression || c.LogLevel != "DEBUG" || len(c.Bus.AllowedOrigins) != 2 {
		t.Errorf("flags not applied: %+v", c)
	}
	if p.Source("log_level") != "flag --log-level" {
		t.Errorf("Source(log_level) = %q", p.Source("log_level"))
	}

	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fo := RegisterFlags(fs)
	if err := fs.Parse([]string{"--ssl=false", "--route", "/r"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fo.Names(), " "); got != "--ssl --route" {
		t.Errorf("Names() = %q", got)
	}
}

func TestProvenanceAndPrint(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"host": "0.0.0.0", "auth": {"tokens": {"0123456789abcdef": {"name": "skills", "emit": ["speak"]}}}}}`)
	f.write(xdgConf, `{"websocket": {"max_msg_size": 50, "mystery": 1, "log_level": "DEBUG"}}`)
	f.env["OVOS_BUS_PORT"] = "8282"
	c, p := f.mustLoad("--metrics-address", "127.0.0.1:9181")
	wantSources := map[string]string{
		"host":            "system " + f.path(systemConf),
		"port":            "env OVOS_BUS_PORT",
		"max_msg_size":    "xdg " + f.path(xdgConf),
		"metrics_address": "flag --metrics-address",
		"max_queue_bytes": "built-in",
		"route":           "default (bundled)",
	}
	for k, want := range wantSources {
		if got := p.Source(k); got != want {
			t.Errorf("Source(%s) = %q, want %q", k, got, want)
		}
	}
	if c.Bus.MaxQueueBytes != bus.DefaultMaxQueueBytes {
		t.Errorf("max_queue_bytes %d", c.Bus.MaxQueueBytes)
	}
	if len(p.Warnings) != 2 || !strings.Contains(p.Warnings[0], "websocket.log_level: ignored") ||
		!strings.Contains(p.Warnings[1], "websocket.mystery: unknown key") {
		t.Errorf("warnings = %q", p.Warnings)
	}
	var b strings.Builder
	if err := c.Print(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"websocket:", "logging:",
		`"0.0.0.0"`, "8282", "# env OVOS_BUS_PORT",
		`"127.0.0.1:9181"`, "# flag --metrics-address",
		`"0123…"`, `"name":"skills"`,
		"# warning: websocket.mystery",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Print output lacks %q:\n%s", want, out)
		}
	}
	layerLine := regexp.MustCompile(`(?m)^#   system +` + regexp.QuoteMeta(f.path(systemConf)) + ` +loaded$`)
	if !layerLine.MatchString(out) {
		t.Errorf("Print output lacks the system layer:\n%s", out)
	}
	if regexp.MustCompile(`(?m) $`).MatchString(out) {
		t.Errorf("Print output has trailing blanks:\n%q", out)
	}
	if strings.Contains(out, "0123456789abcdef") {
		t.Errorf("Print shows a token:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  ssl_cert ") && !strings.Contains(line, "null") {
			t.Errorf("unset ssl_cert printed as %q", line)
		}
	}
}

func TestMaxQueueBytesFollowsMaxMsgSize(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"max_msg_size": 100}}`)
	c, p := f.mustLoad()
	if c.Bus.MaxQueueBytes != 200*MiB || !strings.HasPrefix(p.Source("max_queue_bytes"), "built-in (raised") {
		t.Errorf("max_queue_bytes %d from %q", c.Bus.MaxQueueBytes, p.Source("max_queue_bytes"))
	}
	f.write(userConf, `{"websocket": {"max_queue_bytes": 1048576}}`)
	_, _, err := f.load()
	if err == nil || !strings.Contains(err.Error(), "smaller than max_msg_size") {
		t.Errorf("explicit max_queue_bytes below max_msg_size: %v", err)
	}
}

func TestMissingMaxMsgSizeFallsBackTo10(t *testing.T) {
	f := newFixture(t)
	f.env["OVOS_DEFAULT_CONFIG"] = f.write("default.conf", `{"websocket": {"host": "127.0.0.1"}}`)
	c, p := f.mustLoad()
	if c.Bus.MaxMsgSize != 10*MiB || !strings.Contains(p.Source("max_msg_size"), "fallback") {
		t.Errorf("max_msg_size %v from %q", c.Bus.MaxMsgSize, p.Source("max_msg_size"))
	}
	// A missing OVOS_DEFAULT_CONFIG file is skipped with a warning.
	f.env["OVOS_DEFAULT_CONFIG"] = f.path("nope.conf")
	c, p = f.mustLoad()
	if c.Bus.Port != bus.DefaultPort || len(p.Warnings) != 1 {
		t.Errorf("port %d warnings %q", c.Bus.Port, p.Warnings)
	}
}

func TestNullTakesBuiltIn(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"port": 1234, "filter_logs": ["x"], "log_file": "/x"}}`)
	f.write(userConf, `{"websocket": {"port": null, "filter_logs": null, "log_file": null}}`)
	c, p := f.mustLoad()
	if c.Bus.Port != bus.DefaultPort || len(c.Bus.FilterLogs) != 2 || c.LogFile != f.path("home/.local/state/mycroft/bus.log") {
		t.Errorf("port %d filter_logs %v log_file %q", c.Bus.Port, c.Bus.FilterLogs, c.LogFile)
	}
	if !strings.HasSuffix(p.Source("port"), "(null: built-in value)") {
		t.Errorf("Source(port) = %q", p.Source("port"))
	}
}

func TestLoneSSLCertWarns(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"ssl": true, "ssl_cert": "/c.pem"}}`)
	c, p := f.mustLoad()
	if c.SSLCert != "/c.pem" || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "self-signed") {
		t.Errorf("warnings %q", p.Warnings)
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default() invalid: %v", err)
	}
	c.Bus.Port = 70000
	if err := c.Validate(); err == nil || err.Error() != "config: websocket.port: expected an integer 0-65535, got 70000" {
		t.Errorf("Validate: %v", err)
	}
	c = Default()
	c.Bus.MetricsAddress = "127.0.0.1:8181"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "the bus's own address") {
		t.Errorf("metrics on the bus address: %v", err)
	}
	c = Default()
	c.LogLevel = "WARN"
	if err := c.Validate(); err == nil {
		t.Error("non-canonical level accepted")
	}
}
