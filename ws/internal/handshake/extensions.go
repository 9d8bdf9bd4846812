package handshake

import (
	"fmt"
	"net/http"
	"strings"
)

// Extension is one element of a Sec-WebSocket-Extensions list (RFC 6455
// §9.1): an extension token and its parameters, in order.
type Extension struct {
	Name   string
	Params []Param
}

// Param is an extension parameter. Value is unquoted; HasValue tells
// "name" from `name=""`-like forms (an empty value cannot be a token, so
// HasValue implies a non-empty Value after a successful parse).
type Param struct {
	Name, Value string
	HasValue    bool
}

// String formats the extension as in a header: name; p1; p2=v. Values that
// are not tokens are written as quoted strings.
func (e Extension) String() string {
	var b strings.Builder
	b.WriteString(e.Name)
	for _, p := range e.Params {
		b.WriteString("; ")
		b.WriteString(p.Name)
		if p.HasValue {
			b.WriteByte('=')
			if isToken(p.Value) {
				b.WriteString(p.Value)
			} else {
				b.WriteString(quote(p.Value))
			}
		}
	}
	return b.String()
}

// FormatExtensions formats a list of extensions as one header value.
func FormatExtensions(exts []Extension) string {
	s := make([]string, len(exts))
	for i, e := range exts {
		s[i] = e.String()
	}
	return strings.Join(s, ", ")
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// ParseExtensions parses every Sec-WebSocket-Extensions line of h, in order,
// into one list (RFC 6455 §9.1, with the list, token and quoted-string rules
// of RFC 7230 §3.2.6 and §7):
//
//	Sec-WebSocket-Extensions = 1#extension
//	extension = token *( OWS ";" OWS token [ OWS "=" OWS ( token / quoted-string ) ] )
//
// Empty list elements are skipped. A quoted value must be a token once
// unescaped (RFC 6455 §9.1). Anything else is an error wrapping
// ErrHandshake; a header without any element yields no extension.
func ParseExtensions(h http.Header) ([]Extension, error) {
	exts, err := parseExtensions(h)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return exts, nil
}

// parseExtensions is ParseExtensions with errors that do not wrap
// ErrHandshake, for error messages sent to the client.
func parseExtensions(h http.Header) ([]Extension, error) {
	var exts []Extension
	for _, v := range h.Values("Sec-WebSocket-Extensions") {
		var err error
		if exts, err = appendExtensions(exts, v); err != nil {
			return nil, err
		}
	}
	return exts, nil
}

// ParseExtensionList parses one Sec-WebSocket-Extensions header value, as
// ParseExtensions does.
func ParseExtensionList(s string) ([]Extension, error) {
	exts, err := appendExtensions(nil, s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return exts, nil
}

type extParser struct {
	s string
	i int
}

func (p *extParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *extParser) token() string {
	start := p.i
	for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

func (p *extParser) fail(what string) error {
	if p.i >= len(p.s) {
		return fmt.Errorf("bad Sec-WebSocket-Extensions %q: %s at end", p.s, what)
	}
	return fmt.Errorf("bad Sec-WebSocket-Extensions %q: %s at offset %d", p.s, what, p.i)
}

// quotedString parses a quoted-string at p.i (which holds the opening
// DQUOTE) and returns its unescaped content.
func (p *extParser) quotedString() (string, error) {
	p.i++ // opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c == '\\':
			p.i++
			if p.i >= len(p.s) {
				return "", p.fail("unterminated quoted-pair")
			}
			c = p.s[p.i]
			// quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
			if c != '\t' && c != ' ' && (c < 0x21 || c == 0x7f) {
				return "", p.fail("invalid quoted-pair")
			}
			b.WriteByte(c)
		case c == '\t' || c == ' ' || c == 0x21 || c >= 0x23 && c <= 0x5b || c >= 0x5d && c <= 0x7e || c >= 0x80:
			b.WriteByte(c) // qdtext
		default:
			return "", p.fail("invalid character in quoted-string")
		}
		p.i++
	}
	return "", p.fail("unterminated quoted-string")
}

func appendExtensions(exts []Extension, s string) ([]Extension, error) {
	p := extParser{s: s}
	for {
		p.skipOWS()
		if p.i == len(p.s) {
			return exts, nil
		}
		if p.s[p.i] == ',' { // empty list element
			p.i++
			continue
		}
		name := p.token()
		if name == "" {
			return nil, p.fail("expected extension token")
		}
		ext := Extension{Name: name}
		p.skipOWS()
		for p.i < len(p.s) && p.s[p.i] == ';' {
			p.i++
			p.skipOWS()
			param := Param{Name: p.token()}
			if param.Name == "" {
				return nil, p.fail("expected parameter token")
			}
			p.skipOWS()
			if p.i < len(p.s) && p.s[p.i] == '=' {
				p.i++
				p.skipOWS()
				param.HasValue = true
				if p.i < len(p.s) && p.s[p.i] == '"' {
					v, err := p.quotedString()
					if err != nil {
						return nil, err
					}
					if !isToken(v) {
						return nil, fmt.Errorf("bad Sec-WebSocket-Extensions %q: quoted value %q of parameter %s is not a token", s, v, param.Name)
					}
					param.Value = v
				} else if param.Value = p.token(); param.Value == "" {
					return nil, p.fail("expected parameter value")
				}
				p.skipOWS()
			}
			ext.Params = append(ext.Params, param)
		}
		exts = append(exts, ext)
		if p.i == len(p.s) {
			return exts, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.fail(fmt.Sprintf("unexpected %q", p.s[p.i]))
		}
		p.i++
	}
}
