package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var updateExample = flag.Bool("update", false, "rewrite deploy/mycroft.conf from the key table")

// deploy/mycroft.conf is WriteExample's output, lists every key, and loads (as the user's file) to
// exactly the built-in configuration.
func TestExampleConf(t *testing.T) {
	var b bytes.Buffer
	if err := WriteExample(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "deploy", "mycroft.conf")
	if *updateExample {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, b.Bytes()) {
		t.Fatalf("%s differs from the key table: go test ./config -run TestExampleConf -update", path)
	}
	for _, k := range keys {
		name := k.name
		if _, sub, ok := strings.Cut(name, "."); ok {
			name = sub // written inside its section's object
		}
		if !strings.Contains(string(file), `"`+name+`":`) {
			t.Errorf("the example lacks %s", k.name)
		}
	}

	f := newFixture(t)
	f.write(userConf, string(file))
	got, prov, err := f.load()
	if err != nil {
		t.Fatal(err)
	}
	if len(prov.Warnings) > 0 {
		t.Errorf("warnings: %v", prov.Warnings)
	}
	def := Default()
	for _, k := range keys {
		if k.name == "log_file" {
			continue // null: made from $XDG_STATE_HOME at load time
		}
		if g, w := k.value(got), k.value(def); !reflect.DeepEqual(g, w) {
			t.Errorf("%s: the example loads as %v, the built-in value is %v", k.name, g, w)
		}
		if src := prov.Source(k.name); !strings.HasPrefix(src, "user ") {
			t.Errorf("%s comes from %q, not from the example", k.name, src)
		}
	}
}
