// Package ws is a WebSocket toolkit: RFC 6455 (The WebSocket Protocol) with
// RFC 7692 (permessage-deflate), built in layers.
//
// # Sans-IO protocol core
//
// Protocol is the whole protocol without any I/O: bytes read from the
// network go in with Protocol.Receive, decoded events come out of
// Protocol.Next, and the Append methods encode frames into a caller's
// buffer. It implements
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
// ReadHeader, WriteHeader, MaskBytes) are usable on their own.
//
// # Connections
//
// Conn wraps a Protocol and a net.Conn: ReadMessage / Reader for whole or
// streamed messages, WriteMessage / Writer, Ping, Close. Reads are for one
// goroutine at a time; writes and Close are safe for concurrent use.
// Accept and UpgradeConn perform the server handshake (RFC 6455 §4.2),
// Dial the client handshake (§4.1), through HTTP and SOCKS5 proxies when
// configured.
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
// pieces of at most 32 KiB.
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
package ws
