package config

import "testing"

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
