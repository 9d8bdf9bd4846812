package handshake

import (
	"strconv"
	"strings"
)

// DeflateExtension is the extension token of RFC 7692.
const DeflateExtension = "permessage-deflate"

// Parameter names of RFC 7692 §7.1.
const (
	paramServerNoContextTakeover = "server_no_context_takeover"
	paramClientNoContextTakeover = "client_no_context_takeover"
	paramServerMaxWindowBits     = "server_max_window_bits"
	paramClientMaxWindowBits     = "client_max_window_bits"
)

// DeflateParams are permessage-deflate parameters. As the result of a
// negotiation they are what both endpoints agreed on:
//
//   - ServerNoContextTakeover: the server resets its compressor after each
//     message (so the client may reset its decompressor).
//   - ClientNoContextTakeover: the client resets its compressor after each
//     message.
//   - ServerMaxWindowBits, ClientMaxWindowBits: the largest LZ77 window, as a
//     base-2 logarithm, the server (client) may compress with; 8..15, 0 means
//     15 (no limit). A compressor that cannot shrink its window must not use
//     back-references (Huffman-only) when the limit is below 15.
//
// As the input of DeflateOffer they are what the client offers; there
// ClientMaxWindowBits 0 or -1 offers a valueless client_max_window_bits.
type DeflateParams struct {
	ServerNoContextTakeover, ClientNoContextTakeover bool
	ServerMaxWindowBits, ClientMaxWindowBits         int
}

// DeflateServerPolicy is what a server requires or allows when it accepts
// permessage-deflate.
type DeflateServerPolicy struct {
	// RequireServerNoContextTakeover makes the server always answer with
	// server_no_context_takeover, which a server may add on its own (RFC
	// 7692 §7.1.1.1). The bus sets it so that one compressed frame, made
	// without context, can be sent to every client.
	RequireServerNoContextTakeover bool
	// ServerContextFullWindow, for a server that takes over context only
	// with the full 32 KiB window (its context is a dictionary of up to
	// that much), answers with server_no_context_takeover to an offer that
	// limits server_max_window_bits below 15.
	ServerContextFullWindow bool
	// AllowClientContextTakeover lets the client keep its LZ77 window
	// between messages, so the server must keep one decompressor window
	// (32 KiB) per connection. When false the server answers with
	// client_no_context_takeover (RFC 7692 §7.1.1.2).
	AllowClientContextTakeover bool
	// MinServerMaxWindowBits, when 9..15, declines offers whose
	// server_max_window_bits is below it (the next offer is then tried),
	// for servers whose shared compressed frames use a larger window. 0
	// accepts any valid value.
	MinServerMaxWindowBits int
}

// parseWindowBits parses a window bits value: a decimal 8..15 without sign
// or leading zero (RFC 7692 §7.1.2.1).
func parseWindowBits(v string) (int, bool) {
	switch {
	case len(v) == 1 && v[0] >= '8' && v[0] <= '9':
		return int(v[0] - '0'), true
	case len(v) == 2 && v[0] == '1' && v[1] >= '0' && v[1] <= '5':
		return 10 + int(v[1]-'0'), true
	}
	return 0, false
}

// deflateOffer is one parsed permessage-deflate offer.
type deflateOffer struct {
	serverNoCtx, clientNoCtx bool
	serverMaxBits            int  // 0: not offered
	clientMaxBits            int  // 0: valueless or not offered
	clientMaxOffered         bool // client_max_window_bits present
}

// parseDeflateOffer validates an offer's parameters (RFC 7692 §7.1: unknown
// parameter, invalid value or duplicate parameter -> decline the offer).
func parseDeflateOffer(ext Extension) (deflateOffer, bool) {
	var o deflateOffer
	var seen [4]bool
	for _, p := range ext.Params {
		var idx int
		switch strings.ToLower(p.Name) {
		case paramServerNoContextTakeover:
			idx = 0
			if p.HasValue {
				return o, false
			}
			o.serverNoCtx = true
		case paramClientNoContextTakeover:
			idx = 1
			if p.HasValue {
				return o, false
			}
			o.clientNoCtx = true
		case paramServerMaxWindowBits:
			idx = 2
			bits, ok := parseWindowBits(p.Value)
			if !p.HasValue || !ok {
				return o, false
			}
			o.serverMaxBits = bits
		case paramClientMaxWindowBits:
			idx = 3
			o.clientMaxOffered = true
			if p.HasValue {
				bits, ok := parseWindowBits(p.Value)
				if !ok {
					return o, false
				}
				o.clientMaxBits = bits
			}
		default:
			return o, false
		}
		if seen[idx] {
			return o, false
		}
		seen[idx] = true
	}
	return o, true
}

// NegotiateDeflateServer answers a client's extension offers on the server
// side (RFC 7692 §7.1). It accepts the first permessage-deflate offer whose
// parameters are all known, valid and not repeated, declining the others,
// and returns the Sec-WebSocket-Extensions response value and the agreed
// parameters. ok is false when no offer is acceptable; the handshake then
// goes on without compression.
//
// The response:
//   - has server_no_context_takeover when the client asked for it or the
//     policy requires it;
//   - has client_no_context_takeover when the client offered it (the hint
//     becomes binding, so the server can drop its window between messages)
//     or the policy does not allow client context takeover;
//   - echoes server_max_window_bits=N when the client asked for it: the
//     server then must not compress with a window above 2^N, which a
//     context-free Huffman-only compressor satisfies;
//   - never has client_max_window_bits: the server can inflate any window.
//     A value the client offered is recorded in ClientMaxWindowBits.
func NegotiateDeflateServer(offers []Extension, pol DeflateServerPolicy) (resp string, params DeflateParams, ok bool) {
	for _, ext := range offers {
		if !strings.EqualFold(ext.Name, DeflateExtension) {
			continue
		}
		o, valid := parseDeflateOffer(ext)
		if !valid || o.serverMaxBits != 0 && o.serverMaxBits < pol.MinServerMaxWindowBits {
			continue
		}
		params = DeflateParams{
			ServerNoContextTakeover: o.serverNoCtx || pol.RequireServerNoContextTakeover ||
				pol.ServerContextFullWindow && o.serverMaxBits != 0 && o.serverMaxBits < 15,
			ClientNoContextTakeover: o.clientNoCtx || !pol.AllowClientContextTakeover,
			ServerMaxWindowBits:     o.serverMaxBits,
			ClientMaxWindowBits:     o.clientMaxBits,
		}
		b := []byte(DeflateExtension)
		if params.ServerNoContextTakeover {
			b = append(b, "; "+paramServerNoContextTakeover...)
		}
		if params.ClientNoContextTakeover {
			b = append(b, "; "+paramClientNoContextTakeover...)
		}
		if o.serverMaxBits != 0 {
			b = append(b, "; "+paramServerMaxWindowBits+"="...)
			b = strconv.AppendInt(b, int64(o.serverMaxBits), 10)
		}
		return string(b), params, true
	}
	return "", DeflateParams{}, false
}

// DeflateOffer returns the client's Sec-WebSocket-Extensions offer for p:
// server_no_context_takeover and client_no_context_takeover when set,
// server_max_window_bits=N when ServerMaxWindowBits is 8..15, and always
// client_max_window_bits, with =N when ClientMaxWindowBits is 8..15 and
// valueless otherwise (announcing that the client honours a limit the
// server may set). The zero DeflateParams give the default offer
// "permessage-deflate; client_max_window_bits".
func DeflateOffer(p DeflateParams) string {
	b := []byte(DeflateExtension)
	if p.ServerNoContextTakeover {
		b = append(b, "; "+paramServerNoContextTakeover...)
	}
	if p.ClientNoContextTakeover {
		b = append(b, "; "+paramClientNoContextTakeover...)
	}
	if p.ServerMaxWindowBits >= 8 && p.ServerMaxWindowBits <= 15 {
		b = append(b, "; "+paramServerMaxWindowBits+"="...)
		b = strconv.AppendInt(b, int64(p.ServerMaxWindowBits), 10)
	}
	b = append(b, "; "+paramClientMaxWindowBits...)
	if p.ClientMaxWindowBits >= 8 && p.ClientMaxWindowBits <= 15 {
		b = append(b, '=')
		b = strconv.AppendInt(b, int64(p.ClientMaxWindowBits), 10)
	}
	return string(b)
}

// AcceptDeflateResponse validates, on the client side, the server's
// Sec-WebSocket-Extensions response (all its elements, as parsed by
// ParseExtensions) to the offer DeflateOffer(offered), and returns the
// agreed parameters. An empty resp returns ErrNotNegotiated (compression is
// off, the handshake is fine). Otherwise the connection must be failed (RFC
// 7692 §7.1, §7.1.1, §7.1.2) when the error is not nil, that is when the
// response:
//   - names an extension other than permessage-deflate, or more than one;
//   - has an unknown parameter, a repeated one, a value on
//     server_no_context_takeover or client_no_context_takeover, or a
//     window bits value that is missing or not 8..15;
//   - lacks server_no_context_takeover although it was offered;
//   - lacks server_max_window_bits although it was offered, or answers
//     with a larger value than offered.
//
// A server_max_window_bits the client did not ask for is allowed (RFC 7692
// §7.1.2.1; any window can be inflated). client_max_window_bits in the
// response limits the client's window: ClientMaxWindowBits is the smaller
// of it and the offered value.
func AcceptDeflateResponse(resp []Extension, offered DeflateParams) (DeflateParams, error) {
	if len(resp) == 0 {
		return DeflateParams{}, ErrNotNegotiated
	}
	for _, ext := range resp {
		if !strings.EqualFold(ext.Name, DeflateExtension) {
			return DeflateParams{}, protocolError("server selected extension %q that was not offered", ext.Name)
		}
	}
	if len(resp) > 1 {
		return DeflateParams{}, protocolError("server selected %s more than once", DeflateExtension)
	}
	offServerBits := offered.ServerMaxWindowBits
	if offServerBits < 8 || offServerBits > 15 {
		offServerBits = 0
	}
	offClientBits := offered.ClientMaxWindowBits
	if offClientBits < 8 || offClientBits > 15 {
		offClientBits = 0
	}
	got := DeflateParams{ClientNoContextTakeover: offered.ClientNoContextTakeover, ClientMaxWindowBits: offClientBits}
	var seen [4]bool
	for _, p := range resp[0].Params {
		var idx int
		name := strings.ToLower(p.Name)
		switch name {
		case paramServerNoContextTakeover:
			idx = 0
			if p.HasValue {
				return DeflateParams{}, protocolError("%s: %s must not have a value", DeflateExtension, name)
			}
			got.ServerNoContextTakeover = true
		case paramClientNoContextTakeover:
			idx = 1
			if p.HasValue {
				return DeflateParams{}, protocolError("%s: %s must not have a value", DeflateExtension, name)
			}
			got.ClientNoContextTakeover = true
		case paramServerMaxWindowBits, paramClientMaxWindowBits:
			idx = 2
			if name == paramClientMaxWindowBits {
				idx = 3
			}
			bits, ok := parseWindowBits(p.Value)
			if !p.HasValue || !ok {
				return DeflateParams{}, protocolError("%s: %s needs a value in 8..15, got %q", DeflateExtension, name, p.Value)
			}
			if idx == 2 {
				if offServerBits != 0 && bits > offServerBits {
					return DeflateParams{}, protocolError("%s: server_max_window_bits=%d exceeds the offered %d", DeflateExtension, bits, offServerBits)
				}
				got.ServerMaxWindowBits = bits
			} else if offClientBits == 0 || bits < offClientBits {
				got.ClientMaxWindowBits = bits
			}
		default:
			return DeflateParams{}, protocolError("%s: unknown parameter %q in response", DeflateExtension, p.Name)
		}
		if seen[idx] {
			return DeflateParams{}, protocolError("%s: parameter %s repeated", DeflateExtension, name)
		}
		seen[idx] = true
	}
	if offered.ServerNoContextTakeover && !got.ServerNoContextTakeover {
		return DeflateParams{}, protocolError("%s: server_no_context_takeover was offered but not accepted", DeflateExtension)
	}
	if offServerBits != 0 && got.ServerMaxWindowBits == 0 {
		return DeflateParams{}, protocolError("%s: server_max_window_bits was offered but not accepted", DeflateExtension)
	}
	return got, nil
}
