package bus

import (
	"slices"
	"strconv"
	"strings"
)

// Permissions says what a client may do: the message types it may send
// and receive, how fast it may send, and whether replies are routed to it
// alone. They are a token's (Auth.Tokens) or a named set's (Auth.Sets). A
// nil list (key absent) allows every type; an empty list allows none.
// Patterns are matched by MatchType; a frame without a type (an encrypted
// frame) is matched as "".
type Permissions struct {
	// Name labels a token in logs, the monitor and metrics instead of the
	// secret (its identity is "token:NAME"); reply routing knows the
	// client by it. Unused in a set.
	Name string
	// Set, in a token, names the entry of Auth.Sets whose permissions the
	// token has; the fields below then stay empty.
	Set string
	// Emit lists the types the client may send; other frames are dropped.
	Emit []string
	// Receive lists the types delivered to the client.
	Receive []string
	// Rate limits the messages the client may send to Rate a second on
	// average, Burst of them at once (a token bucket; 0: at most one
	// second's worth, and at least 1). A client that sends faster is
	// closed with 1008 "message rate limit", counted in
	// ovbus_closes_total{reason="rate_limited"}; the frame over the limit
	// is not relayed, and a connection from the same address under the same
	// identity starts with the spent bucket (refused with 429 and
	// Retry-After while it holds no token). Zero Rate: no limit.
	Rate  float64
	Burst int
	// ReplyRouting keeps other clients' private frames from this client
	// (see docs/protocol.md §3, "Reply routing"): it receives the frames
	// for everyone, its own, and the private frames meant for it: those
	// whose context.destination names it (Name) or that carry a session it
	// emitted first.
	ReplyRouting bool
}

// Clone returns a copy of p that shares no list with it.
func (p Permissions) Clone() Permissions {
	p.Emit, p.Receive = slices.Clone(p.Emit), slices.Clone(p.Receive)
	return p
}

// CanEmit reports whether msgType may be sent under p.
func (p Permissions) CanEmit(msgType string) bool { return matchAny(p.Emit, msgType) }

// CanReceive reports whether msgType may be delivered under p.
func (p Permissions) CanReceive(msgType string) bool { return matchAny(p.Receive, msgType) }

func matchAny(patterns []string, msgType string) bool {
	if patterns == nil {
		return true
	}
	for _, pat := range patterns {
		if MatchType(pat, msgType) {
			return true
		}
	}
	return false
}

// MatchType reports whether a message type matches a permission pattern,
// in which '*' stands for any run of characters (':' and '.' included) and
// every other character stands for itself: "speak", "recognizer_loop:*",
// "*.response", "*". A frame without a type is matched as "", which only
// patterns made of '*' match.
func MatchType(pattern, msgType string) bool {
	// Greedy wildcard matching with one backtrack point: linear in practice.
	p, s := 0, 0
	star, mark := -1, 0
	for s < len(msgType) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, s
			p++
		case p < len(pattern) && pattern[p] == msgType[s]:
			p++
			s++
		case star >= 0:
			p = star + 1
			mark++
			s = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// OriginAllowed reports whether a WebSocket upgrade carrying this Origin
// header is accepted under the allowed-origin patterns (compared without
// regard to case, '*' as in MatchType: "http://localhost:*"). No patterns,
// or a request without an Origin header (a non-browser client), is always
// allowed.
func OriginAllowed(patterns []string, origin string) bool {
	if len(patterns) == 0 || origin == "" {
		return true
	}
	o := strings.ToLower(origin)
	for _, pat := range patterns {
		if MatchType(strings.ToLower(pat), o) {
			return true
		}
	}
	return false
}

// Redact shows a secret token in logs and printed configurations: its first
// 4 characters and "…" when it is long enough to keep the rest secret,
// otherwise "…" alone.
func Redact(token string) string {
	if len(token) >= 12 {
		return token[:4] + "…"
	}
	return "…"
}

// Label names the token holding p in errors without revealing it: p's
// Name, else the token's Redact, quoted.
func (p Permissions) Label(tok string) string {
	if p.Name != "" {
		return strconv.Quote(p.Name)
	}
	return strconv.Quote(Redact(tok))
}
