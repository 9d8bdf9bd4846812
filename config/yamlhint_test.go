package config

import (
	"strings"
	"testing"
)

// A YAML body in a file that is not .yml/.yaml is read as JSON, as ovos-config does; the error
// says why and what to do.
func TestYAMLBodyInConfFile(t *testing.T) {
	const hint = "looks like YAML, which is read only from files named .yml or .yaml"
	for _, body := range []string{
		"websocket:\n  port: 8181\n",
		"# the user's file\n\nwebsocket: {port: 8181}\n",
		"---\nwebsocket:\n  port: 8181\n",
	} {
		_, err := parse("/etc/mycroft/mycroft.conf", []byte(body), formatFor("/etc/mycroft/mycroft.conf"))
		if err == nil || !strings.Contains(err.Error(), hint) || !strings.Contains(err.Error(), "mycroft.conf") {
			t.Errorf("%q: %v", body, err)
		}
		if _, err := parse("/etc/mycroft/mycroft.yaml", []byte(body), formatFor("/etc/mycroft/mycroft.yaml")); err != nil {
			t.Errorf("%q as .yaml: %v", body, err)
		}
	}
	// Broken JSON gets no YAML hint.
	for _, body := range []string{`{"websocket": {"port": 8181,,}}`, `["websocket"]`, `websocket`} {
		_, err := parse("mycroft.conf", []byte(body), formatJSON)
		if err == nil || strings.Contains(err.Error(), "YAML") {
			t.Errorf("%q: %v", body, err)
		}
	}
}
