// Package ws is a WebSocket toolkit: RFC 6455 (The WebSocket Protocol) with
// RFC 7692 (permessage-deflate), built in layers.
//
// # Sans-IO protocol core
//
// Protocol is the whole protocol without any I/O: bytes read from the
// network go in with Protocol.Receive, decoded events come out of
// Protocol.NextInto (into an Event the loop reuses; Protocol.Next returns
// a copy), and the Append methods encode frames into a caller's buffer. It
// implements
//
//   - framing (RFC 6455 §5.2): minimal length encodings, 64-bit lengths with
//     the top bit clear, reserved bits and opcodes, control frames of at
//     most 125 bytes that are never fragmented (§5.5);
//   - masking (§5.3): a server requires masked frames and sends unmasked
//     ones, a client the opposite (§5.1); MaskBytes works a word at a time;
//   - fragmentation (§5.4): control frames may appear between fragments,
//     messages may not interleave;
//   - UTF-8 (§5.6, §8.1): text is validated incrementally and fails fast,
//     at the first byte that can never be part of valid UTF-8
//     (UTF8Validator), with close code 1007;
//   - the closing handshake (§5.5.1, §7): close codes are checked (§7.4),
//     the state moves Open -> CloseSent/CloseReceived -> Closed, nothing
//     after a Close frame is processed; a violation queues a Close frame
//     with the matching code (§7.1.7) and fails the connection;
//   - limits: MaxFrameSize and MaxMessageSize are on by default (1009).
//
// Data is streamed: the payload of a data frame is handed out as it
// arrives, so a Conn can deliver a message larger than any buffer piece by
// piece. In steady state the core does not allocate for uncompressed
// traffic. The frame-level helpers (Header, ParseHeader, AppendHeader,
// ReadHeader, WriteHeader, MaskBytes) are usable on their own. ExampleProtocol
// shows the core in a loop of its own: bytes in, events out, no sockets.
//
// # Direct read and write paths
//
// The core lets the layer above it move bytes without copying them more
// than it must:
//
//   - Protocol.ReadBuffer and Protocol.Commit let the caller read from the
//     network straight into the receive buffer (Receive without its copy);
//   - Protocol.PayloadWanted and Protocol.ReceivePayload let it read the
//     rest of a large frame of an uncompressed message straight into its
//     own memory: the bytes are unmasked in place and validated by the same
//     code path as Next's, and are copied once, by the read system call;
//   - Protocol.AppendMessageHeader gives a server the header alone, so that
//     it can send the payload from where it is, behind the header (an
//     unmasked server frame carries the payload unchanged, RFC 6455 §5.1).
//
// Conn uses the first two, and the third for a message over 1 MiB.
// ReadMessageInto reads a large frame's payload straight into the caller's
// buffer; a server writes an uncompressed message as one frame copied into
// its encode buffer, a payload over 1 MiB through it 1 MiB at a time behind
// the header (sending a payload from where a read left it, 10 bytes into the
// stream behind a header, made the kernel's copy slow on some CPUs);
// BufferMessage collects the answers to what one read brought and writes
// them together, before the next read waits; WritePreparedBatch writes many
// broadcast frames with one writev. On Linux a TCP or Unix socket is read
// and written with raw system calls (syscall.RawConn), which still wait for
// the runtime's poller and honour deadlines.
//
// # Connections
//
// Conn wraps a Protocol and a net.Conn: ReadMessage, ReadMessageInto,
// NextMessage and Reader for whole, reused-buffer, Conn-owned (valid until
// the next read) or streamed messages; WriteMessage,
// BufferMessage, Writer and WritePrepared for writing; Ping; Close (the
// closing handshake, RFC 6455 §7.1.2) and CloseNow. Reads are for one
// goroutine at a time; writes and Close are safe for concurrent use, and
// the Conn serialises them itself. The read and write calls and Ping take
// a context.Context; BufferMessage is bounded by the write deadline and
// Close by the close timeout. Pings are answered automatically (§5.5.2),
// also while a long write holds the connection; AcceptOptions.OnPing and
// OnPong (and the same fields of DialOptions) observe control frames and
// are fixed before the connection runs.
//
// Accept and UpgradeConn perform the server handshake (RFC 6455 §4.2),
// Dial the client handshake (§4.1), through HTTP and SOCKS5 proxies when
// configured. Options are passed as a pointer, nil meaning the defaults,
// and limits are on by default.
//
// Errors: a *CloseError is the peer's close frame (§7.1.5), a
// *ProtocolError a violation this endpoint detected and the close code it
// sent (§7.1.7), ErrClosed use after the close; a refused handshake is a
// *HandshakeError on the server and a *DialError, with the server's status,
// header and the start of its body, on the client. Read them with
// errors.As and errors.Is.
//
// # permessage-deflate
//
// RFC 7692: the negotiated DeflateParams tell each side whether the other
// keeps its LZ77 window between messages (context takeover, §7.1.1) and how
// large the window may be (§7.1.2). Messages are compressed with a sync
// flush and the trailing 00 00 ff ff removed (§7.2.1); RSV1 marks the first
// frame of a compressed message (§6). When the peer limits our window
// below 32 KiB the compressor never refers further back than the window.
// Inflating appends the tail again (§7.2.2), keeps the last 32 KiB as the
// dictionary when the peer uses context takeover, and stops with 1009 as
// soon as MaxMessageSize is exceeded, so a small compressed message cannot
// make the endpoint inflate a large one into memory. Compressed messages
// are collected compressed until their last frame and then inflated in
// pieces of at most 32 KiB (see Memory for what that holds, and Budget).
// Deflate inflates at most 1032 bytes per compressed byte (a match of 258
// bytes takes at least two bits, RFC 1951 §3.2.5 and §3.2.7); a message
// compressed to more than MaxMessageSize/1032 bytes (25 KiB for a limit of
// 25 MiB), which could inflate past the limit, is first inflated into a
// counter, holding only the inflater's window and one 32 KiB piece, and
// refused with 1009 as soon as the count passes the limit, before any of it
// is handed out or charged to a Budget; only a message that fits is then
// inflated for real. That costs those messages a second inflation
// (BenchmarkInflateLarge); smaller ones, nearly all, are inflated once. The
// same holds for every read: NextMessage, ReadMessage and Reader, whose
// call itself returns the 1009.
//
// # Memory
//
// What a connection holds, so that a server of many connections can be
// sized (TestIdleAfterLargeMessage measures the first figures):
//
//   - idle, between messages: read with NextMessage, a message buffer of
//     at most 4 KiB; with permessage-deflate no compressed-input buffer (it
//     goes back to the pools after every message), and the 32 KiB window
//     (kept in 64 KiB) only when the peer compresses with context takeover
//     (AcceptOptions.AllowClientContextTakeover; off by default). The
//     receive buffer (ReadBufferSize, 32 KiB by default) goes back to a
//     pool while a plain TCP or Unix socket on Linux waits for its peer
//     (Protocol.ReleaseReadBuffer); elsewhere (TLS, other systems) it is
//     kept. Read with TryNextMessage (a server that waits for readiness
//     itself, as the ovbus bus does with epoll), an idle connection holds
//     no message buffer and no receive buffer (only the window of the
//     peer's context takeover stays, as above). Otherwise, 4 KiB, compressed
//     or not, 68 KiB with the peer's context takeover (32 KiB more where
//     the receive buffer is kept),
//     whatever the connection received before: larger buffers go back to
//     pools shared by all connections (classes of 4 KiB to 1 MiB) or to
//     the garbage collector when the message is done with, at the next
//     read call. No encode buffer is held between writes, and the inflater
//     (about 44 KiB) is taken from a pool only while a compressed message
//     is inflated;
//   - a message being read whole: its payload so far, in memory that grows
//     with the bytes that arrived, never to the length a header announces.
//     NextMessage takes pooled buffers up to 1 MiB, then pooled 1 MiB
//     pieces, joined into one buffer of the exact size when the last frame
//     is in (for that moment the message is held twice), so growing copies
//     nothing and a message that fails leaves no garbage; ReadMessageInto
//     grows the caller's buffer, doubling up to 1 MiB, then by half, never
//     past the frame's announced end or the message limit. A compressed
//     message also holds its compressed bytes until its last frame and a
//     32 KiB piece of inflated output. It is refused with 1009 as soon as
//     its compressed bytes pass the limit's bound, and, when it would
//     inflate past MaxMessageSize, before its inflated bytes are held (see
//     permessage-deflate: a deflate bomb costs its compressed bytes, the
//     inflater and one piece); so one connection holds at most about twice
//     the limit (compressed and inflated), for a message that fits. A failed
//     NextMessage gives its buffers back before the connection lingers for
//     the peer's close (up to a second);
//   - a Budget (AcceptOptions.Budget, DialOptions.Budget, Config.Budget)
//     bounds that across connections: a message longer than BudgetFree
//     (64 KiB) is charged whole as its bytes arrive, its compressed bytes
//     by the Protocol until their inflation ends, its payload by the Conn
//     until the next read call or the close. A message the Budget cannot
//     take closes its connection with 1013 Try Again Later (registered with
//     IANA in the close code registry of RFC 6455 §11.7: the server is
//     overloaded for now, and the same message may pass later; 1009 would
//     tell the sender the message itself is too big), counted by
//     Budget.Refused. A message too big once inflated is answered 1009
//     without a charge for its inflated bytes (it is measured first): only
//     its compressed bytes count, as they arrive. The Budget counts bytes received, not buffer
//     capacity: a buffer may be up to twice its message below 1 MiB and up
//     to 1 MiB larger above. Streamed reads (Reader) are charged only for
//     the compressed bytes: their payload is the caller's to keep or not;
//   - after a burst, the pools keep the buffers of the burst's peak (the
//     Budget with its slack, and up to 64 KiB for each connection that was
//     busy at that moment) until the garbage collector empties them, in two
//     cycles, and the runtime returns the freed pages to the OS gradually;
//     an idle process runs a cycle every two minutes, so its RSS falls back
//     within minutes, while each connection is back to its idle figure at
//     once. Budget.OnDrained tells a server when a burst is over, so that
//     it can collect twice and return the pages at once
//     (runtime/debug.FreeOSMemory), as the ovbus bus does. The pools are
//     not made smaller for that: reading 683 KiB messages with the classes
//     above 64 KiB left to the garbage collector took 2–3 times the CPU
//     (BenchmarkNextMessageLarge).
//
// # Broadcast: PreparedMessage
//
// A PreparedMessage encodes a server message once: the plain frame, and
// lazily a compressed frame made without context takeover. The ovbus bus
// negotiates permessage-deflate with server_no_context_takeover (the
// client may keep its own context), so every compressing client can decode
// the same compressed frame: one compression per broadcast, not per
// receiver, and the same bytes are written to every connection. Clients
// that limited server_max_window_bits get a form compressed with a
// 256-byte window, valid for every window size.
// AppendPreparedMessage encodes many messages back to back into one
// buffer, and AppendPreparedMessageTo into PreparedMessages the caller
// allocates (many at once), so that a broadcast costs no allocation of its
// own.
//
// # Module
//
// This package is the module github.com/ovbus/ovbus/ws, separate from the
// bus: a program that imports it compiles github.com/klauspost/compress
// (deflate) and golang.org/x/net (proxies, header parsing) besides the
// standard library, and nothing of the bus.
package ws
