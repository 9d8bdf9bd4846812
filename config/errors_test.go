package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestErrors: every case fails in strict mode with the whole message given. Without strict mode
// a file that cannot be read or parsed is skipped instead, with the same error in
// Provenance.Broken; every other case (a bad value, a variable, a flag) fails the same.
func TestErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		env   map[string]string
		flags []string
		want  string // the whole message, with ROOT for the fixture root
	}{
		{"json syntax after comments",
			map[string]string{systemConf: "// one\n// two\n{\n  \"websocket\": {\n    \"port\": 1,,\n  }\n}\n"}, nil, nil,
			"config: ROOT/" + systemConf + ":5:15: invalid JSON: invalid character ',' looking for beginning of object key string"},
		{"json truncated",
			map[string]string{systemConf: "{\n  \"websocket\": {\n"}, nil, nil,
			"config: ROOT/" + systemConf + ":3:1: invalid JSON: unexpected end of file"},
		{"json top level not an object",
			map[string]string{systemConf: "\n  [1, 2]"}, nil, nil,
			"config: ROOT/" + systemConf + ":2:3: invalid JSON: the top level must be an object, got '['"},
		{"json trailing data",
			map[string]string{systemConf: "{}\n{}"}, nil, nil,
			"config: ROOT/" + systemConf + ":2:1: invalid JSON: unexpected data after the top-level object"},
		{"yaml syntax",
			map[string]string{"bus.yaml": "websocket:\n  port: 1\n port: 2\n"}, map[string]string{"OVOS_BUS_CONFIG_FILE": "bus.yaml"}, nil,
			"config: ROOT/bus.yaml:2: invalid YAML: did not find expected key"},
		{"port type with position",
			map[string]string{systemConf: "{\n  \"websocket\": {\n    \"host\": \"x\",\n    \"port\": \"abc\"\n  }\n}"}, nil, nil,
			`config: ROOT/` + systemConf + `:4:5: websocket.port: expected an integer 0-65535, got "abc"`},
		{"port range yaml",
			map[string]string{userConf: `{"websocket": {"port": 70000}}`}, nil, nil,
			`config: ROOT/` + userConf + `:1:16: websocket.port: expected an integer 0-65535, got 70000`},
		{"route",
			map[string]string{userConf: `{"websocket": {"route": "core"}}`}, nil, nil,
			`config: ROOT/` + userConf + `:1:16: websocket.route: must start with "/", got "core"`},
		{"max_msg_size zero",
			map[string]string{userConf: `{"websocket": {"max_msg_size": 0}}`}, nil, nil,
			`config: ROOT/` + userConf + `:1:16: websocket.max_msg_size: expected a size in MiB greater than 0 and at most 4096, got 0`},
		{"bool",
			map[string]string{userConf: `{"websocket": {"ssl": "maybe"}}`}, nil, nil,
			`config: ROOT/` + userConf + `:1:16: websocket.ssl: expected true or false, got "maybe"`},
		{"list entry",
			map[string]string{userConf: `{"websocket": {"filter_logs": ["a", 2]}}`}, nil, nil,
			`config: ROOT/` + userConf + `:1:16: websocket.filter_logs: entry 1: expected a string, got 2`},
		{"websocket not an object",
			map[string]string{xdgConf: `{"websocket": true}`}, nil, nil,
			`config: ROOT/` + xdgConf + `:1:2: websocket: expected an object, got true`},
		{"env",
			nil, map[string]string{"OVOS_BUS_PORT": "abc"}, nil,
			`config: env OVOS_BUS_PORT: websocket.port: expected an integer 0-65535, got "abc"`},
		{"env empty host",
			nil, map[string]string{"OVOS_BUS_HOST": ""}, nil,
			`config: env OVOS_BUS_HOST: websocket.host: must not be empty (use 0.0.0.0 for every interface)`},
		{"flag",
			nil, nil, []string{"--max-msg-size", "big"},
			`config: flag --max-msg-size: websocket.max_msg_size: expected a size in MiB (a number greater than 0), got "big"`},
		{"log level",
			map[string]string{systemConf: `{"logging": {"bus": {"log_level": "LOUD"}}}`}, nil, nil,
			`config: ROOT/` + systemConf + `:1:22: logging.bus.log_level: expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got "LOUD"`},
		{"system constraint type",
			map[string]string{systemConf: `{"system": {"disable_user_config": "sure"}}`}, nil, nil,
			`config: ROOT/` + systemConf + `:1:13: system.disable_user_config: expected true or false, got "sure"`},
		{"auth required without tokens",
			map[string]string{systemConf: `{"websocket": {"auth": {"required": true}}}`}, nil, nil,
			`config: ROOT/` + systemConf + `:1:16: websocket.auth: required is true but no tokens are configured: no client could connect`},
		{"auth unknown key",
			map[string]string{systemConf: `{"websocket": {"auth": {"token": {}}}}`}, nil, nil,
			`config: ROOT/` + systemConf + `:1:25: websocket.auth.token: unknown key: expected "required", "tokens", "permissions", "loopback", "networks" or "anyone"`},
		{"auth misspelt permission hides the token",
			map[string]string{systemConf: `{"websocket": {"auth": {"tokens": {"secret-secret-secret": {"emits": ["x"]}}}}}`}, nil, nil,
			`config: ROOT/` + systemConf + `:1:61: websocket.auth.tokens["secr…"].emits: unknown key: expected "name", "permissions", "emit", "receive", "rate", "burst" or "reply_routing"`},
		{"metrics address",
			nil, nil, []string{"--metrics-address", "9181"},
			`config: flag --metrics-address: websocket.metrics_address: expected host:port such as "127.0.0.1:9181", got "9181"`},
		{"bus file missing",
			nil, map[string]string{"OVOS_BUS_CONFIG_FILE": "nope.json"}, nil,
			`config: ROOT/nope.json: file not found (named by OVOS_BUS_CONFIG_FILE)`},
		{"bus file bare section",
			map[string]string{"bus.yaml": "host: 0.0.0.0\nport: 1\n"}, map[string]string{"OVOS_BUS_CONFIG_FILE": "bus.yaml"}, nil,
			`config: ROOT/bus.yaml:1:1: host: OVOS_BUS_CONFIG_FILE is read for its "websocket" section: put this key under "websocket"`},
		{"unreadable",
			map[string]string{systemConf + "/inner": "{}"}, nil, nil,
			`config: ROOT/` + systemConf + `: cannot read: is a directory`},
		{"malformed remote cache",
			map[string]string{webCache: `{"a": }`}, nil, nil,
			`config: ROOT/` + webCache + `:1:7: invalid JSON: invalid character '}' looking for beginning of value`},
	}
	for _, tt := range tests {
		for _, strict := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/strict=%v", tt.name, strict), func(t *testing.T) {
				f := newFixture(t)
				for rel, content := range tt.files {
					f.write(rel, content)
				}
				for k, v := range tt.env {
					if k == "OVOS_BUS_CONFIG_FILE" {
						v = f.path(v)
					}
					f.env[k] = v
				}
				f.env[StrictEnv] = strconv.FormatBool(strict)
				want := strings.ReplaceAll(tt.want, "ROOT", f.root)
				_, p, err := f.load(tt.flags...)
				fileErr := strings.Contains(want, ": invalid JSON: ") || strings.Contains(want, ": invalid YAML: ") ||
					strings.Contains(want, ": cannot read: ")
				if fileErr && !strict {
					if err != nil {
						t.Fatalf("Load failed on a file it should skip: %v", err)
					}
					broken := p.Broken()
					if len(broken) != 1 || broken[0].Status != StatusSkipped || broken[0].Err.Error() != want {
						t.Fatalf("Broken() = %+v\nwant one skipped layer with %s", broken, want)
					}
					return
				}
				if err == nil {
					t.Fatal("Load succeeded")
				}
				var ce *Error
				if !errors.As(err, &ce) {
					t.Errorf("error %T is not an *Error", err)
				}
				if err.Error() != want {
					t.Errorf("error\n got %s\nwant %s", err, want)
				}
			})
		}
	}
}
