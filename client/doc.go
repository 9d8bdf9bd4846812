// Package client is the Go client of the OVOS message bus (ovbus, ovos-messagebus and the other
// buses that speak its protocol).
//
// # Messages
//
// Messages are package message's Message, the type package bus uses too: {"type", "data",
// "context"}, written compactly in that key order, with Reply, Forward and Response. A frame that
// is not an OVOS message (not JSON, not an object, no "type", an encrypted
// {"ciphertext","tag","nonce"} frame, a binary frame) has a Frame.Err wrapping
// message.ErrNotMessage and a sentinel saying which; the Client hands such frames to OnFrame
// handlers and carries on.
//
// # Client
//
// A Client keeps one WebSocket connection to the bus up until Close:
//
//   - New, then On/Once/OnFrame for the handlers (each returns its off function, as bus.On
//     does; a handler that panics is logged and keeps receiving), then Connect (fails if the bus cannot be reached)
//     or Start (retries in the background). Dial is New plus Connect.
//   - Every handler runs on a goroutine of its own and sees messages one at a time, in the order
//     the bus sent them; a slow handler holds up neither reading nor the other handlers, up to
//     Options.HandlerBacklog queued messages. "*" matches every message. The bus echoes every
//     message to its sender, so a client's own messages reach its handlers, like the greeting
//     "connected" at the start of every connection.
//   - WaitFor and WaitForResponse wait for the next message of a type (3 s by default, like the
//     Python client); they are served by the reader directly, not by a handler queue.
//   - After a drop (the bus restarted) the client reconnects by itself with exponential backoff
//     and jitter: 500 ms doubling to 60 s, ±20 % (the Python client waits 5 s doubling to 60 s;
//     a restarted bus is back sooner than that). Handlers stay registered. Nothing is re-sent
//     except what Emit queued while disconnected.
//   - While disconnected, Emit queues up to Options.QueueSize messages (default 1000) and then
//     returns ErrQueueFull; with a negative QueueSize it returns ErrDisconnected at once. Nothing
//     is dropped silently: Close reports queued messages it could not send.
//   - Options.OnState reports Connecting, Connected, Disconnected (with the error and the wait
//     before the next try) and Closed.
//   - Options.SessionSync emits "ovos.session.sync" on every connect as the Python client does;
//     it is off by default, so that tools such as `ovbus listen` add no traffic of their own.
//   - Every call that can block takes a context. Close ends the connection with a closing
//     handshake and returns when the client's goroutines are gone (a handler still running
//     finishes on its own: Close may be called from a handler).
//
// Options.Dial passes ws.DialOptions through, e.g. a tls.Config whose RootCAs hold the bus's
// self-signed certificate for wss://.
package client
