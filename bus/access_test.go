package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// homeAuth is the access control of a hub with two satellites: a set for
// the satellites, their network, a guest network, and tokens.
func homeAuth() Auth {
	return Auth{
		Sets: map[string]Permissions{
			"satellite": {Emit: []string{"recognizer_loop:*"}, Rate: 10, ReplyRouting: true},
			"guest":     {Emit: []string{}, Receive: []string{"speak"}},
		},
		Networks: map[string]string{
			"192.168.1.0/24":      "satellite",
			"::ffff:10.9.0.0/112": "guest", // an IPv4-mapped network is its IPv4 network
			"fd00:1::/64":         "guest",
			"192.168.7.13":        "refuse", // one address: a /32
			"127.0.0.2/32":        "refuse", // taken out of loopback
		},
		Tokens: map[string]Permissions{
			"kitchen-secret-0123456789": {Name: "kitchen", Set: "satellite"},
			"admin-secret-0123456789":   {Name: "admin"},
			"anonymous-secret-01234567": {Emit: []string{"x"}},
		},
	}
}

// TestAccessRules: what each client gets, by token and by address.
func TestAccessRules(t *testing.T) {
	o := Options{Auth: homeAuth()}.withDefaults()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	ac := compileAccess(&o.Auth)
	tests := []struct {
		token    string
		shown    bool
		addr     string // "" and unix: a Unix socket; "" alone: an address that could not be read
		unix     bool
		identity string // "" for refused
		cause    string
	}{
		{"", false, "127.0.0.1", false, "loopback", ""},
		{"", false, "127.255.0.9", false, "loopback", ""},
		{"", false, "::1", false, "loopback", ""},
		{"", false, "", true, "unix", ""},
		{"", false, "127.0.0.2", false, "", refusedAddress}, // its network's rule wins over loopback
		{"", false, "192.168.1.7", false, "network:192.168.1.0/24", ""},
		{"", false, "192.168.7.13", false, "", refusedAddress},
		{"", false, "192.168.7.14", false, "", refusedAddress},
		{"", false, "10.9.3.4", false, "network:10.9.0.0/16", ""},
		{"", false, "fd00:1::5", false, "network:fd00:1::/64", ""},
		{"", false, "fd00:2::5", false, "", refusedAddress},
		{"", false, "192.0.2.7", false, "", refusedAddress}, // anyone: refused by default
		{"", false, "", false, "", refusedAddress},
		{"kitchen-secret-0123456789", true, "192.0.2.7", false, "token:kitchen", ""}, // the token wins
		{"admin-secret-0123456789", true, "127.0.0.2", false, "token:admin", ""},
		{"anonymous-secret-01234567", true, "127.0.0.1", false, "token", ""},
		{"kitchen-secret-012345678", true, "127.0.0.1", false, "", refusedUnknown}, // a wrong token fails even on loopback
		{"KITCHEN-secret-0123456789", true, "127.0.0.1", false, "", refusedUnknown},
		{"kitchen-secret-0123456789 ", true, "127.0.0.1", false, "", refusedUnknown},
	}
	for _, tt := range tests {
		var addr netip.Addr
		if tt.addr != "" {
			addr = netip.MustParseAddr(tt.addr)
		}
		g, cause := ac.resolve(tt.token, tt.shown, addr, tt.unix)
		id := ""
		if g != nil {
			id = g.identity
		}
		if id != tt.identity || cause != tt.cause {
			t.Errorf("token %q from %q (unix %v): %q %q, want %q %q", tt.token, tt.addr, tt.unix, id, cause, tt.identity, tt.cause)
		}
	}
	// What the grants hold.
	kitchen := ac.match("kitchen-secret-0123456789")
	if kitchen.name != "kitchen" || kitchen.rate != 10 || kitchen.burst != 10 || !kitchen.routed || kitchen.perms == nil || kitchen.perms.Receive != nil {
		t.Errorf("kitchen: %+v %+v", kitchen, kitchen.perms)
	}
	if admin := ac.match("admin-secret-0123456789"); admin.perms != nil || admin.rate != 0 || admin.routed {
		t.Errorf("admin: %+v", admin)
	}
	if !ac.receiveRules || !ac.routing {
		t.Error("the guest set's receive list or the satellites' routing was not noticed")
	}
	// Required: no address rule grants anything.
	o.Auth.Required = true
	ac = compileAccess(&o.Auth)
	if g, cause := ac.resolve("", false, netip.MustParseAddr("127.0.0.1"), false); g != nil || cause != refusedAddress {
		t.Errorf("required: loopback got %v", g)
	}
}

// TestRequestToken: every place a token can be given, and every way of
// giving it badly.
func TestRequestToken(t *testing.T) {
	long := strings.Repeat("a", MaxTokenBytes+1)
	tests := []struct {
		name     string
		target   string
		headers  []string // Authorization headers
		routeTok *string
		tok      string
		shown    bool
		cause    string
	}{
		{"none", "/core", nil, nil, "", false, ""},
		{"query", "/core?token=abc", nil, nil, "abc", true, ""},
		{"query escaped", "/core?x=1&token=a%2Bb", nil, nil, "a+b", true, ""},
		{"header", "/core", []string{"Bearer abc"}, nil, "abc", true, ""},
		{"header scheme in any case", "/core", []string{"bEaReR  abc "}, nil, "abc", true, ""},
		{"another scheme is no token", "/core", []string{"Basic dXNlcjpwYXNz"}, nil, "", false, ""},
		{"route", "/core/abc", nil, ptr("abc"), "abc", true, ""},
		{"empty query", "/core?token=", nil, nil, "", true, refusedEmpty},
		{"bare query key", "/core?token", nil, nil, "", true, refusedEmpty},
		{"empty header", "/core", []string{"Bearer"}, nil, "", true, refusedEmpty},
		{"empty route", "/core/", nil, ptr(""), "", true, refusedEmpty},
		{"repeated query", "/core?token=abc&token=abc", nil, nil, "", true, refusedRepeated},
		{"differing queries", "/core?token=abc&token=def", nil, nil, "", true, refusedRepeated},
		{"query and header", "/core?token=abc", []string{"Bearer abc"}, nil, "", true, refusedRepeated},
		{"two headers", "/core", []string{"Bearer abc", "Bearer abc"}, nil, "", true, refusedRepeated},
		{"route and query", "/core/abc?token=abc", nil, ptr("abc"), "", true, refusedRepeated},
		{"route and header", "/core/abc", []string{"Bearer abc"}, ptr("abc"), "", true, refusedRepeated},
		{"long query", "/core?token=" + long, nil, nil, "", true, refusedLong},
		{"long route", "/core/" + long, nil, ptr(long), "", true, refusedLong},
		{"undecodable query", "/core?token=%zz", nil, nil, "", true, refusedMalformed},
		{"header with two tokens", "/core", []string{"Bearer abc, Bearer def"}, nil, "", true, refusedMalformed},
		{"header with a space", "/core", []string{"Bearer ab cd"}, nil, "", true, refusedMalformed},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", tt.target, nil)
		for _, h := range tt.headers {
			r.Header.Add("Authorization", h)
		}
		var routeTok string
		if tt.routeTok != nil {
			routeTok = *tt.routeTok
		}
		tok, shown, cause := requestToken(r, routeTok, tt.routeTok != nil)
		if tok != tt.tok || shown != tt.shown || cause != tt.cause {
			t.Errorf("%s: %q %v %q, want %q %v %q", tt.name, tok, shown, cause, tt.tok, tt.shown, tt.cause)
		}
	}
}

func ptr(s string) *string { return &s }

// TestMatchComparesEveryToken: the token matcher's answer does not depend
// on the order of the tokens, their lengths, or how much of one a wrong
// token shares; and tokens that differ only in Unicode form or case are
// different tokens.
func TestMatchComparesEveryToken(t *testing.T) {
	a := Auth{Tokens: map[string]Permissions{
		"short":                      {Name: "short"},
		"a-much-longer-token-012345": {Name: "long"},
		"caf\u00e9-token":            {Name: "nfc"}, // é as one code point
	}}
	ac := compileAccess(&a)
	for tok, want := range map[string]string{
		"short": "token:short", "a-much-longer-token-012345": "token:long", "caf\u00e9-token": "token:nfc",
		"cafe\u0301-token": "", // é as e and a combining accent: another token
		"SHORT":            "", "shor": "", "shortt": "", "a-much-longer-token-01234": "", "": "",
	} {
		g := ac.match(tok)
		got := ""
		if g != nil {
			got = g.identity
		}
		if got != want {
			t.Errorf("match(%q) = %q, want %q", tok, got, want)
		}
	}
}

func TestParseNetwork(t *testing.T) {
	for in, want := range map[string]string{
		"192.168.1.0/24": "192.168.1.0/24", "10.0.0.7": "10.0.0.7/32", "fd00::/64": "fd00::/64", "2001:db8::1": "2001:db8::1/128",
		"::ffff:192.168.1.0/120": "192.168.1.0/24", "::ffff:10.0.0.1": "10.0.0.1/32",
		"192.168.1.1/24": "", "192.168.1/24": "", "fe80::1%eth0": "", "fe80::%eth0/64": "", "": "", "host.example": "", "10.0.0.0/33": "",
	} {
		p, err := ParseNetwork(in)
		if got := ""; err == nil {
			got = p.String()
			if got != want {
				t.Errorf("ParseNetwork(%q) = %s, want %q", in, got, want)
			}
		} else if want != "" {
			t.Errorf("ParseNetwork(%q): %v, want %s", in, err, want)
		}
	}
}

// TestAuthValidate: each fault is an *OptionError of "auth" with the path
// to it.
func TestAuthValidate(t *testing.T) {
	tests := []struct {
		auth Auth
		path string
		msg  string
	}{
		{Auth{Networks: map[string]string{"10.0.0.0/8": "all", "10.1.0.0/16": "refuse"}}, "networks/10.1.0.0/16", `10.1.0.0/16 overlaps "10.0.0.0/8"`},
		{Auth{Networks: map[string]string{"2001:db8::/32": "all", "2001:db8:1::/48": "refuse"}}, "networks/2001:db8::/32", `2001:db8::/32 overlaps "2001:db8:1::/48"`},
		{Auth{Networks: map[string]string{"127.0.0.0/8": "refuse"}}, "networks/127.0.0.0/8", "holds 127.0.0.1"},
		{Auth{Networks: map[string]string{"10.0.0.0/8": "nope"}}, "networks/10.0.0.0/8", `unknown permission set "nope"`},
		{Auth{Networks: map[string]string{"10.0.0/8": "all"}}, "networks/10.0.0/8", "not a network"},
		{Auth{Loopback: "guest"}, "loopback", `unknown permission set "guest": expected one of all, refuse`},
		{Auth{Sets: map[string]Permissions{"refuse": {}}}, "permissions/refuse", "built-in"},
		{Auth{Sets: map[string]Permissions{"s": {Set: "t"}}}, "permissions/s/permissions", "cannot refer"},
		{Auth{Sets: map[string]Permissions{"s": {Rate: -1}}}, "permissions/s/rate", "expected messages per second"},
		{Auth{Tokens: map[string]Permissions{"tok-tok-tok-tok": {Set: "s", Emit: []string{"x"}}}, Sets: map[string]Permissions{"s": {}}}, "tokens/tok-tok-tok-tok/permissions", "keep one"},
		{Auth{Tokens: map[string]Permissions{strings.Repeat("t", MaxTokenBytes+1): {}}}, "tokens/" + strings.Repeat("t", MaxTokenBytes+1), "longer than"},
		{Auth{Tokens: map[string]Permissions{"tok\x00tok-tok-tok": {}}}, "tokens/tok\x00tok-tok-tok", "not visible ASCII"},
		{Auth{Tokens: map[string]Permissions{"tok-tok-tok-tok": {Receive: []string{""}}}}, "tokens/tok-tok-tok-tok", "must not be empty"},
		{Auth{Required: true}, "", "no tokens are configured"},
	}
	for _, tt := range tests {
		err := Options{Auth: tt.auth}.Validate()
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != "auth" || strings.Join(oe.Path, "/") != tt.path || !strings.Contains(oe.Msg, tt.msg) {
			t.Errorf("%+v: %v (%+v), want at %q %q", tt.auth, err, oe, tt.path, tt.msg)
		}
		if oe != nil && strings.Contains(oe.Error(), "tok-tok") {
			t.Errorf("the error shows the token: %v", oe)
		}
	}
	if err := (Options{Auth: homeAuth()}).Validate(); err != nil {
		t.Errorf("homeAuth: %v", err)
	}
}

// remoteListener hands out connections that report remote as their peer's
// address: a client from another machine, as the bus sees it.
type remoteListener struct {
	net.Listener
	remote net.Addr
}

func (l remoteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteConn{c, l.remote}, nil
}

type remoteConn struct {
	net.Conn
	remote net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.remote }

// serveOn serves a bus with opts on l and returns it and its URL.
func serveOn(t *testing.T, opts Options, l net.Listener) (*Server, string) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, "ws://" + l.Addr().String() + s.opts.Route
}

// dialStatus dials url (with header) and returns the HTTP status of a
// refusal, or 101 after reading the greeting.
func dialStatus(t *testing.T, url string, opts *ws.DialOptions) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := ws.Dial(ctx, url, opts)
	var de *ws.DialError
	switch {
	case errors.As(err, &de):
		return de.StatusCode
	case err != nil:
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	if op, b := read(t, c); op != ws.OpText || string(b) != Greeting {
		t.Fatalf("greeting: %v %q", op, b)
	}
	return http.StatusSwitchingProtocols
}

// TestRemoteClientsByRule: through the real upgrade, clients from other
// machines (IPv4, IPv6, IPv4-mapped) get their network's set, anyone's
// (refused), or their token's.
func TestRemoteClientsByRule(t *testing.T) {
	for _, tt := range []struct {
		remote   string
		token    string
		status   int
		identity string
	}{
		{"192.0.2.7:5000", "", 401, ""},
		{"[2001:db8::7]:5000", "", 401, ""},
		{"[::ffff:192.0.2.7]:5000", "", 401, ""},
		{"192.0.2.7:5000", "/kitchen-secret-0123456789", 101, "token:kitchen"},
		{"192.168.1.20:5000", "", 101, "network:192.168.1.0/24"},
		{"[::ffff:192.168.1.20]:5000", "", 101, "network:192.168.1.0/24"},
		{"[fd00:1::20%eth0]:5000", "", 101, "network:fd00:1::/64"},
		{"192.168.7.13:5000", "", 401, ""},
	} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ap := netip.MustParseAddrPort(tt.remote)
		remote := &net.TCPAddr{IP: ap.Addr().AsSlice(), Port: int(ap.Port()), Zone: ap.Addr().Zone()}
		s, url := serveOn(t, Options{Auth: homeAuth()}, remoteListener{l, remote})
		if got := dialStatus(t, url+tt.token, nil); got != tt.status {
			t.Errorf("%s %q: status %d, want %d", tt.remote, tt.token, got, tt.status)
			continue
		}
		if tt.status == 101 {
			waitFor(t, "the session", 5*time.Second, func() bool { return s.Clients() == 1 })
			if si := s.Sessions()[0]; si.Identity != tt.identity {
				t.Errorf("%s %q: identity %q, want %q", tt.remote, tt.token, si.Identity, tt.identity)
			}
		}
	}
}

// TestUnixSocketIsLoopback: a client over a Unix socket is trusted as
// loopback is, and refused when loopback is.
func TestUnixSocketIsLoopback(t *testing.T) {
	for _, loopback := range []string{SetAll, SetRefuse} {
		path := filepath.Join(t.TempDir(), "bus.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := serveOn(t, Options{Auth: Auth{Loopback: loopback}}, l)
		dialUnix := func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		want := 101
		if loopback == SetRefuse {
			want = 401
		}
		if got := dialStatus(t, "ws://localhost/core", &ws.DialOptions{NetDialContext: dialUnix}); got != want {
			t.Fatalf("loopback %q: status %d, want %d", loopback, got, want)
		}
		if want == 101 {
			waitFor(t, "the session", 5*time.Second, func() bool { return s.Clients() == 1 })
			if id := s.Sessions()[0].Identity; id != "unix" {
				t.Errorf("identity %q", id)
			}
		}
	}
}

// TestRefusedTokens: every bad token, in every place, gets 401 through the
// real upgrade, counted by cause, and neither the log nor the metrics show
// it. A loopback client is refused too: a token shown is always checked.
func TestRefusedTokens(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const secret = "kitchen-secret-0123456789"
	s, url := testServer(t, Options{Auth: homeAuth(), Logger: logger})
	long := strings.Repeat("k", MaxTokenBytes+1)
	bearer := func(v ...string) *ws.DialOptions { return &ws.DialOptions{Header: http.Header{"Authorization": v}} }
	for _, tt := range []struct {
		url   string
		opts  *ws.DialOptions
		cause string
	}{
		{url + "?token=kitchen-secret-012345678x", nil, refusedUnknown},
		{url + "/KITCHEN-SECRET-0123456789", nil, refusedUnknown},
		{url + "/kitchen-secret-0123456789%CC%81", nil, refusedUnknown}, // a combining accent appended
		{url, bearer("Bearer kitchen-secret-01234567890"), refusedUnknown},
		{url + "?token=", nil, refusedEmpty},
		{url + "/", nil, refusedEmpty},
		{url, bearer("Bearer "), refusedEmpty},
		{url + "?token=" + secret + "&token=" + secret, nil, refusedRepeated},
		{url + "/" + secret + "?token=" + secret, nil, refusedRepeated},
		{url + "?token=" + secret, bearer("Bearer " + secret), refusedRepeated},
		{url, bearer("Bearer "+secret, "Bearer "+secret), refusedRepeated},
		{url + "/" + long, nil, refusedLong},
		{url + "?token=" + long, nil, refusedLong},
		{url, bearer("Bearer " + long), refusedLong},
		{url + "?token=%zz", nil, refusedMalformed},
	} {
		before := counterValue(t, s, `ovbus_auth_refused_total{cause="`+tt.cause+`"}`)
		rejected := counterValue(t, s, `ovbus_rejected_total{reason="auth"}`)
		if got := dialStatus(t, tt.url, tt.opts); got != 401 {
			t.Errorf("%s: status %d, want 401", tt.url, got)
		}
		if got := counterValue(t, s, `ovbus_auth_refused_total{cause="`+tt.cause+`"}`); got != before+1 {
			t.Errorf("%s: %s counted %v times", tt.url, tt.cause, got-before)
		}
		if got := counterValue(t, s, `ovbus_rejected_total{reason="auth"}`); got != rejected+1 {
			t.Errorf("%s: rejected auth counted %v times", tt.url, got-rejected)
		}
	}
	// The right token in each place is accepted, and shown by name only.
	dialStatus(t, url+"/"+secret, nil)
	dialStatus(t, url+"?token="+secret, nil)
	dialStatus(t, url, bearer("Bearer "+secret))
	waitFor(t, "three clients", 5*time.Second, func() bool { return s.Clients() == 3 })
	for _, si := range s.Sessions() {
		if si.Token != "kitchen" || si.Identity != "token:kitchen" {
			t.Errorf("session %+v", si)
		}
	}
	m := scrape(t, s)
	if !strings.Contains(m, `ovbus_clients{identity="token:kitchen"} 3`) {
		t.Errorf("no clients by identity:\n%s", grep(m, "ovbus_clients"))
	}
	for _, out := range []string{logs.String(), m} {
		if strings.Contains(out, "secret") || strings.Contains(out, long[:64]) {
			t.Errorf("a token was shown:\n%s", out)
		}
	}
	if !strings.Contains(logs.String(), "cause=repeated_token") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}
}

// counterValue reads one sample of the bus's metrics, 0 when absent.
func counterValue(t *testing.T, s *Server, sample string) float64 {
	t.Helper()
	for _, l := range strings.Split(scrape(t, s), "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			return f
		}
	}
	return 0
}
