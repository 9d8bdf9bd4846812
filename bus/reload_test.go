package bus

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOptionTags: every field of Options has a name and a reload class
// that parse, and names are not shared except by the two compression
// fields.
func TestOptionTags(t *testing.T) {
	seen := map[string]int{}
	for _, o := range optionList() {
		if o.keep {
			continue
		}
		seen[o.name]++
		if r, ok := OptionReload(o.name); !ok || r != o.reload {
			t.Errorf("OptionReload(%q) = %v %v", o.name, r, ok)
		}
	}
	for name, n := range seen {
		if n > 1 && name != "compression" {
			t.Errorf("%d fields are named %q", n, name)
		}
	}
	if _, ok := OptionReload("logger"); ok {
		t.Error("Logger is not an option")
	}
	if typ := reflect.TypeFor[Options](); len(optionList()) != typ.NumField() {
		t.Errorf("optionList has %d fields, Options %d", len(optionList()), typ.NumField())
	}
}

func TestDiff(t *testing.T) {
	if live, restart := Diff(Options{}, Defaults()); live != nil || restart != nil {
		t.Errorf("zero options and Defaults differ: %v %v", live, restart)
	}
	old := Options{Addr: "127.0.0.1:8181"}
	new := Options{Addr: "127.0.0.1:9000", Port: 9000, Filter: true, DisableCompression: true, WriteTimeout: time.Second,
		Auth: Auth{Tokens: map[string]Permissions{"t": {Emit: []string{}}}}}
	live, restart := Diff(old, new)
	if got := strings.Join(live, ","); got != "auth,filter,write_timeout" {
		t.Errorf("live = %s", got)
	}
	// Addr followed the port: only the port is named.
	if got := strings.Join(restart, ","); got != "compression,port" {
		t.Errorf("restart = %s", got)
	}
	// A nil list (every type) and an empty one (none) differ.
	a := Options{Auth: Auth{Tokens: map[string]Permissions{"t": {}}}}
	if live, _ := Diff(a, new); !slices.Contains(live, "auth") {
		t.Errorf("nil and empty emit lists compare equal: %v", live)
	}
}

// TestApplyKeepsRestartOptions: what Apply reports as needing a restart is
// what it keeps, compression included (publish encodes with the options New
// was given).
func TestApplyKeepsRestartOptions(t *testing.T) {
	s, _ := testServer(t, Options{})
	before := s.Live()
	changed, restart, err := s.Apply(Options{Addr: before.Addr, DisableCompression: true, Route: "/other", Filter: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"filter"}) || !slices.Equal(restart, []string{"compression", "route"}) {
		t.Errorf("changed %v restart %v", changed, restart)
	}
	after := s.Live()
	if after.DisableCompression || after.Route != before.Route || !after.Filter || after.Logger != before.Logger {
		t.Errorf("Apply changed a restart option or missed a live one: %+v", after)
	}
}

func TestValidateNamesTheOption(t *testing.T) {
	for _, tt := range []struct {
		o      Options
		option string
	}{
		{Options{Port: 70000}, "port"},
		{Options{Route: "core"}, "route"},
		{Options{MaxMsgSize: 2 << 20, MaxQueueBytes: 1 << 20}, "max_queue_bytes"},
		{Options{Addr: "127.0.0.1:8181", MetricsAddress: "127.0.0.1:8181"}, "metrics_address"},
		{Options{Auth: Auth{Required: true}}, "auth"},
		{Options{AllowedOrigins: []string{" "}}, "allowed_origins"},
	} {
		var oe *OptionError
		if err := tt.o.Validate(); !errors.As(err, &oe) || oe.Option != tt.option {
			t.Errorf("Validate(%+v) = %v, want an error for %s", tt.o, err, tt.option)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	// A large max_msg_size raises the default queue bound with it.
	if err := (Options{MaxMsgSize: 100 << 20}).Validate(); err != nil {
		t.Errorf("large max_msg_size with the default queue: %v", err)
	}
}
