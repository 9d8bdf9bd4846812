package handshake

import (
	"errors"
	"strings"
	"testing"
)

func mustParse(t *testing.T, s string) []Extension {
	t.Helper()
	exts, err := ParseExtensionList(s)
	if err != nil {
		t.Fatalf("ParseExtensionList(%q): %v", s, err)
	}
	return exts
}

var busPolicy = DeflateServerPolicy{RequireServerNoContextTakeover: true}

// contextPolicy is a server's that keeps a context (CompressionOptions.Context).
var contextPolicy = DeflateServerPolicy{ServerContextFullWindow: true}

func TestNegotiateDeflateServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offer  string
		pol    DeflateServerPolicy
		ok     bool
		resp   string
		params DeflateParams
	}{
		{"no offer", "", busPolicy, false, "", DeflateParams{}},
		{"other extension", "x-webkit-deflate-frame", busPolicy, false, "", DeflateParams{}},
		{"bare offer, bus policy", "permessage-deflate", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
		{"browser offer, bus policy", "permessage-deflate; client_max_window_bits", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
		{"bare offer, zero policy", "permessage-deflate", DeflateServerPolicy{}, true,
			"permessage-deflate; client_no_context_takeover",
			DeflateParams{ClientNoContextTakeover: true}},
		{"client context allowed", "permessage-deflate", DeflateServerPolicy{AllowClientContextTakeover: true}, true,
			"permessage-deflate", DeflateParams{}},
		{"client hint echoed", "permessage-deflate; client_no_context_takeover", DeflateServerPolicy{AllowClientContextTakeover: true}, true,
			"permessage-deflate; client_no_context_takeover", DeflateParams{ClientNoContextTakeover: true}},
		{"server no context asked", "permessage-deflate; server_no_context_takeover", DeflateServerPolicy{AllowClientContextTakeover: true}, true,
			"permessage-deflate; server_no_context_takeover", DeflateParams{ServerNoContextTakeover: true}},
		{"server window asked", "permessage-deflate; server_max_window_bits=10", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 10}},
		{"quoted window", `permessage-deflate; server_max_window_bits="8"`, busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=8",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 8}},
		{"client window value recorded", "permessage-deflate; client_max_window_bits=9", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ClientMaxWindowBits: 9}},
		{"all parameters", "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=15; client_max_window_bits=15", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=15",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}},
		{"name case", "Permessage-Deflate; Client_Max_Window_Bits", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},

		// Declined offers (RFC 7692 §7.1), then the next one is tried.
		{"unknown param", "permessage-deflate; foo", busPolicy, false, "", DeflateParams{}},
		{"duplicate param", "permessage-deflate; server_no_context_takeover; server_no_context_takeover", busPolicy, false, "", DeflateParams{}},
		{"duplicate window", "permessage-deflate; client_max_window_bits; client_max_window_bits=10", busPolicy, false, "", DeflateParams{}},
		{"valued flag", "permessage-deflate; server_no_context_takeover=1", busPolicy, false, "", DeflateParams{}},
		{"valued client flag", "permessage-deflate; client_no_context_takeover=true", busPolicy, false, "", DeflateParams{}},
		{"server window valueless", "permessage-deflate; server_max_window_bits", busPolicy, false, "", DeflateParams{}},
		{"server window 7", "permessage-deflate; server_max_window_bits=7", busPolicy, false, "", DeflateParams{}},
		{"server window 16", "permessage-deflate; server_max_window_bits=16", busPolicy, false, "", DeflateParams{}},
		{"server window leading zero", "permessage-deflate; server_max_window_bits=010", busPolicy, false, "", DeflateParams{}},
		{"server window 09", "permessage-deflate; server_max_window_bits=09", busPolicy, false, "", DeflateParams{}},
		{"client window 0", "permessage-deflate; client_max_window_bits=0", busPolicy, false, "", DeflateParams{}},
		{"client window sign", "permessage-deflate; client_max_window_bits=+9", busPolicy, false, "", DeflateParams{}},
		{"first bad, second good",
			"permessage-deflate; server_max_window_bits=20, permessage-deflate; client_max_window_bits", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
		{"first good wins",
			"permessage-deflate; server_max_window_bits=12, permessage-deflate", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=12",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 12}},
		{"window below policy minimum, next offer",
			"permessage-deflate; server_max_window_bits=10, permessage-deflate; server_max_window_bits=15",
			DeflateServerPolicy{RequireServerNoContextTakeover: true, MinServerMaxWindowBits: 15}, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=15",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 15}},
		{"window below policy minimum", "permessage-deflate; server_max_window_bits=14",
			DeflateServerPolicy{MinServerMaxWindowBits: 15}, false, "", DeflateParams{}},
		{"policy minimum, no window asked", "permessage-deflate",
			DeflateServerPolicy{MinServerMaxWindowBits: 15, AllowClientContextTakeover: true}, true, "permessage-deflate", DeflateParams{}},
		{"context policy, bare offer", "permessage-deflate; client_max_window_bits", contextPolicy, true,
			"permessage-deflate; client_no_context_takeover", DeflateParams{ClientNoContextTakeover: true}},
		{"context policy, full window asked", "permessage-deflate; server_max_window_bits=15", contextPolicy, true,
			"permessage-deflate; client_no_context_takeover; server_max_window_bits=15",
			DeflateParams{ClientNoContextTakeover: true, ServerMaxWindowBits: 15}},
		{"context policy, smaller window asked", "permessage-deflate; server_max_window_bits=10", contextPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 10}},
		{"context policy, no context asked", "permessage-deflate; server_no_context_takeover", contextPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
		{"other extension first", "x-foo; bar, permessage-deflate", busPolicy, true,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, params, ok := NegotiateDeflateServer(mustParse(t, tc.offer), tc.pol)
			if ok != tc.ok || resp != tc.resp || params != tc.params {
				t.Fatalf("got (%q, %+v, %v), want (%q, %+v, %v)", resp, params, ok, tc.resp, tc.params, tc.ok)
			}
		})
	}
}

func TestDeflateOffer(t *testing.T) {
	for _, tc := range []struct {
		p    DeflateParams
		want string
	}{
		{DeflateParams{}, "permessage-deflate; client_max_window_bits"},
		{DeflateParams{ClientMaxWindowBits: -1}, "permessage-deflate; client_max_window_bits"},
		{DeflateParams{ClientMaxWindowBits: 10}, "permessage-deflate; client_max_window_bits=10"},
		{DeflateParams{ClientMaxWindowBits: 99}, "permessage-deflate; client_max_window_bits"},
		{DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 9},
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9; client_max_window_bits"},
		{DeflateParams{ServerMaxWindowBits: 16}, "permessage-deflate; client_max_window_bits"},
	} {
		if got := DeflateOffer(tc.p); got != tc.want {
			t.Errorf("DeflateOffer(%+v) = %q, want %q", tc.p, got, tc.want)
		}
		// Every offer we make must be one we accept as a server.
		if _, _, ok := NegotiateDeflateServer(mustParse(t, DeflateOffer(tc.p)), busPolicy); !ok {
			t.Errorf("our server declines our offer %q", DeflateOffer(tc.p))
		}
	}
}

func TestAcceptDeflateResponse(t *testing.T) {
	def := DeflateParams{ClientMaxWindowBits: -1}
	for _, tc := range []struct {
		name    string
		offered DeflateParams
		resp    string
		want    DeflateParams
		err     string // substring; "" = success
	}{
		{"bare", def, "permessage-deflate", DeflateParams{}, ""},
		{"bus answer", def, "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			DeflateParams{ServerNoContextTakeover: true, ClientNoContextTakeover: true}, ""},
		{"server window unasked", def, "permessage-deflate; server_max_window_bits=10",
			DeflateParams{ServerMaxWindowBits: 10}, ""},
		{"client window limit", def, "permessage-deflate; client_max_window_bits=12",
			DeflateParams{ClientMaxWindowBits: 12}, ""},
		{"client window above our own", DeflateParams{ClientMaxWindowBits: 10}, "permessage-deflate; client_max_window_bits=12",
			DeflateParams{ClientMaxWindowBits: 10}, ""},
		{"client window below our own", DeflateParams{ClientMaxWindowBits: 12}, "permessage-deflate; client_max_window_bits=9",
			DeflateParams{ClientMaxWindowBits: 9}, ""},
		{"our client hint kept", DeflateParams{ClientNoContextTakeover: true}, "permessage-deflate",
			DeflateParams{ClientNoContextTakeover: true}, ""},
		{"server window smaller than asked", DeflateParams{ServerMaxWindowBits: 12}, "permessage-deflate; server_max_window_bits=10",
			DeflateParams{ServerMaxWindowBits: 10}, ""},
		{"server window as asked", DeflateParams{ServerMaxWindowBits: 12, ServerNoContextTakeover: true},
			"permessage-deflate; server_max_window_bits=12; server_no_context_takeover",
			DeflateParams{ServerMaxWindowBits: 12, ServerNoContextTakeover: true}, ""},
		{"quoted value", def, `permessage-deflate; server_max_window_bits="9"`, DeflateParams{ServerMaxWindowBits: 9}, ""},
		{"case", def, "PerMessage-Deflate; Server_No_Context_Takeover", DeflateParams{ServerNoContextTakeover: true}, ""},

		{"empty", def, "", DeflateParams{}, "not negotiated"},
		{"not offered extension", def, "x-foo", DeflateParams{}, "not offered"},
		{"extra extension", def, "permessage-deflate, x-foo", DeflateParams{}, "not offered"},
		{"twice", def, "permessage-deflate, permessage-deflate", DeflateParams{}, "more than once"},
		{"unknown param", def, "permessage-deflate; foo", DeflateParams{}, "unknown parameter"},
		{"duplicate", def, "permessage-deflate; server_no_context_takeover; server_no_context_takeover", DeflateParams{}, "repeated"},
		{"duplicate window", def, "permessage-deflate; client_max_window_bits=9; client_max_window_bits=10", DeflateParams{}, "repeated"},
		{"valued flag", def, "permessage-deflate; client_no_context_takeover=1", DeflateParams{}, "must not have a value"},
		{"client window valueless", def, "permessage-deflate; client_max_window_bits", DeflateParams{}, "needs a value"},
		{"server window valueless", def, "permessage-deflate; server_max_window_bits", DeflateParams{}, "needs a value"},
		{"window 7", def, "permessage-deflate; server_max_window_bits=7", DeflateParams{}, "needs a value"},
		{"window 16", def, "permessage-deflate; client_max_window_bits=16", DeflateParams{}, "needs a value"},
		{"server window larger than asked", DeflateParams{ServerMaxWindowBits: 10}, "permessage-deflate; server_max_window_bits=11", DeflateParams{}, "exceeds"},
		{"server window dropped", DeflateParams{ServerMaxWindowBits: 10}, "permessage-deflate", DeflateParams{}, "server_max_window_bits was offered"},
		{"server no context dropped", DeflateParams{ServerNoContextTakeover: true}, "permessage-deflate", DeflateParams{}, "server_no_context_takeover was offered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AcceptDeflateResponse(mustParse(t, tc.resp), tc.offered)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got (%+v, %v), want error containing %q", got, err, tc.err)
				}
				if tc.resp != "" && !errors.Is(err, ErrHandshake) {
					t.Fatalf("error %v does not wrap ErrHandshake", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got (%+v, %v), want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := AcceptDeflateResponse(nil, def); !errors.Is(err, ErrNotNegotiated) {
		t.Fatalf("empty response: %v, want ErrNotNegotiated", err)
	}
}

// TestDeflateRoundTrip runs our client's offers through our server and back.
func TestDeflateRoundTrip(t *testing.T) {
	for _, offered := range []DeflateParams{
		{ClientMaxWindowBits: -1},
		{ServerMaxWindowBits: 10},
		{ServerNoContextTakeover: true, ClientMaxWindowBits: 11},
		{ClientNoContextTakeover: true, ServerMaxWindowBits: 8, ClientMaxWindowBits: 8},
	} {
		for _, pol := range []DeflateServerPolicy{{}, busPolicy, {AllowClientContextTakeover: true}} {
			resp, sp, ok := NegotiateDeflateServer(mustParse(t, DeflateOffer(offered)), pol)
			if !ok {
				t.Fatalf("offer %+v declined", offered)
			}
			cp, err := AcceptDeflateResponse(mustParse(t, resp), offered)
			if err != nil {
				t.Fatalf("offer %+v, policy %+v: response %q refused: %v", offered, pol, resp, err)
			}
			if cp.ServerNoContextTakeover != sp.ServerNoContextTakeover || cp.ServerMaxWindowBits != sp.ServerMaxWindowBits {
				t.Fatalf("offer %+v, policy %+v: server %+v, client %+v disagree", offered, pol, sp, cp)
			}
			if sp.ClientNoContextTakeover && !cp.ClientNoContextTakeover {
				t.Fatalf("offer %+v, policy %+v: client keeps context the server drops (%+v, %+v)", offered, pol, sp, cp)
			}
		}
	}
}
