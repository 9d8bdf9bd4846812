package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/config"
)

// busPort is the port of a bus URL ws://127.0.0.1:PORT/route.
func busPort(t *testing.T, url string) int {
	t.Helper()
	_, rest, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(url, "ws://"), "wss://"), ":")
	p, err := strconv.Atoi(strings.SplitN(rest, "/", 2)[0])
	if err != nil {
		t.Fatalf("port of %s: %v", url, err)
	}
	return p
}

// Without --url, listen and send dial the bus of the configuration stack (port and route of
// mycroft.conf, a broken file skipped with a warning) and say who they are (User-Agent).
func TestListenSendReadTheConfiguration(t *testing.T) {
	dir := isolateConfig(t)
	t.Setenv("OVOS_BUS_TOKEN", "")
	srv, core := cliBusWith(t, bus.Options{Addr: "127.0.0.1:0", Route: "/bus"})
	url := strings.TrimSuffix(core, "/core") + "/bus"
	writeUserConfig(t, dir, `{"websocket": {"port": `+strconv.Itoa(busPort(t, url))+`, "route": "/bus"}}`)
	xdg := filepath.Join(dir, "xdg", "mycroft", "mycroft.conf")
	if err := os.MkdirAll(filepath.Dir(xdg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(xdg, []byte(`{"websocket": {"port": 1,}}`), 0o644); err != nil {
		t.Fatal(err)
	}

	l := startListen(t, "--json", "--reconnect=false")
	l.waitStderr("connected to " + url)
	if got := l.err.String(); !strings.Contains(got, "connected to "+url) ||
		!strings.Contains(got, "warning: config: "+xdg+":1:26: invalid JSON") {
		t.Fatalf("listen's stderr %q", got)
	}
	if r := send(t, "", "from.config", `{"n": 1}`); r.code != exitOK || !strings.Contains(r.stderr, "warning: config: "+xdg) {
		t.Fatalf("send: exit %d, stderr %q", r.code, r.stderr)
	}
	if lines := l.waitOutput(t, 2); !strings.Contains(lines[1], `"from.config"`) { // after the greeting
		t.Errorf("listen printed %q", lines)
	}
	// listen's session (send's may not have ended yet: it has the same User-Agent).
	sessions := srv.Sessions()
	if !strings.HasPrefix(userAgent(), "ovbus/") || len(sessions) == 0 {
		t.Errorf("User-Agent %q, %d sessions", userAgent(), len(sessions))
	}
	for _, si := range sessions {
		if si.UserAgent != userAgent() {
			t.Errorf("session %d has User-Agent %q, want %q", si.ID, si.UserAgent, userAgent())
		}
	}

	// --url wins over the configuration, which is then not read at all.
	if err := os.WriteFile(xdg, []byte(`{"websocket": {"port": "eighty"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := send(t, "", "x", "--url", url); r.code != exitOK || r.stderr != "" {
		t.Errorf("with --url: exit %d, stderr %q", r.code, r.stderr)
	}
	// Without it, a bad value is an error that names it and says how to do without.
	r := send(t, "", "x")
	if r.code != exitUsage || !strings.Contains(r.stderr, xdg+`:1:16: websocket.port: expected an integer 0-65535, got "eighty"`) ||
		!strings.Contains(r.stderr, "--url") {
		t.Errorf("bad value: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := os.WriteFile(xdg, []byte(`{"websocket": {"port": 0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := send(t, "", "x"); r.code != exitUsage || !strings.Contains(r.stderr, "port is 0") {
		t.Errorf("port 0: exit %d, stderr %q", r.code, r.stderr)
	}
}

// On a bus that requires a token, listen and send without --url present a token of the
// configuration's websocket.auth that may do what they need, and never print it; with --url
// they present none of it.
func TestListenSendTokenFromConfiguration(t *testing.T) {
	dir := isolateConfig(t)
	t.Setenv("OVOS_BUS_TOKEN", "")
	tokens := map[string]bus.Permissions{
		testSecret:            {Name: "gui", Emit: []string{"gui.*"}, Receive: []string{"gui.*"}},
		testSecret + "-audio": {Name: "audio", Emit: []string{"speak"}, Receive: []string{"*"}},
	}
	_, url := cliBusWith(t, bus.Options{Addr: "127.0.0.1:0", Auth: bus.Auth{Required: true, Tokens: tokens}})
	writeUserConfig(t, dir, `{"websocket": {"port": `+strconv.Itoa(busPort(t, url))+`, "auth": {"required": true, "tokens": {
		"`+testSecret+`": {"name": "gui", "emit": ["gui.*"], "receive": ["gui.*"]},
		"`+testSecret+`-audio": {"name": "audio", "emit": ["speak"], "receive": ["*"]}}}}}`)

	l := startListen(t, "--json", "--reconnect=false")
	l.waitStderr("connected to " + url)
	if got := l.err.String(); !strings.Contains(got, `using the token "audio"`) || !strings.Contains(got, "connected to "+url) {
		t.Fatalf("listen's stderr %q", got)
	}
	noSecret(t, "listen's stderr", l.err.String())
	for _, typ := range []string{"gui.page.show", "speak"} {
		r := send(t, "", typ)
		if r.code != exitOK {
			t.Errorf("send %s: exit %d, stderr %q", typ, r.code, r.stderr)
		}
		noSecret(t, "send's stderr", r.stderr)
	}
	if lines := l.waitOutput(t, 3); !strings.Contains(lines[1], "gui.page.show") || !strings.Contains(lines[2], "speak") {
		t.Errorf("listen printed %q", lines)
	}
	// No token of the configuration may emit it: none is presented, and the bus refuses.
	if r := send(t, "", "recognizer_loop:utterance"); r.code != exitConn {
		t.Errorf("no fitting token: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := send(t, "", "speak", "--url", url); r.code != exitConn {
		t.Errorf("--url: exit %d, stderr %q; a configuration token went to a URL given by hand", r.code, r.stderr)
	}
}

// With ssl in the configuration, listen dials wss:// and trusts the bus's self-signed
// certificate (the pair ovbus serve and ovos-messagebus make) without --ca.
func TestListenWSSFromConfiguration(t *testing.T) {
	dir := isolateConfig(t)
	cert, err := config.EnsureCertificate("", "", "test-host")
	if err != nil {
		t.Fatal(err)
	}
	_, url := cliBusWith(t, bus.Options{Addr: "127.0.0.1:0",
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	port := busPort(t, url)
	writeUserConfig(t, dir, `{"websocket": {"port": `+strconv.Itoa(port)+`, "ssl": true}}`)
	want := "wss://127.0.0.1:" + strconv.Itoa(port) + "/core"
	l := startListen(t, "--reconnect=false")
	l.waitStderr("connected to " + want)
	if got := l.err.String(); !strings.Contains(got, "connected to "+want) {
		t.Fatalf("listen's stderr %q", got)
	}
}

// TestClientDefaultURLIsTheBusDefault: package client cannot import the bus
// (it is for programs that only talk to one), so its DefaultURL repeats the
// bus's default host, port and route; this is where the copy is checked.
func TestClientDefaultURLIsTheBusDefault(t *testing.T) {
	want := fmt.Sprintf("ws://%s:%d%s", bus.DefaultHost, bus.DefaultPort, bus.DefaultRoute)
	if client.DefaultURL != want {
		t.Fatalf("client.DefaultURL is %q, the bus's default %q", client.DefaultURL, want)
	}
}
