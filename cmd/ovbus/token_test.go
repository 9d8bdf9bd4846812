package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/bus"
)

const testSecret = "s3cret-token-0123456789"

// authBus starts a bus on which testSecret may emit gui.* only.
func authBus(t *testing.T) string {
	t.Helper()
	_, url := cliBusWith(t, bus.Options{Addr: "127.0.0.1:0",
		Auth: bus.Auth{Required: true, Tokens: map[string]bus.Permissions{testSecret: {Name: "gui", Emit: []string{"gui.*"}}}}})
	return url
}

func noSecret(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, testSecret) || strings.Contains(s, testSecret[:12]) {
		t.Errorf("%s shows the token: %q", what, s)
	}
}

// --token and OVOS_BUS_TOKEN reach the bus; a type the token may not emit gets "not allowed"
// and exit 4 at once, not a timeout; no token is ever printed.
func TestSendTokenAndNotAllowed(t *testing.T) {
	url := authBus(t)
	t.Setenv("OVOS_BUS_TOKEN", "")
	r := send(t, "", "gui.page.show", "--url", url, "--token", testSecret, "--timeout", "5s")
	if r.code != exitOK {
		t.Errorf("allowed type: exit %d, stderr %q", r.code, r.stderr)
	}
	start := time.Now()
	r = send(t, "", "speak", `{"utterance":"hi"}`, "--url", url, "--token", testSecret, "--timeout", "5s")
	if r.code != exitRefused || !strings.Contains(r.stderr, `"speak" not allowed`) || time.Since(start) > 4*time.Second {
		t.Errorf("forbidden type: exit %d after %v, stderr %q", r.code, time.Since(start), r.stderr)
	}
	noSecret(t, "send's stderr", r.stderr)

	t.Setenv("OVOS_BUS_TOKEN", testSecret)
	if r := send(t, "", "gui.x", "--url", url); r.code != exitOK {
		t.Errorf("OVOS_BUS_TOKEN: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv("OVOS_BUS_TOKEN", "")

	// Refused: no token, or a wrong one in the URL.
	for _, args := range [][]string{{"--url", url}, {"--url", url + "?token=" + testSecret + "x"}} {
		r := send(t, "", append([]string{"gui.x"}, args...)...)
		if r.code != exitConn {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		noSecret(t, "send's stderr", r.stderr)
	}

	// listen prints the URL without the token.
	l := startListen(t, "--url", url+"?token="+testSecret, "--reconnect=false")
	l.waitOutput(t, 1)
	l.waitStderr("connected to " + url + "?token=REDACTED")
	if got := l.err.String(); !strings.Contains(got, "connected to "+url+"?token=REDACTED") {
		t.Errorf("listen's stderr %q", got)
	}
	noSecret(t, "listen's stderr", l.err.String())
	var out, errb lockedBuffer
	listenCmd(context.Background(), []string{"--url", url + "?token=" + testSecret + "x", "--reconnect=false"}, &out, &errb)
	if !strings.Contains(errb.String(), "cannot connect") {
		t.Errorf("wrong token: %q", errb.String())
	}
	noSecret(t, "listen's stderr", errb.String())
	// The help never shows the variable's value.
	t.Setenv("OVOS_BUS_TOKEN", testSecret)
	out, errb = lockedBuffer{}, lockedBuffer{}
	listenCmd(context.Background(), []string{"--help"}, &out, &errb)
	noSecret(t, "listen --help", out.String())
}
