package config

import (
	"cmp"
	"maps"
	"slices"

	"github.com/ovbus/ovbus/bus"
)

// ClientToken picks the token of websocket.auth that a client holding this
// configuration presents to the bus (ovbus listen and send, run where the bus
// runs): "" when the bus takes clients without a token (auth off, or
// required false: a client presenting none gets every permission), else the
// first token whose permissions fits accepts: tokens with emit or receive
// lists before those with full access (the least that will do), then by
// name, then by the token itself; "" when none fits. label names the token
// without revealing it (bus.Permissions.Label).
func (c *Config) ClientToken(fits func(bus.Permissions) bool) (token, label string) {
	a := c.Bus.Auth
	if !a.Required {
		return "", ""
	}
	full := func(p bus.Permissions) int {
		if p.Emit == nil && p.Receive == nil {
			return 1
		}
		return 0
	}
	toks := slices.SortedFunc(maps.Keys(a.Tokens), func(x, y string) int {
		px, py := a.Tokens[x], a.Tokens[y]
		return cmp.Or(cmp.Compare(full(px), full(py)), cmp.Compare(px.Name, py.Name), cmp.Compare(x, y))
	})
	for _, tok := range toks {
		if p := a.Tokens[tok]; fits(p) {
			return tok, p.Label(tok)
		}
	}
	return "", ""
}
