package bus

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// Access control (docs/protocol.md §1): what a connecting client may do.
// A client that shows a token gets the token's permissions, or is refused
// when the bus does not know it. A client that shows none gets those of
// where it comes from:
//
//  1. a Unix socket, or an address of a network in Auth.Networks: that
//     network's permission set;
//  2. a loopback address (127.0.0.0/8, ::1): Auth.Loopback, everything by
//     default;
//  3. any other address: Auth.Anyone, refused by default.
//
// So a stock single-device install, whose services all connect over
// loopback, works unchanged, and a bus bound to a LAN address refuses the
// LAN until the operator says otherwise. The rules are compiled once per
// Apply (compileAccess) into grants that the connections share.

// The built-in permission sets, for Auth.Loopback, Auth.Anyone and the
// values of Auth.Networks.
const (
	// SetAll allows every message type both ways, at any rate.
	SetAll = "all"
	// SetRefuse refuses the connection (HTTP 401).
	SetRefuse = "refuse"
)

// Defaults of the address rules.
const (
	DefaultLoopback = SetAll
	DefaultAnyone   = SetRefuse
)

// MaxTokenBytes is the longest token the bus accepts, configured or shown.
// A longer one shown is refused like a wrong one.
const MaxTokenBytes = 512

// Auth is the access control of the bus. The zero value trusts clients on
// loopback with everything and refuses every other client.
type Auth struct {
	// Required refuses every client that shows no token, from wherever it
	// connects: the address rules below then grant nothing.
	Required bool
	// Tokens maps a secret token to what its holder may do. A client
	// shows its token in the URL's path (the route, "/", the token:
	// ws://hub:8181/core/TOKEN, which a stock OVOS client sends with
	// nothing but its mycroft.conf; on a bus without tokens such a path
	// is an unknown path, 404), as ?token=TOKEN, or in an Authorization:
	// Bearer TOKEN header, in one place only. A token the
	// bus does not know, an empty one, one longer than MaxTokenBytes, or
	// tokens in two places refuse the connection with 401, whatever the
	// address. Tokens are compared in constant time and never logged.
	Tokens map[string]Permissions
	// Sets are the named permission sets that Loopback, Networks, Anyone
	// and tokens (Permissions.Set) refer to; "all" and "refuse" are
	// built in and cannot be redefined.
	Sets map[string]Permissions
	// Loopback names the set of clients without a token connecting from a
	// loopback address (127.0.0.0/8, ::1) or a Unix socket; "" is
	// DefaultLoopback.
	Loopback string
	// Networks maps a network ("192.168.1.0/24", "fd00::/64", or one
	// address) to the set of clients without a token connecting from it.
	// Networks must not overlap, and none may hold 127.0.0.1 or ::1 (those
	// are Loopback's); one inside 127.0.0.0/8 takes those addresses out of
	// Loopback. IPv4-mapped IPv6 addresses and networks count as IPv4.
	Networks map[string]string
	// Anyone names the set of every other client without a token; "" is
	// DefaultAnyone.
	Anyone string
}

// Enabled reports whether tokens are in use: some are configured, or
// every client must show one.
func (a Auth) Enabled() bool { return a.Required || len(a.Tokens) > 0 }

// RoutesReplies reports whether a token or a permission set routes replies
// (Permissions.ReplyRouting).
func (a Auth) RoutesReplies() bool {
	for _, m := range []map[string]Permissions{a.Tokens, a.Sets} {
		for _, p := range m {
			if p.ReplyRouting {
				return true
			}
		}
	}
	return false
}

// Clone returns a deep copy of a.
func (a Auth) Clone() Auth {
	c := a
	c.Tokens = clonePerms(a.Tokens)
	c.Sets = clonePerms(a.Sets)
	c.Networks = maps.Clone(a.Networks)
	return c
}

func clonePerms(m map[string]Permissions) map[string]Permissions {
	if m == nil {
		return nil
	}
	out := make(map[string]Permissions, len(m))
	for k, p := range m {
		out[k] = p.Clone()
	}
	return out
}

// grant is what a connection is given: shared by every connection under
// the same rule, immutable.
type grant struct {
	perms *Permissions // nil: every type both ways
	// identity names the rule in the monitor, the metrics and the logs:
	// "token:NAME", "network:CIDR", "loopback", "unix" or "anyone"; never
	// a token.
	identity string
	// name is the token's name (SessionInfo.Token), the name reply routing
	// knows the client by; "" for the address rules.
	name        string
	rate, burst float64 // messages per second and at once; rate 0: no limit
	routed      bool    // Permissions.ReplyRouting
}

type tokenRule struct {
	digest [sha256.Size]byte
	g      *grant
}

type netRule struct {
	prefix netip.Prefix
	g      *grant
}

// access is Auth compiled: a nil grant refuses.
type access struct {
	required     bool
	tokens       []tokenRule
	networks     []netRule
	loopback     *grant
	unix         *grant
	anyone       *grant
	receiveRules bool     // some grant has a receive list: the log keeps message types
	routing      bool     // some grant routes replies
	routedNames  []string // the names of the tokens whose grants route replies
}

// compileAccess turns a validated Auth (after withDefaults) into grants.
func compileAccess(a *Auth) *access {
	ac := &access{required: a.Required}
	note := func(g *grant) *grant {
		if g != nil {
			ac.receiveRules = ac.receiveRules || (g.perms != nil && g.perms.Receive != nil)
			ac.routing = ac.routing || g.routed
		}
		return g
	}
	named := func(set, identity string) *grant {
		switch set {
		case SetRefuse:
			return nil
		case SetAll:
			return note(&grant{identity: identity})
		}
		return note(newGrant(a.Sets[set], identity, ""))
	}
	for _, tok := range slices.Sorted(maps.Keys(a.Tokens)) {
		p := a.Tokens[tok]
		id := "token"
		if p.Name != "" {
			id += ":" + p.Name
		}
		if p.Set != "" {
			q := a.Sets[p.Set]
			q.Name = p.Name
			p = q
		}
		g := note(newGrant(p, id, p.Name))
		ac.tokens = append(ac.tokens, tokenRule{sha256.Sum256([]byte(tok)), g})
		if g.routed && g.name != "" && !slices.Contains(ac.routedNames, g.name) {
			ac.routedNames = append(ac.routedNames, g.name)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(a.Networks)) {
		prefix, _ := ParseNetwork(n)
		ac.networks = append(ac.networks, netRule{prefix, named(a.Networks[n], "network:"+prefix.String())})
	}
	ac.loopback = named(a.Loopback, "loopback")
	ac.unix = named(a.Loopback, "unix")
	ac.anyone = named(a.Anyone, "anyone")
	return ac
}

func newGrant(p Permissions, identity, name string) *grant {
	g := &grant{identity: identity, name: name, rate: p.Rate, routed: p.ReplyRouting}
	if p.Rate > 0 {
		g.burst = float64(p.Burst)
		if p.Burst == 0 {
			g.burst = max(1, math.Ceil(p.Rate))
		}
	}
	if p.Emit != nil || p.Receive != nil {
		q := p.Clone()
		q.Set, q.Rate, q.Burst, q.ReplyRouting = "", 0, 0, false
		g.perms = &q
	}
	return g
}

// Why a connection was refused: the cause label of
// ovbus_auth_refused_total and of the log line.
const (
	refusedAddress   = "address"       // no token, and the address rules refuse it
	refusedUnknown   = "unknown_token" // a token the bus does not know
	refusedEmpty     = "empty_token"
	refusedLong      = "long_token" // longer than MaxTokenBytes
	refusedRepeated  = "repeated_token"
	refusedMalformed = "malformed_token" // cannot be decoded, or holds white space
)

var refusedCauses = []string{refusedAddress, refusedUnknown, refusedEmpty, refusedLong, refusedRepeated, refusedMalformed}

// resolve finds the grant of a client that showed tok (when shown) from
// addr (or a Unix socket). A nil grant refuses it, for cause.
func (ac *access) resolve(tok string, shown bool, addr netip.Addr, unix bool) (g *grant, cause string) {
	if shown {
		if g := ac.match(tok); g != nil {
			return g, ""
		}
		return nil, refusedUnknown
	}
	switch {
	case ac.required:
		g = nil
	case unix:
		g = ac.unix
	default:
		g = ac.byAddress(addr)
	}
	if g == nil {
		return nil, refusedAddress
	}
	return g, ""
}

// byAddress is the grant of a client without a token at addr (unmapped,
// without a zone): its network's, else loopback's or anyone's.
func (ac *access) byAddress(addr netip.Addr) *grant {
	for _, n := range ac.networks {
		if n.prefix.Contains(addr) {
			return n.g
		}
	}
	if addr.IsLoopback() {
		return ac.loopback
	}
	return ac.anyone
}

// match returns the grant of the configured token equal to tok, or nil. It
// compares SHA-256 digests, every one of them, so that its time tells
// nothing of the tokens: not their lengths, not where tok differs, not
// which one matched.
func (ac *access) match(tok string) *grant {
	d := sha256.Sum256([]byte(tok))
	found := -1
	for i := range ac.tokens {
		eq := subtle.ConstantTimeCompare(d[:], ac.tokens[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return nil
	}
	return ac.tokens[found].g
}

// clientAddr is where a request comes from: its address without a zone,
// IPv4-mapped addresses as IPv4, or unix when it came over a Unix socket.
// An address that cannot be read is the zero Addr, which only Anyone's
// rule takes.
func clientAddr(r *http.Request) (addr netip.Addr, unix bool) {
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la.Network() == "unix" {
		return netip.Addr{}, true
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), false
}

// requestToken returns the token a request shows: the rest of the path
// after the route (routeTok, when viaRoute), ?token=..., or Authorization:
// Bearer .... shown is false when it shows none; cause is set when the
// token must be refused whatever it is (empty, too long, shown twice, not
// decodable).
func requestToken(r *http.Request, routeTok string, viaRoute bool) (tok string, shown bool, cause string) {
	n := 0
	if viaRoute {
		tok, n = routeTok, 1
	}
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err != nil || key != "token" {
			continue
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return "", true, refusedMalformed
		}
		tok, n = val, n+1
	}
	for _, h := range r.Header.Values("Authorization") {
		scheme, rest, _ := strings.Cut(strings.TrimSpace(h), " ")
		if !strings.EqualFold(scheme, "bearer") {
			continue // another scheme is not a token of ours
		}
		rest = strings.TrimSpace(rest)
		if strings.ContainsAny(rest, " \t,") {
			return "", true, refusedMalformed
		}
		tok, n = rest, n+1
	}
	switch {
	case n == 0:
		return "", false, ""
	case n > 1:
		return "", true, refusedRepeated
	case tok == "":
		return "", true, refusedEmpty
	case len(tok) > MaxTokenBytes:
		return "", true, refusedLong
	}
	return tok, true, ""
}

// ParseNetwork reads a network of Auth.Networks: a CIDR prefix without
// host bits ("192.168.1.0/24", "fd00::/64") or one address ("192.168.1.7",
// a /32 or /128). An IPv4-mapped IPv6 network ("::ffff:192.168.1.0/120")
// is returned as the IPv4 network it maps.
func ParseNetwork(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not a network: expected a CIDR prefix such as \"192.168.1.0/24\" or \"fd00::/64\", or one address", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set: the network is %q", s, p.Masked())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// setNames are the names a rule may refer to: the built-in sets and Sets.
func (a *Auth) setNames() string {
	return strings.Join(append([]string{SetAll, SetRefuse}, slices.Sorted(maps.Keys(a.Sets))...), ", ")
}

// validate checks a (after withDefaults) field against field; bad records
// one fault at a path below "auth" (the configuration's keys, a token
// itself as the key of its entry: never print the path).
func (a *Auth) validate(bad func(path []string, format string, args ...any)) {
	known := func(set string) bool { _, ok := a.Sets[set]; return ok || set == SetAll || set == SetRefuse }
	if a.Required && len(a.Tokens) == 0 {
		bad(nil, "required is true but no tokens are configured: no client could connect")
	}
	for _, name := range slices.Sorted(maps.Keys(a.Sets)) {
		p := a.Sets[name]
		where := []string{"permissions", name}
		switch {
		case strings.TrimSpace(name) == "":
			bad(where, "a permission set needs a name")
		case name == SetAll || name == SetRefuse:
			bad(where, "%q is a built-in set and cannot be redefined", name)
		case p.Set != "":
			bad(append(where, "permissions"), "a permission set cannot refer to another")
		}
		p.validate(where, fmt.Sprintf("permission set %q", name), bad)
	}
	for _, tok := range slices.Sorted(maps.Keys(a.Tokens)) {
		p := a.Tokens[tok]
		where := []string{"tokens", tok}
		label := "token " + p.Label(tok)
		switch {
		case strings.TrimSpace(tok) == "":
			bad(where, "a token must not be empty")
		case len(tok) > MaxTokenBytes:
			bad(where, "%s is longer than %d bytes", label, MaxTokenBytes)
		case strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
			bad(where, "%s holds a character that is not visible ASCII: use letters, digits and -._~ (a token travels in URLs)", label)
		}
		if p.Set != "" {
			if p.Emit != nil || p.Receive != nil || p.Rate != 0 || p.Burst != 0 || p.ReplyRouting {
				bad(append(where, "permissions"), "%s names a permission set and has permissions of its own: keep one", label)
			}
			if !a.hasSet(p.Set) {
				bad(append(where, "permissions"), "%s: unknown permission set %q: expected one of %s", label, p.Set, strings.Join(slices.Sorted(maps.Keys(a.Sets)), ", "))
			}
		}
		p.validate(where, label, bad)
	}
	for _, r := range [...]struct{ key, set string }{{"loopback", a.Loopback}, {"anyone", a.Anyone}} {
		if !known(r.set) {
			bad([]string{r.key}, "unknown permission set %q: expected one of %s", r.set, a.setNames())
		}
	}
	var prefixes []netip.Prefix
	var keys []string
	for _, n := range slices.Sorted(maps.Keys(a.Networks)) {
		where := []string{"networks", n}
		p, err := ParseNetwork(n)
		if err != nil {
			bad(where, "%v", err)
			continue
		}
		if !known(a.Networks[n]) {
			bad(where, "unknown permission set %q: expected one of %s", a.Networks[n], a.setNames())
		}
		for _, own := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
			if p.Contains(own) {
				bad(where, "%s holds %s, the address of this machine's own services: set their permissions with loopback", p, own)
			}
		}
		for i, q := range prefixes {
			if p.Overlaps(q) {
				bad(where, "%s overlaps %q (%s): a client in both would have two permission sets", p, keys[i], q)
			}
		}
		prefixes, keys = append(prefixes, p), append(keys, n)
	}
}

func (a *Auth) hasSet(name string) bool { _, ok := a.Sets[name]; return ok }

// validate checks the permissions of one token or set, named label.
func (p *Permissions) validate(where []string, label string, bad func(path []string, format string, args ...any)) {
	for _, pat := range slices.Concat(p.Emit, p.Receive) {
		if pat == "" {
			bad(where, "%s: a permission pattern must not be empty", label)
		}
	}
	if p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) {
		bad(append(where, "rate"), "%s: expected messages per second, 0 (no limit) or more, got %v", label, p.Rate)
	}
	if p.Burst < 0 {
		bad(append(where, "burst"), "%s: expected a number of messages, 0 or more, got %d", label, p.Burst)
	} else if p.Burst > 0 && p.Rate == 0 {
		bad(append(where, "burst"), "%s: burst is set but rate is not: a burst bounds a rate", label)
	}
}
