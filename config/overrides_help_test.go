package config

import (
	"flag"
	"strings"
	"testing"
)

// TestFlagHelpNamesDefaults checks that every flag's help text says its
// built-in value and its variable.
func TestFlagHelpNamesDefaults(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	RegisterFlags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(f.Usage, "; default ") || !strings.Contains(f.Usage, "; env OVOS_BUS_") {
			t.Errorf("--%s: help %q does not name its default and variable", f.Name, f.Usage)
		}
	})
	if n != flagCount()+1 { // and --strict-config
		t.Fatalf("%d flags registered, want %d", n, flagCount()+1)
	}
	if fs.Lookup("port").Usage == "" || !strings.Contains(fs.Lookup("port").Usage, "default 8181") {
		t.Errorf("--port help %q", fs.Lookup("port").Usage)
	}
}

// flagCount is the number of keys with a flag.
func flagCount() int {
	n := 0
	for _, k := range keys {
		if k.flag != "" {
			n++
		}
	}
	return n
}
