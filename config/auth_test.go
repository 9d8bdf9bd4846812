package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bus"
)

// The access-control section as a hub with two satellites writes it.
func TestAuthSection(t *testing.T) {
	f := newFixture(t)
	f.write(systemConf, `{"websocket": {"host": "0.0.0.0", "auth": {
  "permissions": {"satellite": {"emit": ["recognizer_loop:*", "ovos.session.sync"], "receive": ["*"],
                                "rate": 20, "burst": 40, "reply_routing": true}},
  "networks": {"192.168.1.0/24": "satellite", "fd00::/64": "refuse"},
  "anyone": "refuse",
  "tokens": {"kitchen-0123456789abcdef": {"name": "kitchen", "permissions": "satellite"},
             "bedroom-0123456789abcdef": {"name": "bedroom", "permissions": "satellite"}}}}}`)
	c, _ := f.mustLoad()
	a := c.Bus.Auth
	want := bus.Permissions{Emit: []string{"recognizer_loop:*", "ovos.session.sync"}, Receive: []string{"*"}, Rate: 20, Burst: 40, ReplyRouting: true}
	if s := a.Sets["satellite"]; s.Rate != want.Rate || s.Burst != want.Burst || !s.ReplyRouting || len(s.Emit) != 2 || len(s.Receive) != 1 {
		t.Errorf("the satellite set: %+v", s)
	}
	if k := a.Tokens["kitchen-0123456789abcdef"]; k.Name != "kitchen" || k.Set != "satellite" {
		t.Errorf("the kitchen token: %+v", k)
	}
	if a.Networks["192.168.1.0/24"] != "satellite" || a.Networks["fd00::/64"] != "refuse" || a.Anyone != "refuse" {
		t.Errorf("networks %v, anyone %q", a.Networks, a.Anyone)
	}
	// Print shows the rules and never a token.
	var out strings.Builder
	if err := c.Print(&out, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "0123456789abcdef") || !strings.Contains(out.String(), `"192.168.1.0/24":"satellite"`) || !strings.Contains(out.String(), `"loopback":"all"`) {
		t.Errorf("Print:\n%s", out.String())
	}
	// An empty list (no type) is not an absent one (every type).
	c.Bus.Auth.Sets["guest"] = bus.Permissions{Emit: []string{}}
	out.Reset()
	if err := c.Print(&out, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"guest":{"emit":[]}`) {
		t.Errorf("Print:\n%s", out.String())
	}
	// Clone keeps every field and shares no list.
	n := c.Clone()
	n.Bus.Auth.Sets["satellite"].Emit[0] = "changed"
	if c.Bus.Auth.Sets["satellite"].Emit[0] != "recognizer_loop:*" || n.Bus.Auth.Tokens["kitchen-0123456789abcdef"].Set != "satellite" {
		t.Error("Clone shares the permission lists or loses a field")
	}
}

// A rule that cannot be used is an error naming the file, the line and the
// key at fault; a token is never shown.
func TestAuthErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"network that does not parse",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"192.168.1/24": "all"}}}}`},
			`config: ROOT/` + systemConf + `:1:38: websocket.auth.networks.192.168.1/24: "192.168.1/24" is not a network: expected a CIDR prefix such as "192.168.1.0/24" or "fd00::/64", or one address`},
		{"network with host bits",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"192.168.1.7/24": "all"}}}}`},
			`config: ROOT/` + systemConf + `:1:38: websocket.auth.networks.192.168.1.7/24: "192.168.1.7/24" has host bits set: the network is "192.168.1.0/24"`},
		{"network with a zone",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"fe80::1%eth0": "all"}}}}`},
			`config: ROOT/` + systemConf + `:1:38: websocket.auth.networks.fe80::1%eth0: "fe80::1%eth0" is not a network: expected a CIDR prefix such as "192.168.1.0/24" or "fd00::/64", or one address`},
		{"network not a string",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"10.0.0.0/8": 1}}}}`},
			`config: ROOT/` + systemConf + `:1:38: websocket.auth.networks.10.0.0.0/8: expected the name of a permission set, got 1`},
		// The overlap spans two files: the error is at the entry sorted
		// last, in the file that set it, and names the other.
		{"overlapping networks in two files",
			map[string]string{
				systemConf: `{"websocket": {"auth": {"networks": {"192.168.0.0/16": "all"}}}}`,
				userConf:   `{"websocket": {"auth": {"networks": {"192.168.1.0/24": "refuse"}}}}`},
			`config: ROOT/` + userConf + `:1:38: websocket.auth.networks.192.168.1.0/24: 192.168.1.0/24 overlaps "192.168.0.0/16" (192.168.0.0/16): a client in both would have two permission sets`},
		{"overlapping IPv4-mapped network",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"10.0.0.0/8": "all", "::ffff:10.1.0.0/112": "refuse"}}}}`},
			`config: ROOT/` + systemConf + `:1:59: websocket.auth.networks.::ffff:10.1.0.0/112: 10.1.0.0/16 overlaps "10.0.0.0/8" (10.0.0.0/8): a client in both would have two permission sets`},
		{"network holding this machine",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"0.0.0.0/0": "all"}}}}`},
			`config: ROOT/` + systemConf + `:1:38: websocket.auth.networks.0.0.0.0/0: 0.0.0.0/0 holds 127.0.0.1, the address of this machine's own services: set their permissions with loopback`},
		{"IPv6 network holding this machine",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"::/0": "refuse"}}}}`},
			`config: ROOT/` + systemConf + `:1:38: websocket.auth.networks.::/0: ::/0 holds ::1, the address of this machine's own services: set their permissions with loopback`},
		{"unknown set of a network",
			map[string]string{systemConf: `{"websocket": {"auth": {"networks": {"10.0.0.0/8": "satelite"}, "permissions": {"satellite": {}}}}}`},
			`config: ROOT/` + systemConf + `:1:38: websocket.auth.networks.10.0.0.0/8: unknown permission set "satelite": expected one of all, refuse, satellite`},
		{"unknown set of anyone",
			map[string]string{systemConf: `{"websocket": {"auth": {"anyone": "guest"}}}`},
			`config: ROOT/` + systemConf + `:1:25: websocket.auth.anyone: unknown permission set "guest": expected one of all, refuse`},
		{"built-in set redefined",
			map[string]string{systemConf: `{"websocket": {"auth": {"permissions": {"all": {"emit": []}}}}}`},
			`config: ROOT/` + systemConf + `:1:41: websocket.auth.permissions.all: "all" is a built-in set and cannot be redefined`},
		{"token names an unknown set and hides itself",
			map[string]string{systemConf: `{"websocket": {"auth": {"tokens": {"secret-secret-secret": {"name": "k", "permissions": "sat"}}}}}`},
			`config: ROOT/` + systemConf + `:1:74: websocket.auth.tokens["k"].permissions: token "k": unknown permission set "sat": expected one of `},
		{"token with a space",
			map[string]string{systemConf: `{"websocket": {"auth": {"tokens": {"secret secret secret": {}}}}}`},
			`config: ROOT/` + systemConf + `:1:36: websocket.auth.tokens["secr…"]: token "secr…" holds a character that is not visible ASCII: use letters, digits and -._~ (a token travels in URLs)`},
		{"token not ASCII",
			map[string]string{systemConf: `{"websocket": {"auth": {"tokens": {"sécret-sécret-sécret": {"name": "é"}}}}}`},
			`config: ROOT/` + systemConf + `:1:36: websocket.auth.tokens["é"]: token "é" holds a character that is not visible ASCII: use letters, digits and -._~ (a token travels in URLs)`},
		{"burst without rate",
			map[string]string{systemConf: `{"websocket": {"auth": {"permissions": {"s": {"burst": 5}}}}}`},
			`config: ROOT/` + systemConf + `:1:47: websocket.auth.permissions.s.burst: permission set "s": burst is set but rate is not: a burst bounds a rate`},
		{"negative rate",
			map[string]string{systemConf: `{"websocket": {"auth": {"permissions": {"s": {"rate": -1}}}}}`},
			`config: ROOT/` + systemConf + `:1:47: websocket.auth.permissions.s.rate: permission set "s": expected messages per second, 0 (no limit) or more, got -1`},
		{"reply routing on a cluster",
			map[string]string{systemConf: `{"websocket": {"cluster": {"listen": "127.0.0.1:6222"}, "auth": {"permissions": {"s": {"reply_routing": true}}}}}`},
			`config: ROOT/` + systemConf + `:1:57: websocket.auth: ` + bus.ReplyRoutingClusterMsg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			for rel, content := range tt.files {
				f.write(rel, content)
			}
			_, _, err := f.load()
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want an *Error", err, err)
			}
			want := strings.ReplaceAll(tt.want, "ROOT", f.root)
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error\n got %s\nwant %s", err, want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows the token: %s", err)
			}
		})
	}
}
