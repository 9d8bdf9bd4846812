package config

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bus"
)

// otherValue returns a value of k's kind, as a file would write it, that
// differs from k's built-in value.
func otherValue(t *testing.T, k *key) any {
	def := Default()
	switch k.kind {
	case kindString, kindFile, kindSecret:
		return "/other:1"
	case kindHost:
		return "0.0.0.0"
	case kindBool, kindNotBool:
		return !k.value(def).(bool)
	case kindPort:
		return int64(1234)
	case kindCount, kindCountOrZero:
		return int64(7)
	case kindBytes, kindBytesOrZero:
		return int64(1 << 30)
	case kindMiB:
		return 1.5
	case kindSeconds:
		return 3.5
	case kindDrain:
		return 0.0
	case kindOffZero:
		return int64(0)
	case kindList:
		return []any{"x"}
	case kindAuth:
		return map[string]any{"required": true, "tokens": map[string]any{"t": nil}}
	}
	t.Fatalf("%s: no test value for its kind", k.name)
	return nil
}

// TestKeysReachTheBus sets every key of the table to another value, as a
// file would, and checks that exactly that key changes: in bus.Options
// under the same name for a bus key (so the row points at the field the
// bus names so), in Config alone for a key of config's own; and that the
// reload class Diff reports is the row's.
func TestKeysReachTheBus(t *testing.T) {
	for i := range keys {
		k := &keys[i]
		if (k.bus == nil) == (k.own == nil) {
			t.Errorf("%s: a row sets exactly one of bus and own", k.name)
			continue
		}
		def, c := Default(), Default()
		if k.kind == kindLevel {
			c.LogLevel = "DEBUG"
		} else if k.kind == kindAuth {
			a, err := decodeAuth(newMerger(), otherValue(t, k))
			if err != nil {
				t.Fatal(err)
			}
			c.Bus.Auth = a
		} else if err := k.kind.decode(otherValue(t, k), k.field(c)); err != nil {
			t.Errorf("%s: decode: %v", k.name, err)
			continue
		}
		busLive, busRestart := bus.Diff(def.Options(), c.Options())
		busChanged := slices.Concat(busLive, busRestart)
		live, restart := Diff(def, c)
		if k.bus != nil {
			if !slices.Equal(busChanged, []string{k.name}) {
				t.Errorf("%s: bus.Diff = %v, want the bus option %s", k.name, busChanged, k.name)
			}
			if r, ok := bus.OptionReload(k.name); !ok || r != k.when() {
				t.Errorf("%s: bus.OptionReload = %v %v, row says %v", k.name, r, ok, k.when())
			}
		} else if len(busChanged) > 0 {
			t.Errorf("%s: a key of config's own changed the bus options %v", k.name, busChanged)
		}
		want := []string{k.name}
		if k.when() == bus.Live {
			if !slices.Equal(live, want) || restart != nil {
				t.Errorf("%s: Diff = live %v restart %v, want live", k.name, live, restart)
			}
		} else if !slices.Equal(restart, want) || live != nil {
			t.Errorf("%s: Diff = live %v restart %v, want restart", k.name, live, restart)
		}
	}
}

// TestEveryBusOptionHasAKey: each tagged field of bus.Options is a row of
// the table, except address (host and port make it) and ssl (the serve
// command makes TLSConfig from the ssl, ssl_cert and ssl_key keys).
func TestEveryBusOptionHasAKey(t *testing.T) {
	typ := reflect.TypeFor[bus.Options]()
	for i := range typ.NumField() {
		tag, ok := typ.Field(i).Tag.Lookup("ovbus")
		name, _, _ := strings.Cut(tag, ",")
		if !ok || name == "-" || name == "address" || name == "ssl" {
			continue
		}
		if k := lookupKey(name); k == nil || k.bus == nil {
			t.Errorf("bus.Options.%s (%s) has no row in the key table", typ.Field(i).Name, name)
		}
	}
}

// TestDefaultsAreTheBus: config's built-in values of the bus's keys are
// what the bus makes of a zero Options.
func TestDefaultsAreTheBus(t *testing.T) {
	if live, restart := bus.Diff(bus.Options{}, Default().Options()); live != nil || restart != nil {
		t.Errorf("Default() differs from the bus's defaults in %v %v", live, restart)
	}
}

// TestDocTableReload: the reload column of the package documentation says
// what the key table says.
func TestDocTableReload(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(string(doc), "\n") {
		fields := strings.Fields(strings.TrimPrefix(line, "//"))
		if len(fields) < 2 || !strings.HasPrefix(line, "//\t") {
			continue
		}
		k := lookupKey(strings.TrimSuffix(fields[0], ","))
		if k == nil {
			continue
		}
		for _, f := range fields {
			if f == "live" || f == "restart" {
				seen++
				if f != k.when().String() {
					t.Errorf("doc.go says %s is %s, the table %s", k.name, f, k.when())
				}
				break
			}
		}
	}
	if seen < len(keys)-2 { // log_level is described in prose; shared_connection is checked
		t.Errorf("doc.go's key table names the reload of %d keys, want at least %d", seen, len(keys)-2)
	}
}
