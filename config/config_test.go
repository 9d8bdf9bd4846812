package config

import (
	"testing"

	"github.com/ovbus/ovbus/bus"
)

func TestHelpers(t *testing.T) {
	c := Default()
	if c.Bus.MaxMsgSize != 25*1024*1024 {
		t.Errorf("MaxMsgSize = %d", c.Bus.MaxMsgSize)
	}
	if c.Address() != "127.0.0.1:8181" || c.URL() != "ws://127.0.0.1:8181/core" {
		t.Errorf("Address %s URL %s", c.Address(), c.URL())
	}
	c.Bus.Host, c.SSL = "::", true
	if c.Address() != "[::]:8181" || c.URL() != "wss://127.0.0.1:8181/core" {
		t.Errorf("Address %s URL %s", c.Address(), c.URL())
	}
	c.Bus.Filter = true
	if c.FilterLogged("gui.page.upload") || !c.FilterLogged("speak") {
		t.Error("FilterLogged")
	}
	for level, want := range map[string]string{"DEBUG": "DEBUG", "WARNING": "WARN", "CRITICAL": "ERROR+4", "INFO": "INFO"} {
		c.LogLevel = level
		if got := c.SlogLevel().String(); got != want {
			t.Errorf("SlogLevel(%s) = %s", level, got)
		}
	}
}

func TestClientToken(t *testing.T) {
	c := Default()
	receiveAll := func(p bus.Permissions) bool { return p.CanReceive("") }
	if tok, _ := c.ClientToken(receiveAll); tok != "" {
		t.Errorf("auth off: token %q", tok)
	}
	c.Bus.Auth = bus.Auth{Tokens: map[string]bus.Permissions{"aaaa-secret-0001": {Name: "all"}}}
	if tok, _ := c.ClientToken(receiveAll); tok != "" {
		t.Errorf("auth not required (no token gets every permission): token %q", tok)
	}
	c.Bus.Auth = bus.Auth{Required: true, Tokens: map[string]bus.Permissions{
		"zzzz-secret-0001": {Name: "gui", Emit: []string{"gui.*"}, Receive: []string{"*"}},
		"yyyy-secret-0002": {Name: "audio", Receive: []string{"speak"}},
		"xxxx-secret-0003": {Name: "skills"}, // full access: tried last
		"wwww-secret-0004": {Name: "admin", Emit: []string{"*"}, Receive: []string{"*"}},
	}}
	for _, tc := range []struct {
		fits        func(bus.Permissions) bool
		tok, label  string
		description string
	}{
		{receiveAll, "wwww-secret-0004", `"admin"`, "tokens with lists first, by name"},
		{func(p bus.Permissions) bool { return p.CanEmit("gui.x") && p.CanReceive("gui.x") }, "wwww-secret-0004", `"admin"`, "by name"},
		{func(bus.Permissions) bool { return false }, "", "", "none fits"},
		{func(p bus.Permissions) bool { return p.Receive != nil && !p.CanReceive("") }, "yyyy-secret-0002", `"audio"`, "a restricted one"},
		{func(p bus.Permissions) bool { return p.Emit == nil }, "yyyy-secret-0002", `"audio"`, "a list before full access"},
		{func(p bus.Permissions) bool { return p.Emit == nil && p.Receive == nil }, "xxxx-secret-0003", `"skills"`, "full access when only it fits"},
	} {
		if tok, label := c.ClientToken(tc.fits); tok != tc.tok || label != tc.label {
			t.Errorf("%s: %q %s, want %q %s", tc.description, tok, label, tc.tok, tc.label)
		}
	}
}
