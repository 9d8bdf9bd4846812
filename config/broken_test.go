package config

import (
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bus"
)

// TestBrokenFileSkipped: a file that cannot be parsed is left out and the others apply, as
// ovos-config does; Print lists the error; a bad value beside it still fails the load.
func TestBrokenFileSkipped(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"port": 8191, "route": "/sys"}}`)
	broken := f.write(userConf, "{\n  \"websocket\": {\"route\": \"/user\",,}\n}\n")
	c, p := f.mustLoad()
	if c.Bus.Port != 8191 || c.Bus.Route != "/sys" {
		t.Errorf("port %d route %q: want the system file's 8191 and /sys", c.Bus.Port, c.Bus.Route)
	}
	b := p.Broken()
	if len(b) != 1 || b[0].Name != "user" || b[0].Path != broken || b[0].Status != StatusSkipped {
		t.Fatalf("Broken() = %+v", b)
	}
	if want := "config: " + broken + ":2:34: invalid JSON: "; !strings.HasPrefix(b[0].Err.Error(), want) {
		t.Errorf("error %q does not start with %q", b[0].Err, want)
	}
	var out strings.Builder
	if err := c.Print(&out, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "# error: config: "+broken+":2:34: invalid JSON") ||
		!regexp.MustCompile(`(?m)^#   user +`+regexp.QuoteMeta(broken)+` +`+regexp.QuoteMeta(StatusSkipped)+`$`).MatchString(out.String()) {
		t.Errorf("Print does not show the skipped file:\n%s", out.String())
	}

	// A bad value is an error even beside a skipped file.
	f.write(xdgConf, `{"websocket": {"max_queue_messages": "many"}}`)
	if _, _, err := f.load(); err == nil || !strings.Contains(err.Error(), f.path(xdgConf)+":1:16: websocket.max_queue_messages: expected") {
		t.Errorf("bad value beside a broken file: %v", err)
	}
}

// TestBrokenFileOnReload: on a reload (LoadOptions.Previous) a file that no longer parses keeps
// the version read before, as ovos-config's LocalConf keeps its keys; a file that never parsed
// is skipped; once fixed, the file is read again.
func TestBrokenFileOnReload(t *testing.T) {
	f := newFixture(t)
	sys := f.write(systemConf, `{"websocket": {"port": 8191, "filter": true}}`)
	user := f.write(userConf, `{"websocket": {"route": "/never"`)
	reload := func(prev *Provenance) (*Config, *Provenance) {
		t.Helper()
		c, p, err := Load(LoadOptions{LookupEnv: f.lookup, Previous: prev})
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		return c, p
	}
	_, p0 := reload(nil)

	f.write(systemConf, `{"websocket": {"port": 9999, "filter": false`) // broken mid-edit
	c, p1 := reload(p0)
	if c.Bus.Port != 8191 || !c.Bus.Filter {
		t.Errorf("port %d filter %v: want the previous version's 8191 and true", c.Bus.Port, c.Bus.Filter)
	}
	b := p1.Broken()
	if len(b) != 2 || b[0].Path != sys || b[0].Status != StatusKept || b[1].Path != user || b[1].Status != StatusSkipped {
		t.Fatalf("Broken() = %+v", b)
	}
	if got, want := p1.Source("port"), "system "+sys+" (previous version)"; got != want {
		t.Errorf("Source(port) = %q, want %q", got, want)
	}

	// Still broken at the next reload: still the version read whole before.
	c, p2 := reload(p1)
	if c.Bus.Port != 8191 {
		t.Errorf("second reload: port %d, want 8191", c.Bus.Port)
	}
	f.write(systemConf, `{"websocket": {"port": 9999}}`)
	c, p3 := reload(p2)
	if c.Bus.Port != 9999 || c.Bus.Filter || len(p3.Broken()) != 1 {
		t.Errorf("fixed: port %d filter %v broken %+v", c.Bus.Port, c.Bus.Filter, p3.Broken())
	}
	// A fresh start has no previous version: the broken file is skipped.
	f.write(systemConf, `{"websocket": {"port": 1,}}`)
	if c, _ := reload(nil); c.Bus.Port != bus.DefaultPort {
		t.Errorf("start: port %d, want the default", c.Bus.Port)
	}
}

// TestStrictMode: --strict-config beats OVOS_BUS_STRICT_CONFIG, LoadOptions.Strict beats both;
// a variable that is not a boolean is an error naming it.
func TestStrictMode(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"port": 1,}}`)
	for _, tc := range []struct {
		env    string
		flags  []string
		strict bool
		fails  bool
	}{
		{"", nil, false, false},
		{"true", nil, false, true},
		{"yes", []string{"--strict-config=false"}, false, false},
		{"false", []string{"--strict-config"}, false, true},
		{"0", nil, true, true},
	} {
		f.env[StrictEnv] = tc.env
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fo := RegisterFlags(fs)
		if err := fs.Parse(tc.flags); err != nil {
			t.Fatal(err)
		}
		_, _, err := Load(LoadOptions{LookupEnv: f.lookup, Flags: fo, Strict: tc.strict})
		if (err != nil) != tc.fails {
			t.Errorf("env %q flags %v Strict %v: error %v, want failure %v", tc.env, tc.flags, tc.strict, err, tc.fails)
		}
	}
	f.env[StrictEnv] = "maybe"
	if _, _, err := f.load(); err == nil || err.Error() != `config: env OVOS_BUS_STRICT_CONFIG: expected true or false, got "maybe"` {
		t.Errorf("bad variable: %v", err)
	}
}

// TestBrokenDefaultAndBusFile: the default file of OVOS_DEFAULT_CONFIG and OVOS_BUS_CONFIG_FILE
// are files of the stack too: skipped when they cannot be parsed (without the "does not exist"
// warning); a bus file that does not exist stays an error (a bad value of the variable).
func TestBrokenDefaultAndBusFile(t *testing.T) {
	f := newFixture(t)
	f.env["OVOS_DEFAULT_CONFIG"] = f.write("defaults.conf", `{"websocket": {"port": 7}`)
	f.env["OVOS_BUS_CONFIG_FILE"] = f.write("bus.yaml", "websocket:\n  port: [1\n")
	c, p := f.mustLoad()
	if c.Bus.Port != bus.DefaultPort || len(p.Broken()) != 2 || len(p.Warnings) != 0 {
		t.Errorf("port %d broken %+v warnings %q", c.Bus.Port, p.Broken(), p.Warnings)
	}
	f.env["OVOS_BUS_CONFIG_FILE"] = f.path("missing.yaml")
	if _, _, err := f.load(); err == nil || !strings.Contains(err.Error(), "file not found") {
		t.Errorf("missing bus file: %v", err)
	}
}
