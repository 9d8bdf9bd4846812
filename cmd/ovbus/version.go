package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

func init() { register("version", "print the version, commit, build date and Go version", runVersion) }

// Stamped by `make release` with -ldflags "-X main.version=… -X main.commit=… -X main.buildDate=…".
// A plain `go build` or `go install` from a checkout leaves them empty; the commit then comes from
// the VCS information the Go toolchain embeds.
var (
	version   string
	commit    string
	buildDate string
)

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "ovbus version\n\nPrints the version, the commit and the build date stamped in by make release (or the\ncommit the Go toolchain recorded), and the Go version and platform. Same as ovbus --version.", "", stderr)
	if code, ok := parseFlagsOnly(fs, args, stdout, stderr, ""); !ok {
		return code
	}
	fmt.Fprintln(stdout, versionString())
	return 0
}

// buildVCS returns the commit the binary was built from, with "+dirty" when the tree had
// uncommitted changes: the one make release stamped, else the VCS stamp of the build
// information; "unknown" when there is none (go run, go test, a build outside a checkout,
// -buildvcs=false).
func buildVCS() string {
	if commit != "" {
		return commit
	}
	rev, modified := "unknown", false
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		rev += "+dirty"
	}
	return rev
}

// versionString is the line of `ovbus version` and `ovbus --version`: the stamped version, commit
// and build date, or what the build information knows.
func versionString() string {
	v, c, d := version, commit, buildDate
	if v == "" {
		v = "(devel)"
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
			v = info.Main.Version
		}
	}
	if c == "" {
		c = buildVCS()
		if hex, dirty, _ := strings.Cut(c, "+"); len(hex) > 12 {
			c = hex[:12] + strings.TrimSuffix("+"+dirty, "+")
		}
	}
	date := ""
	if d != "" {
		date = ", built " + d
	}
	return fmt.Sprintf("ovbus %s (commit %s%s, %s %s/%s)", v, c, date, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// userAgent is the User-Agent header of listen and send (the bus's monitor and Sessions show it):
// ovbus/VERSION, the version without its leading v, "devel" for a build with no version stamped.
func userAgent() string {
	v := version
	if v == "" {
		v = "devel"
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
	}
	return "ovbus/" + strings.TrimPrefix(v, "v")
}
