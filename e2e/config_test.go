package e2e

import (
	"errors"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

const runTimeout = 20 * time.Second

// printedKey is one line of `ovbus serve --print-config`.
type printedKey struct{ value, source string }

// printConfig runs `ovbus serve --print-config args...` and returns the keys
// it shows, with their values (as JSON) and sources.
func printConfig(t *testing.T, sb *sandbox, args ...string) (map[string]printedKey, string) {
	t.Helper()
	res := sb.run(runTimeout, append([]string{"serve", "--print-config"}, args...)...)
	if res.code != 0 {
		t.Fatalf("ovbus serve --print-config exited %d\n%s", res.code, res.output())
	}
	if strings.Contains(res.output(), startedLine) {
		t.Fatalf("--print-config started the bus:\n%s", res.output())
	}
	keys := map[string]printedKey{}
	line := regexp.MustCompile(`^  ([a-z_]+)\s+(.*?)\s+# (.*)$`)
	for _, l := range strings.Split(res.stdout, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			keys[m[1]] = printedKey{m[2], m[3]}
		}
	}
	if len(keys) == 0 {
		t.Fatalf("no keys in --print-config output:\n%s", res.stdout)
	}
	return keys, res.stdout
}

// checkKeys compares printed keys with want (value as JSON, source).
func checkKeys(t *testing.T, got map[string]printedKey, out string, want map[string]printedKey) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("--print-config does not show %s", k)
			continue
		}
		if g.value != w.value || g.source != w.source {
			t.Errorf("%s = %s # %s; want %s # %s", k, g.value, g.source, w.value, w.source)
		}
	}
	if t.Failed() {
		t.Logf("--print-config output:\n%s", out)
	}
}

// TestConfigLayering: every layer of the stack sets some keys, the higher
// layers win where they overlap, --print-config names the layer of each
// key, and the running bus uses the merged result.
func TestConfigLayering(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.setXDGDirs(2) // the first beats the second, and both beat the user
	sb.write(sb.distFile, `{"websocket": {"host": "127.0.0.1", "route": "/dist", "max_queue_messages": 5000, "handshake_timeout": 4}}`)
	sb.write(sb.webCache, `{"websocket": {"port": 1, "route": "/remote", "compression": false}}`)
	sb.write(sb.systemFile, `// the system's mycroft.conf
# both comment styles
{
  "websocket": {
    "port": 1,
    "route": "/sys",
    "filter": true,
    "write_timeout": 6
  },
  "logging": {"log_level": "DEBUG"}
}`)
	sb.write(sb.userFile(), `{"websocket": {"route": "/user", "filter_logs": ["a.b"], "shutdown_timeout": 2},
 "logging": {"bus": {"log_level": "INFO"}}}`)
	sb.write(sb.xdgFile(1), `{"websocket": {"route": "/xdg1", "max_queue_bytes": 8388608}}`)
	sb.write(sb.xdgFile(0), `{"websocket": {"route": "/xdg0"}}`)
	busFile := sb.write(filepath.Join(sb.root, "bus.yaml"), "# the Rust bus's file\nwebsocket:\n  max_msg_size: 2\n  handshake_timeout: 3\n")
	sb.env["OVOS_BUS_CONFIG_FILE"] = busFile
	sb.env["OVOS_BUS_WRITE_TIMEOUT"] = "8"
	port := sb.usePort()
	flags := []string{"--max-queue-messages", "4242", "--handshake-timeout=9"}

	got, out := printConfig(t, sb, flags...)
	checkKeys(t, got, out, map[string]printedKey{
		"host":               {`"127.0.0.1"`, "distribution " + sb.distFile},
		"port":               {strconv.Itoa(port), "env OVOS_BUS_PORT"},
		"route":              {`"/xdg0"`, "xdg " + sb.xdgFile(0)},
		"filter":             {"true", "system " + sb.systemFile},
		"filter_logs":        {`["a.b"]`, "user " + sb.userFile()},
		"max_queue_bytes":    {"8388608", "xdg " + sb.xdgFile(1)},
		"max_msg_size":       {"2", "bus-file " + busFile},
		"handshake_timeout":  {"9", "flag --handshake-timeout"},
		"write_timeout":      {"8", "env OVOS_BUS_WRITE_TIMEOUT"},
		"shutdown_timeout":   {"2", "user " + sb.userFile()},
		"max_queue_messages": {"4242", "flag --max-queue-messages"},
		"shared_connection":  {"true", "default (bundled)"},
		"compression":        {"true", "built-in"}, // the remote cache may not touch websocket
		"log_level":          {`"INFO"`, "user " + sb.userFile() + " (logging.bus.log_level)"},
	})
	for _, p := range []string{sb.distFile, sb.webCache, sb.systemFile, sb.userFile(), sb.xdgFile(1), sb.xdgFile(0), busFile} {
		if !strings.Contains(out, p) {
			t.Errorf("--print-config does not list the file %s", p)
		}
	}

	// The running bus: the port from the environment, the route from the
	// highest XDG directory.
	b := sb.start(flags...)
	expectGreeting(t, dialGo(t, "ws://"+b.addr()+"/xdg0", nil))
	for _, other := range []string{"/core", "/user", "/sys", "/xdg1", "/remote"} {
		_, err := tryDialGo("ws://"+b.addr()+other, nil)
		var de *ws.DialError
		if !errors.As(err, &de) || de.StatusCode != 404 {
			t.Errorf("upgrade on %s: %v, want 404", other, err)
		}
	}
}

// TestConfigYAMLAndBaseFolder: OVOS_CONFIG_BASE_FOLDER and
// OVOS_CONFIG_FILENAME move the files; a .yaml name is YAML.
func TestConfigYAMLAndBaseFolder(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.env["OVOS_CONFIG_BASE_FOLDER"] = "neon"
	sb.env["OVOS_CONFIG_FILENAME"] = "neon.yaml"
	user := sb.write(filepath.Join(sb.configHome, "neon", "neon.yaml"), "websocket:\n  route: /neon  # a YAML comment\n  filter_logs:\n    - x\n")
	sb.write(sb.userFile(), `{"websocket": {"route": "/mycroft"}}`) // not read
	sb.usePort()
	got, out := printConfig(t, sb)
	checkKeys(t, got, out, map[string]printedKey{
		"route":       {`"/neon"`, "user " + user},
		"filter_logs": {`["x"]`, "user " + user},
	})
	b := sb.start()
	expectGreeting(t, dialGo(t, "ws://"+b.addr()+"/neon", nil))
}

// TestEnvOverrides: the OVOS_BUS_* variables beat every file, the flags beat
// the variables.
func TestEnvOverrides(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.write(sb.systemFile, `{"websocket": {"route": "/sys", "max_msg_size": 5, "ssl": true, "max_queue_messages": 7}}`)
	busFile := sb.write(filepath.Join(sb.root, "bus.json"), `{"websocket": {"route": "/busfile", "max_msg_size": 4}}`)
	sb.env["OVOS_BUS_CONFIG_FILE"] = busFile
	sb.env["OVOS_BUS_ROUTE"] = "/env"
	sb.env["OVOS_BUS_MAX_MSG_SIZE"] = "1.5"
	sb.env["OVOS_BUS_USE_SSL"] = "false"
	sb.env["OVOS_BUS_MSG_BUFFER_CAPACITY"] = "10"
	sb.env["OVOS_BUS_MAX_QUEUE_MESSAGES"] = "20"
	sb.env["OVOS_BUS_FILTER_LOGS"] = "x, y"
	sb.env["OVOS_BUS_HOST"] = "127.0.0.1"
	port := sb.usePort()

	got, out := printConfig(t, sb)
	checkKeys(t, got, out, map[string]printedKey{
		"host":               {`"127.0.0.1"`, "env OVOS_BUS_HOST"},
		"port":               {strconv.Itoa(port), "env OVOS_BUS_PORT"},
		"route":              {`"/env"`, "env OVOS_BUS_ROUTE"},
		"max_msg_size":       {"1.5", "env OVOS_BUS_MAX_MSG_SIZE"},
		"ssl":                {"false", "env OVOS_BUS_USE_SSL"},
		"max_queue_messages": {"20", "env OVOS_BUS_MAX_QUEUE_MESSAGES"},
		"filter_logs":        {`["x","y"]`, "env OVOS_BUS_FILTER_LOGS"},
	})

	got, out = printConfig(t, sb, "--route", "/flag", "--max-msg-size=3")
	checkKeys(t, got, out, map[string]printedKey{
		"route":        {`"/flag"`, "flag --route"},
		"max_msg_size": {"3", "flag --max-msg-size"},
	})

	t.Run("OVOS_BUS_USE_SSL empty", func(t *testing.T) {
		sb.env["OVOS_BUS_USE_SSL"] = ""
		defer func() { sb.env["OVOS_BUS_USE_SSL"] = "false" }()
		got, out := printConfig(t, sb)
		checkKeys(t, got, out, map[string]printedKey{"ssl": {"true", "env OVOS_BUS_USE_SSL"}})
	})

	b := sb.start()
	expectGreeting(t, dialGo(t, "ws://"+b.addr()+"/env", nil))
	for _, other := range []string{"/sys", "/busfile", "/core"} {
		_, err := tryDialGo("ws://"+b.addr()+other, nil)
		var de *ws.DialError
		if !errors.As(err, &de) || de.StatusCode != 404 {
			t.Errorf("upgrade on %s: %v, want 404", other, err)
		}
	}
}

// TestBadConfig: a bad value in a file, variable or flag stops the start
// with a non-zero exit and an error that names the file and line, or the key
// and what was expected; so does a file that cannot be parsed in strict mode
// (OVOS_BUS_STRICT_CONFIG=true; TestBrokenFileBesideGoodOne has the default).
func TestBadConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(sb *sandbox) []string // returns flags
		want  func(sb *sandbox) []string // substrings of stderr
	}{
		{"malformed JSON in the system file", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_STRICT_CONFIG"] = "true"
			sb.write(sb.systemFile, "{\n  \"websocket\": {\n    \"port\": 8181,,\n    \"route\": \"/core\"\n  }\n}\n")
			return nil
		}, func(sb *sandbox) []string { return []string{sb.systemFile + ":3"} }},
		{"malformed JSON after comment lines", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_STRICT_CONFIG"] = "true"
			sb.write(sb.userFile(), "// one\n# two\n{\"websocket\": {\n  \"route\": \"/x\"\n  \"port\": 1}}\n")
			return nil
		}, func(sb *sandbox) []string { return []string{sb.userFile() + ":5"} }},
		{"truncated system file", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_STRICT_CONFIG"] = "true"
			sb.write(sb.systemFile, "{\"websocket\": {\"port\": 8181}\n")
			return nil
		}, func(sb *sandbox) []string { return []string{sb.systemFile} }},
		{"port not a number", func(sb *sandbox) []string {
			// OVOS_BUS_PORT would override the file's port: values are
			// checked after the merge.
			delete(sb.env, "OVOS_BUS_PORT")
			sb.write(sb.systemFile, "{\n  \"websocket\": {\"port\": \"abc\"}\n}\n")
			return nil
		}, func(sb *sandbox) []string {
			return []string{sb.systemFile + ":2", "websocket.port", "expected", "abc"}
		}},
		{"negative max_msg_size", func(sb *sandbox) []string {
			sb.write(sb.xdgFile(0), `{"websocket": {"max_msg_size": -1}}`)
			return nil
		}, func(sb *sandbox) []string { return []string{sb.xdgFile(0), "websocket.max_msg_size", "expected"} }},
		{"route without a slash", func(sb *sandbox) []string {
			sb.write(sb.userFile(), `{"websocket": {"route": "core"}}`)
			return nil
		}, func(sb *sandbox) []string { return []string{sb.userFile() + ":1", "websocket.route", `"core"`} }},
		{"filter not a boolean", func(sb *sandbox) []string {
			sb.write(sb.systemFile, `{"websocket": {"filter": "sometimes"}}`)
			return nil
		}, func(sb *sandbox) []string {
			return []string{sb.systemFile, "websocket.filter", "expected", "sometimes"}
		}},
		{"unknown log level", func(sb *sandbox) []string {
			sb.write(sb.systemFile, `{"logging": {"log_level": "LOUD"}}`)
			return nil
		}, func(sb *sandbox) []string { return []string{sb.systemFile, "log_level", "LOUD"} }},
		{"malformed YAML bus file", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_STRICT_CONFIG"] = "true"
			sb.env["OVOS_BUS_CONFIG_FILE"] = sb.write(filepath.Join(sb.root, "bus.yaml"), "websocket:\n  port: 8181\n  route: [/core\n")
			return nil
		}, func(sb *sandbox) []string { return []string{filepath.Join(sb.root, "bus.yaml")} }},
		{"missing bus file", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_CONFIG_FILE"] = filepath.Join(sb.root, "nope.yaml")
			return nil
		}, func(sb *sandbox) []string { return []string{filepath.Join(sb.root, "nope.yaml")} }},
		{"malformed web cache", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_STRICT_CONFIG"] = "true"
			sb.write(sb.webCache, "{not json")
			return nil
		}, func(sb *sandbox) []string { return []string{sb.webCache} }},
		{"bad OVOS_BUS_PORT", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_PORT"] = "eighty"
			return nil
		}, func(sb *sandbox) []string { return []string{"OVOS_BUS_PORT", "websocket.port", "eighty"} }},
		{"port out of range", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_PORT"] = "70000"
			return nil
		}, func(sb *sandbox) []string { return []string{"OVOS_BUS_PORT", "websocket.port", "65535"} }},
		{"bad flag value", func(sb *sandbox) []string {
			return []string{"--max-msg-size=big"}
		}, func(sb *sandbox) []string { return []string{"--max-msg-size", "websocket.max_msg_size", "big"} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sb := newSandbox(t)
			sb.usePort()
			flags := tc.setup(sb)
			for _, mode := range [][]string{nil, {"--print-config"}} {
				res := sb.run(10*time.Second, append(append([]string{"serve"}, mode...), flags...)...)
				if res.code == 0 {
					t.Fatalf("serve %v exited 0 with a bad configuration\n%s", mode, res.output())
				}
				if strings.Contains(res.output(), startedLine) {
					t.Errorf("serve %v logged %q with a bad configuration", mode, startedLine)
				}
				for _, w := range tc.want(sb) {
					if !strings.Contains(res.stderr, w) {
						t.Errorf("serve %v: stderr does not contain %q:\n%s", mode, w, res.stderr)
					}
				}
				if mode == nil {
					t.Logf("stderr: %s", strings.TrimSpace(res.stderr))
				}
			}
		})
	}
}

// TestBindFailure: a port in use makes serve exit non-zero naming the
// address, without claiming to have started.
func TestBindFailure(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	sb := newSandbox(t)
	sb.env["OVOS_BUS_PORT"] = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	res := sb.run(runTimeout, "serve")
	if res.code == 0 {
		t.Fatalf("serve exited 0 with its port taken\n%s", res.output())
	}
	if strings.Contains(res.output(), startedLine) {
		t.Errorf("serve logged %q although the bind failed:\n%s", startedLine, res.output())
	}
	if !strings.Contains(res.stderr, addr) {
		t.Errorf("stderr does not name the address %s:\n%s", addr, res.stderr)
	}
	if !strings.Contains(res.output(), "in use") {
		t.Errorf("the output does not give the reason (address in use):\n%s", res.output())
	}
	t.Logf("exit %d, stderr: %s", res.code, strings.TrimSpace(res.stderr))
}

// TestFilterLog: with filter=true and the DEBUG level the bus logs, per
// message, `<type> source: <source> destination: <destination>` and
// `SESSION: <session>` as Python prints them (docs/protocol.md §4); filter_logs types are
// left out; delivery is unchanged.
func TestFilterLog(t *testing.T) {
	t.Parallel()
	logged := `{"type":"speak","data":{"utterance":"hi"},"context":{"source":"skills","destination":["audio","gui"],"session":{"session_id":"s1","active":true,"n":null}}}`
	bare := `{"type":"e2e.bare","data":{}}`
	quiet := `{"type":"gui.status.request","data":{},"context":{"source":"gui"}}`
	cases := []struct {
		name  string
		setup func(sb *sandbox) []string
		want  bool
	}{
		{"config", func(sb *sandbox) []string {
			sb.write(sb.userFile(), `{"websocket": {"filter": true}, "logging": {"log_level": "DEBUG"}}`)
			return nil
		}, true},
		{"flags", func(sb *sandbox) []string {
			sb.env["OVOS_BUS_FILTER"] = "true"
			return []string{"--log-level", "DEBUG"}
		}, true},
		{"filter off", func(sb *sandbox) []string {
			sb.write(sb.userFile(), `{"websocket": {"filter": false}, "logging": {"log_level": "DEBUG"}}`)
			return nil
		}, false},
		{"level INFO", func(sb *sandbox) []string {
			sb.write(sb.userFile(), `{"websocket": {"filter": true}, "logging": {"log_level": "INFO"}}`)
			return nil
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sb := newSandbox(t)
			sb.usePort()
			b := sb.start(tc.setup(sb)...)
			g := dialGo(t, b.url(), nil)
			connectAll(t, g)
			for _, m := range []string{quiet, logged, bare} {
				g.send(ws.OpText, []byte(m))
				expectFrame(t, g, ws.OpText, []byte(m))
			}
			if !tc.want {
				time.Sleep(300 * time.Millisecond)
				if out := b.output(); strings.Contains(out, "source:") || strings.Contains(out, "SESSION:") {
					t.Fatalf("filter lines logged:\n%s", out)
				}
				return
			}
			b.waitLog(5*time.Second, "DEBUG", "e2e.bare source: [] destination: []")
			out := b.stdout.String()
			want := "speak source: skills destination: ['audio', 'gui']\nSESSION: {'session_id': 's1', 'active': True, 'n': None}\n"
			if !strings.Contains(out, want) {
				t.Errorf("no filter lines %q in:\n%s", want, out)
			}
			if !strings.Contains(out, "e2e.bare source: [] destination: []\nSESSION: None") {
				t.Errorf("no filter lines for a message without context in:\n%s", out)
			}
			if strings.Contains(out, "gui.status.request source:") {
				t.Errorf("a filter_logs type was logged:\n%s", out)
			}
		})
	}
}
