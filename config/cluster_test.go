package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The websocket.cluster keys' mutations, for TestDiffCoversEveryKey: each
// changes its field to another value of its type.
func init() {
	for i := range keys {
		k := &keys[i]
		if !strings.HasPrefix(k.name, "cluster.") {
			continue
		}
		mutations[k.name] = func(c *Config) {
			v := reflect.ValueOf(k.field(c)).Elem()
			switch p := k.field(c).(type) {
			case *bool:
				*p = !*p
			case *[]string:
				*p = append(*p, "nats://x:6222")
			case *time.Duration:
				*p += time.Second
			default:
				switch v.Kind() {
				case reflect.String:
					v.SetString(v.String() + "x")
				case reflect.Int, reflect.Int64:
					v.SetInt(v.Int() + 1)
				}
			}
		}
	}
}

func TestClusterKeys(t *testing.T) {
	f := newFixture(t)
	f.write(userConf, `{"websocket": {"cluster": {"name": "home", "listen": "127.0.0.1:6222",
		"routes": ["nats://127.0.0.1:6223"], "stream_max_age": 30, "colour": "blue"}}}`)
	f.env["OVOS_BUS_CLUSTER_ORDER"] = "sender"
	c, p := f.mustLoad("--cluster-node-name", "kitchen")
	o := c.ClusterOptions()
	if !o.Enabled() || o.Name != "home" || o.Listen != "127.0.0.1:6222" || len(o.Routes) != 1 || o.Order != "sender" ||
		o.NodeName != "kitchen" || o.StreamMaxAge != 30*time.Second || o.MaxMsgSize != c.Bus.MaxMsgSize {
		t.Errorf("cluster options = %+v", o)
	}
	for key, want := range map[string]string{"cluster.name": "user ", "cluster.order": "env OVOS_BUS_CLUSTER_ORDER",
		"cluster.node_name": "flag --cluster-node-name", "cluster.max_inflight": "built-in"} {
		if got := p.Source(key); !strings.HasPrefix(got, want) {
			t.Errorf("Source(%s) = %q, want %q…", key, got, want)
		}
	}
	if !strings.Contains(strings.Join(p.Warnings, "\n"), "websocket.cluster.colour: unknown key") {
		t.Errorf("no warning for the unknown cluster key: %q", p.Warnings)
	}
	var b strings.Builder
	c.Print(&b, p)
	if !strings.Contains(b.String(), `cluster.order             "sender"`) && !strings.Contains(b.String(), `"sender"`) {
		t.Errorf("Print does not show cluster.order:\n%s", b.String())
	}
}

func TestClusterOffByDefault(t *testing.T) {
	c, _ := newFixture(t).mustLoad()
	if o := c.ClusterOptions(); o.Enabled() {
		t.Error("cluster enabled by default")
	}
}

func TestClusterKeyErrors(t *testing.T) {
	cases := []struct{ conf, key, msg string }{
		{`{"nats_url": "nats://a:4222", "listen": "0.0.0.0:6222"}`, "websocket.cluster.nats_url", "websocket.cluster.listen"},
		{`{"routes": ["nats://a:6222"]}`, "websocket.cluster.listen", "routes need listen"},
		{`{"listen": "0.0.0.0:6222", "order": "causal"}`, "websocket.cluster.order", `"total" or "sender"`},
		{`"on"`, "websocket.cluster", "expected an object"},
	}
	for _, tc := range cases {
		f := newFixture(t)
		f.write(userConf, `{"websocket": {"cluster": `+tc.conf+`}}`)
		_, _, err := f.load()
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Load = %v, want an error at %s saying %q", tc.conf, err, tc.key, tc.msg)
		}
	}
}

// TestRuleErrorNamesWhoSetIt: an error between keys whose first key holds
// its built-in value names where the other key of the rule was set (a
// file and line, a variable), or "built-in" when no layer set any of them,
// never the last layer that set some other key of the section.
func TestRuleErrorNamesWhoSetIt(t *testing.T) {
	f := newFixture(t)
	conf := f.write(userConf, "{\"websocket\": {\"cluster\": {\n  \"routes\": [\"nats://a:6222\"]}}}")
	_, _, err := f.load("--cluster-name", "home")
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "websocket.cluster.listen" || ce.File != conf || ce.Line != 2 {
		t.Errorf("routes in a file: Load = %v (file %q line %d), want websocket.cluster.listen at %s:2", err, ce.File, ce.Line, conf)
	}

	f = newFixture(t)
	f.env["OVOS_BUS_CLUSTER_ROUTES"] = "nats://a:6222"
	_, _, err = f.load("--cluster-name", "home")
	if !errors.As(err, &ce) || ce.Key != "websocket.cluster.listen" || ce.Source != "env OVOS_BUS_CLUSTER_ROUTES" {
		t.Errorf("routes in a variable: Load = %v (source %q), want websocket.cluster.listen from env OVOS_BUS_CLUSTER_ROUTES", err, ce.Source)
	}

	m := newMerger()
	flags := &layer{name: "flag", label: "flag --cluster-listen"}
	m.merge(m.data, map[string]any{"websocket": map[string]any{"cluster": map[string]any{"listen": "0.0.0.0:6222"}}}, flags, "")
	e := m.errorAt(lookupKey("cluster.order"), nil, "expected \"sender\"")
	if e.Source != builtIn || e.File != "" || e.Key != "websocket.cluster.order" {
		t.Errorf("a built-in value at fault: %v (source %q), want it named built-in", e, e.Source)
	}
	if e := m.errorAt(lookupKey("cluster.listen"), nil, "bad"); e.Source != "flag --cluster-listen" {
		t.Errorf("a key set by a flag: source %q", e.Source)
	}
}

func TestClusterSecretsNotPrinted(t *testing.T) {
	f := newFixture(t)
	f.write(userConf, `{"websocket": {"cluster": {"nats_url": "nats://a:4222", "user": "bus", "password": "correct horse battery"}}}`)
	c, p := f.mustLoad()
	var b strings.Builder
	c.Print(&b, p)
	if strings.Contains(b.String(), "horse") {
		t.Errorf("Print shows the password:\n%s", b.String())
	}
}
