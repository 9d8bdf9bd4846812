package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() { register("version", "print the version, commit and Go version", runVersion) }

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ovbus version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fmt.Fprintln(stdout, versionString())
	return 0
}

// versionString reads the module version and the VCS stamp from the build
// information that the Go toolchain embeds.
func versionString() string {
	version, commit, modified := "(devel)", "unknown", false
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" {
			version = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if modified {
		commit += "+dirty"
	}
	return fmt.Sprintf("ovbus %s (commit %s, %s %s/%s)", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
