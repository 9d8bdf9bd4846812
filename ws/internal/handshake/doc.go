// Package handshake implements the WebSocket opening handshake of RFC 6455
// §4 and the permessage-deflate negotiation of RFC 7692 §7 as pure
// functions: they parse, validate and build HTTP messages but never open,
// read from or write to a socket on their own (the readers take a
// *bufio.Reader the caller owns).
//
// Server side: ReadServerRequest (for servers that own the net.Conn),
// CheckRequest, SelectSubprotocol, NegotiateDeflateServer and
// AppendServerResponse. Failures are *Error values carrying the HTTP status
// to answer with.
//
// Client side: NewChallengeKey, DeflateOffer, ClientRequest,
// ReadClientResponse, CheckResponse and AcceptDeflateResponse. A refused
// handshake (any status but 101) is a *ResponseError.
package handshake
