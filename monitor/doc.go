// Package monitor serves a live view of a bus to a browser: the messages as
// they are relayed, a rate chart per message type, the connected clients
// and the recent closes with their reasons, and a form that sends a message
// and waits for its response. ovbus serve runs it on its own listener when
// monitor_address is set (off by default).
//
//	m, err := monitor.New(srv, monitor.Options{Addr: "127.0.0.1:9182"})
//	if err != nil { ... }
//	if err := m.Start(); err != nil { ... }
//	defer m.Shutdown(ctx)
//
// A Monitor is also an http.Handler, for a program that serves it itself.
// The page, its style and its scripts are embedded in the binary: plain
// HTML, CSS and JavaScript modules, nothing fetched from elsewhere.
//
// # Who may look
//
// The monitor binds a loopback address and answers only requests whose Host
// header names a loopback host (which also defeats DNS rebinding), unless
// Options.AllowRemote is set (monitor_allow_remote). The page's WebSocket is
// same-origin only, so another site open in the same browser cannot read
// the bus through it.
//
// When the bus has tokens, the page asks for one and sends it as its first
// message (never in a URL). The token, or the page's address when it sends
// none, is checked with bus.Server.Authorize exactly as the bus's upgrade
// checks a client's: one the bus would refuse gets no data at all. The page
// then receives only the messages whose type the permissions allow it to
// receive (Permissions.CanReceive on Frame.Type) and sends under their emit
// rule (EmitAs). The client list and the recent closes (addresses, user
// agents, identities: a token's name or the address rule that let the
// client in, never a token) are shown only to a caller with full access: a
// token, or an address rule (loopback by default), with neither an emit nor
// a receive list.
//
// # Never slowing the bus
//
// At most Options.MaxPages pages (16) are open at once; more are refused
// with 503.
//
// Each open page is one bus.Follower of the log, bounded like a client
// (the bus's max_queue_messages and max_queue_bytes) and cut like a slow
// client when it falls behind: the page then says so and reconnects. The
// follower's goroutine only counts and samples; encoding and writing to the
// browser happen on another goroutine every Options.Interval (200 ms), so
// a slow browser costs the follower nothing. At most Options.RowsPerSecond
// messages (500) reach the page per second, and no type takes more than a
// quarter of a batch while others wait, so a flood of one type does not
// hide the rare ones; the rest are counted (the rate chart counts every
// message) and the page says that it samples. A row carries at most
// Options.MaxPayload bytes of its message (64 KiB), and once a page got
// Options.BytesPerSecond (2 MiB) in a second, only the first 512.
//
// # The page's protocol
//
// One WebSocket, /ws, text frames of JSON objects with a "t" field.
//
// The page sends first {"t":"hello","token":"..."}, later
// {"t":"send","id":N,"type":"...","data":{...},"context":{...},
// "wait":true,"response":"TYPE.response","timeout_ms":5000}.
//
// The monitor answers the hello with {"t":"hello","auth":bool,
// "token":"name","receive":[...],"emit":[...],"clients":bool,
// "rows_per_second":N,"type_rows_per_second":N,"interval_ms":N} (the caps of
// the sampling, which the page explains) or with {"t":"denied","error":"..."}
// and a 1008 close. Then it sends
//
//   - {"t":"batch","rows":[row...],"counts":{"type":N...},"total":N,"skipped":N}
//     every interval in which something arrived: counts and total cover every
//     message the token may receive, skipped those not sent as rows;
//   - {"t":"clients","sessions":[...],"closes":[...]} every second (empty
//     lists without full access);
//   - {"t":"sent","id":N,"ok":bool,"error":"...","response":row} for each send;
//   - {"t":"end","reason":"lagged"|"shutdown","error":"..."} before it
//     closes the socket itself.
//
// A row is {"seq","time" (unix ms),"type","size","kind" ("json", "text" or
// "binary"),"origin","source","destination","session","payload" (text,
// at most Options.MaxPayload bytes),"preview" (hex of a binary frame's
// first bytes),"truncated"}; source, destination and session (its
// session_id) come from the message's context.
package monitor
