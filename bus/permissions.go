package bus

import (
	"strconv"
	"strings"
)

// Permissions says which message types a token holder may send and receive.
// A nil list (key absent) allows every type; an empty list allows none.
// Patterns are matched by MatchType; a frame without a type (an encrypted
// frame) is matched as "".
type Permissions struct {
	// Name labels the token in logs and metrics instead of the secret.
	Name string
	// Emit lists the types the client may send; other frames are dropped.
	Emit []string
	// Receive lists the types delivered to the client.
	Receive []string
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
