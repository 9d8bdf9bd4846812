// Package ws is a WebSocket library for servers and clients: RFC 6455 (The
// WebSocket Protocol) with RFC 7692 (permessage-deflate).
//
// Accept upgrades an HTTP request to a Conn (UpgradeConn does it over a raw
// net.Conn) and Dial opens one as a client, through HTTP and SOCKS5 proxies
// when configured. Both take an options pointer, nil meaning the defaults,
// and the limits are on by default. ExampleAccept and ExampleDial show the
// whole path.
//
// # Reading and writing
//
// ReadMessage returns a whole message in a new buffer, ReadMessageInto in
// the caller's, NextMessage in one the Conn lends until the next read, and
// Reader streams it. WriteMessage writes a whole message, Writer streams one,
// BufferMessage collects the answers to what one read brought and writes
// them before the next read waits, and Flush writes them now. Calls that can
// block take a context.Context. Reads are for one goroutine at a time;
// writes, Close, CloseNow and the deadline setters may be called from any
// goroutine, and the Conn serialises them itself (see Conn). Pings are
// answered automatically (RFC 6455 §5.5.2); Ping sends one and waits for its
// pong. Close runs the closing handshake (§7.1.2), bounded by the close
// timeout; CloseNow drops the connection.
//
// # Errors
//
// A *CloseError is the peer's close frame (§7.1.5), a *ProtocolError a
// violation this endpoint detected and the close code it sent (§7.1.7),
// ErrClosed use after the close; a refused handshake is a *HandshakeError on
// the server and a *DialError, with the server's status, header and the
// start of its body, on the client. Read them with errors.As and errors.Is.
//
// # Limits and memory
//
// A message over MaxMessageSize (32 MiB by default, after decompression) or
// a frame over MaxFrameSize closes the connection with 1009. A Budget shared
// by many connections bounds what all of them hold of the messages they are
// reading (1013 when it is taken). An idle connection holds a few hundred
// bytes besides its socket, and, on Linux over a plain socket, no read
// buffer; MEMORY.md in this module says what a connection holds and when.
//
// # Broadcast
//
// A PreparedMessage encodes a server message once, its plain and compressed
// frames, for any number of connections: WritePrepared writes one,
// WritePreparedBatch many in one writev, and AppendPreparedMessage encodes
// many back to back into one buffer, which WritePreparedFrames writes whole
// (ExampleNewPreparedMessage).
//
// # permessage-deflate
//
// Offered and accepted when EnableCompression is set (DialOptions,
// AcceptOptions). A server asks for server_no_context_takeover, so that one
// compressed PreparedMessage serves every client, unless
// CompressionOptions.Context keeps a bounded context per connection for
// better compression of small, repetitive messages. Inflation is bounded: a
// compressed message that would inflate past MaxMessageSize is refused with
// 1009 before it is inflated into memory, so a deflate bomb costs only its
// compressed bytes (ExampleDialOptions_compression).
//
// # Layers
//
// Protocol is the whole protocol without I/O: bytes in (Receive), events
// out (Next), frames appended to a buffer (the Append methods); it starts no
// goroutine and does not allocate in steady state for uncompressed traffic
// (ExampleProtocol). Conn is Protocol over a net.Conn; on Linux it reads and
// writes a TCP or Unix socket with raw system calls that still wait in Go's
// runtime poller and honour deadlines. Package nonblock adds the calls that
// never wait, for a server that runs its own epoll loop.
//
// This package is the module github.com/ovbus/ovbus/ws: besides the standard
// library it compiles github.com/klauspost/compress (deflate) and
// golang.org/x/net (proxies, header parsing), and nothing of the ovbus bus.
package ws
