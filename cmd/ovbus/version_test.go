package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "ovbus ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("unexpected version line %q", out.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"nope"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Fatalf("stderr %q", errb.String())
	}
}

func TestHelpListsCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for name := range commands {
		if !strings.Contains(out.String(), name) {
			t.Errorf("help does not list %q:\n%s", name, out.String())
		}
	}
}

func TestVersionFlagAndStamp(t *testing.T) {
	defer func(v, c, d string) { version, commit, buildDate = v, c, d }(version, commit, buildDate)
	version, commit, buildDate = "v1.2.3", "0123456789ab", "2026-12-01T10:00:00Z"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		want := "ovbus v1.2.3 (commit 0123456789ab, built 2026-12-01T10:00:00Z, go1."
		if !strings.HasPrefix(out.String(), want) {
			t.Errorf("%v: %q, want prefix %q", args, out.String(), want)
		}
	}
}

func TestHelpCommand(t *testing.T) {
	for name := range commands {
		var out, errb bytes.Buffer
		if code := run([]string{"help", name}, &out, &errb); code != 0 {
			t.Errorf("help %s: exit %d, stderr %q", name, code, errb.String())
		}
		if name != "version" && !strings.Contains(out.String(), "Usage: ovbus "+name) {
			t.Errorf("help %s: stdout %q", name, out.String())
		}
		if errb.Len() != 0 {
			t.Errorf("help %s: stderr %q", name, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"help", "nope"}, &out, &errb); code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// A mistake prints the error and a pointer to --help on stderr, once; --help prints the help on
// stdout, once.
func TestHelpOnce(t *testing.T) {
	oneDash := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, name := range []string{"serve", "listen", "send", "bench", "loadtest", "version"} {
		var out, errb bytes.Buffer
		if code := run([]string{name, "--no-such-flag"}, &out, &errb); code != 2 {
			t.Errorf("%s --no-such-flag: exit %d", name, code)
		}
		if out.Len() != 0 || strings.Count(errb.String(), "Usage: ovbus "+name) != 1 || strings.Contains(errb.String(), "Flags:") {
			t.Errorf("%s --no-such-flag: stdout %q, stderr %q", name, out.String(), errb.String())
		}
		out.Reset()
		errb.Reset()
		if code := run([]string{name, "--help"}, &out, &errb); code != 0 {
			t.Errorf("%s --help: exit %d", name, code)
		}
		if errb.Len() != 0 || strings.Count(out.String(), "Usage: ovbus "+name) != 1 {
			t.Errorf("%s --help: stdout %q, stderr %q", name, out.String(), errb.String())
		}
		if l := oneDash.FindString(out.String()); l != "" {
			t.Errorf("%s --help: a flag in the -flag style: %q (want --flag)", name, l)
		}
	}
}
