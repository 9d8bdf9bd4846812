// Package bus is the OVOS message bus: a drop-in replacement for
// ovos-messagebus built on package ws.
//
// A Server relays every message a client sends to every connected client,
// the sender included, unchanged and in one total order that every client
// sees (docs/protocol.md §3). The greeting, the malformed-session-carrier rule, the
// max_msg_size limit and the filter log follow the Tornado bus; binary
// frames stay binary.
//
// # Fan-out
//
// Each message is encoded once into a ws.PreparedMessage and appended to one
// shared log. Every client follows the log at its own cursor: while it has
// frames to send, a writer (a goroutine that exists only then) writes
// everything it has not sent yet in one system call, with a deadline per
// batch. A client with nothing to send has no writer; the publisher wakes it
// (and only the sleeping ones) when a frame arrives. A client that
// falls further behind than MaxQueueMessages or MaxQueueBytes, or that does
// not take a batch within WriteTimeout, is closed with 1008 "slow consumer";
// nobody else waits for it or loses a message, and the log never holds more
// than the bounds.
//
// # Access
//
// Who may connect, and what each client may do, is Options.Auth
// (access.go): a client that shows a token gets the token's Permissions; one
// that shows none gets those of where it connects from: loopback and Unix
// sockets everything by default, a network of Auth.Networks its named
// permission set, any other address refused by default (HTTP 401). So a
// single-device install works unchanged and a bus bound to a LAN address
// refuses the LAN until told otherwise. Permissions bound the message types
// a client may emit and receive, its message rate (a token bucket: a client
// over it is closed with 1008), and may route replies to it alone
// (routing.go). SessionInfo.Identity and the metric ovbus_clients name the
// rule that let each client in, never its token.
//
// # Embedding
//
// A Go program can run the bus in-process:
//
//	s, err := bus.New(bus.Options{Addr: "127.0.0.1:8181"})
//	if err != nil { ... }
//	if err := s.Start(); err != nil { ... }
//	off := s.On("speak", func(m message.Message) { fmt.Println(m.Data["utterance"]) })
//	defer off()
//	s.Emit(message.New("speak", map[string]any{"utterance": "hello"}))
//	...
//	s.Shutdown(ctx)
//
// In-process handlers follow the log like a client does, and so does a
// Follower (Server.Follow): a bounded reader of the raw frames for packages
// built on the bus (a cluster link, a monitor), which may also publish
// frames with an origin of their own (Server.Publish, Server.PublishBatch,
// Options.Sequencer).
package bus
