package main

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
)

// The systemd units of deploy/systemd: each scope's unit and the drop-in for ovos-installer's
// ovos-messagebus.service.
const systemdDir = "../../deploy/systemd"

// unitFile is a parsed unit or drop-in: section, key, every value in order (an empty value is
// kept: it clears what came before).
type unitFile map[string]map[string][]string

func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: not a key=value line of a section: %q", path, n, line)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// over returns u with the drop-in d applied, as systemd reads them: d's values follow u's.
func (u unitFile) over(d unitFile) unitFile {
	out := unitFile{}
	for _, src := range []unitFile{u, d} {
		for s, keys := range src {
			if out[s] == nil {
				out[s] = map[string][]string{}
			}
			for k, vs := range keys {
				out[s][k] = append(out[s][k], vs...)
			}
		}
	}
	return out
}

// list is what a list setting (ExecStart, ExecStop, ...) holds: the values after the last
// empty one.
func (u unitFile) list(key string) []string {
	vs := u["Service"][key]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i] == "" {
			return vs[i+1:]
		}
	}
	return vs
}

// value is what a single-valued setting holds: its last value, "" when unset.
func (u unitFile) value(key string) string {
	vs := u["Service"][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// hardening is the sandboxing of a unit: every [Service] setting but how it starts and stops.
func (u unitFile) hardening() map[string][]string {
	out := maps.Clone(u["Service"])
	for _, k := range []string{"Type", "NotifyAccess", "User", "Group", "ExecStart", "ExecReload", "ExecStop", "KillSignal",
		"TimeoutStopSec", "Restart", "RestartSec", "LimitNOFILE", "LogsDirectory", "LogsDirectoryMode", "Environment"} {
		delete(out, k)
	}
	return out
}

// The settings every ovbus unit needs, whatever its scope.
func checkServeUnit(t *testing.T, name string, u unitFile) {
	t.Helper()
	for k, want := range map[string]string{"Type": "notify", "NotifyAccess": "main", "KillSignal": "SIGTERM",
		"UMask": "0027", "NoNewPrivileges": "yes", "MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native",
		"RestrictNamespaces": "yes", "LockPersonality": "yes", "SystemCallErrorNumber": "EPERM"} {
		if got := u.value(k); got != want {
			t.Errorf("%s: %s=%q, want %q", name, k, got, want)
		}
	}
	// Stop is systemd's SIGTERM, given the time serve's drain takes (serve waits shutdown_timeout
	// plus 5 s for the shutdown before it gives up).
	if stop := u.list("ExecStop"); len(stop) != 0 {
		t.Errorf("%s: ExecStop=%q: stop must be systemd's SIGTERM (the drain), not a command", name, stop)
	}
	if d, err := time.ParseDuration(u.value("TimeoutStopSec")); err != nil || d <= bus.DefaultShutdownTimeout+5*time.Second {
		t.Errorf("%s: TimeoutStopSec=%q (%v), want more than shutdown_timeout + 5 s", name, u.value("TimeoutStopSec"), err)
	}
	if got := u.list("ExecReload"); len(got) != 1 || got[0] != "/bin/kill -HUP $MAINPID" {
		t.Errorf("%s: ExecReload=%q, want only the SIGHUP that reloads the configuration", name, got)
	}
	start := u.list("ExecStart")
	if len(start) != 1 || !strings.HasSuffix(start[0], "/ovbus serve") {
		t.Fatalf("%s: ExecStart=%q, want one `.../ovbus serve`", name, start)
	}
	if n, err := strconv.Atoi(u.value("LimitNOFILE")); err != nil || n < 65536 {
		t.Errorf("%s: LimitNOFILE=%q", name, u.value("LimitNOFILE"))
	}
	if fams := u.value("RestrictAddressFamilies"); fams != "AF_UNIX AF_INET AF_INET6 AF_NETLINK" {
		t.Errorf("%s: RestrictAddressFamilies=%q", name, fams)
	}
	if got := u["Service"]["SystemCallFilter"]; !slices.Equal(got, []string{"@system-service", "~@privileged @resources"}) {
		t.Errorf("%s: SystemCallFilter=%q", name, got)
	}
}

// TestSystemdUnits checks the units and drop-ins of deploy/systemd, and each drop-in laid over a
// model of ovos-installer's ovos-messagebus.service of its scope (cmd/ovbus/testdata).
func TestSystemdUnits(t *testing.T) {
	for _, scope := range []string{"user", "system"} {
		t.Run(scope, func(t *testing.T) {
			unitPath := filepath.Join(systemdDir, scope, "ovbus.service")
			dropPath := filepath.Join(systemdDir, scope, "ovos-messagebus.service.d", "ovbus.conf")
			unit, drop := readUnit(t, unitPath), readUnit(t, dropPath)
			installer := readUnit(t, filepath.Join("testdata", "ovos-installer", scope, "ovos-messagebus.service"))
			if stop := installer.list("ExecStop"); len(stop) != 1 || !strings.Contains(stop[0], "KILL") {
				t.Fatalf("the model of ovos-installer's unit stops with %q, not kill -s KILL", stop)
			}
			swapped := installer.over(drop)
			checkServeUnit(t, unitPath, unit)
			checkServeUnit(t, dropPath+" over ovos-installer's unit", swapped)
			if !maps.EqualFunc(unit.hardening(), drop.hardening(), slices.Equal) {
				t.Errorf("the hardening of %s and %s differ:\n%v\n%v", unitPath, dropPath, unit.hardening(), drop.hardening())
			}
			if got, want := swapped.list("ExecStart"), unit.list("ExecStart"); !slices.Equal(got, want) {
				t.Errorf("the drop-in starts %q, the unit %q", got, want)
			}

			switch scope {
			case "user":
				// %h is the home of the user whose manager runs the unit: right here.
				if start := unit.list("ExecStart")[0]; !strings.HasPrefix(start, "%h/") {
					t.Errorf("ExecStart=%q: the user scope runs ~/.local/bin/ovbus", start)
				}
				// A user manager fails a unit that drops capabilities (218/CAPABILITIES), and
				// ignores mount namespaces before systemd 253: none of them here.
				for _, u := range []unitFile{unit, drop} {
					for _, k := range []string{"CapabilityBoundingSet", "AmbientCapabilities", "ProtectSystem", "ProtectHome",
						"PrivateTmp", "PrivateDevices", "PrivateUsers", "ProtectKernelModules", "User", "Group"} {
						if _, ok := u["Service"][k]; ok {
							t.Errorf("%s in a user unit", k)
						}
					}
				}
			case "system":
				// %h is root's home in a system unit, whatever User= says.
				for _, p := range []string{unitPath, dropPath} {
					for k, vs := range readUnit(t, p)["Service"] {
						for _, v := range vs {
							if strings.Contains(v, "%h") {
								t.Errorf("%s: %s=%s: %%h is /root in the system scope", p, k, v)
							}
						}
					}
				}
				if start := unit.list("ExecStart")[0]; !strings.HasPrefix(start, "/") {
					t.Errorf("ExecStart=%q, want an absolute path", start)
				}
				if unit.value("User") == "" || unit.value("User") == "root" || swapped.value("User") != installer.value("User") {
					t.Errorf("User=%q, over ovos-installer's unit %q", unit.value("User"), swapped.value("User"))
				}
				for k, want := range map[string]string{"ProtectSystem": "strict", "ProtectHome": "read-only",
					"CapabilityBoundingSet": "", "PrivateTmp": "yes", "PrivateDevices": "yes", "ProtectKernelTunables": "yes"} {
					if vs := unit["Service"][k]; len(vs) == 0 || unit.value(k) != want {
						t.Errorf("%s=%q, want %q", k, vs, want)
					}
				}
				// The home is read-only: the log goes to LogsDirectory=, which systemd makes for User=.
				for _, u := range []unitFile{unit, swapped} {
					logs := u.value("LogsDirectory")
					if env := u["Service"]["Environment"]; logs == "" || !slices.Contains(env, "OVOS_BUS_LOG_FILE=%L/"+logs+"/bus.log") {
						t.Errorf("LogsDirectory=%q, Environment=%q: want the log file in the logs directory", logs, env)
					}
				}
			}
			analyzeSecurity(t, scope, unitPath, dropPath)
		})
	}
}

// exposureLine is the verdict of `systemd-analyze security`.
var exposureLine = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) `)

// maxExposure is the worst `systemd-analyze security` may rate a scope's units. A user service
// keeps the points of capabilities it never holds and of the namespaces a user manager cannot set
// up; the system scope has the full sandbox (the unit of before rated 9.6 UNSAFE).
var maxExposure = map[string]float64{"user": 6.5, "system": 2.0}

// analyzeSecurity rates the unit, and the drop-in laid over the model of ovos-installer's unit,
// with systemd-analyze (offline: nothing is started), when it is installed.
func analyzeSecurity(t *testing.T, scope, unitPath, dropPath string) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze is not installed (scripts/install-test-deps.sh installs it): exposure not rated")
		return
	}
	// A drop-in's settings come after the unit's, as if appended to it: the unit with the drop-in
	// appended is what systemd runs.
	dir := t.TempDir()
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := map[string][]byte{
		"ovbus.service": read(unitPath),
		"ovos-messagebus.service": slices.Concat(read(filepath.Join("testdata", "ovos-installer", scope, "ovos-messagebus.service")),
			[]byte("\n"), read(dropPath)),
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"security", "--offline=true", "--no-pager", path}
		if scope == "user" {
			args = append([]string{"--user"}, args...)
		}
		cmd := exec.Command("systemd-analyze", args...)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir(), "SYSTEMD_COLORS=0")
		out, err := cmd.CombinedOutput()
		m := exposureLine.FindSubmatch(out)
		if m == nil {
			if strings.Contains(string(out), "--offline") {
				t.Logf("this systemd-analyze cannot rate units offline (systemd 250 or later can): %s", out)
				return
			}
			t.Fatalf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		score, _ := strconv.ParseFloat(string(m[1]), 64)
		t.Logf("systemd-analyze security, %s scope, %s: %.1f", scope, name, score)
		if score > maxExposure[scope] {
			t.Errorf("%s scope, %s: exposure %.1f, want at most %.1f\n%s", scope, name, score, maxExposure[scope], out)
		}
	}
}
