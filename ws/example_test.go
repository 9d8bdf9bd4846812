package ws_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/ovbus/ovbus/ws"
)

// An echo server: every message goes back as it came, until the peer
// closes.
func ExampleAccept() {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, &ws.AcceptOptions{EnableCompression: true})
		if err != nil {
			return // Accept has answered with an HTTP error
		}
		defer c.CloseNow()
		var buf []byte
		for {
			op, msg, err := c.ReadMessageInto(r.Context(), buf[:0])
			if err != nil {
				return // a *ws.CloseError when the peer closed
			}
			buf = msg
			if err := c.WriteMessage(r.Context(), op, msg); err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(echo)
	defer srv.Close()

	c, _, err := ws.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ws.StatusNormalClosure, "")
	c.WriteMessage(context.Background(), ws.TextMessage, []byte("hello"))
	_, msg, _ := c.ReadMessage(context.Background())
	fmt.Printf("%s\n", msg)
	// Output: hello
}

// A server of many connections: NextMessage keeps no large buffer between
// messages, and one Budget bounds what all connections together hold of the
// messages being read. A message that does not fit closes its sender with
// 1013 Try Again Later.
func ExampleBudget() {
	inflight := ws.NewBudget(64 << 20)
	var got []byte
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, &ws.AcceptOptions{EnableCompression: true, MaxMessageSize: 16 << 20, Budget: inflight})
		if err != nil {
			return
		}
		defer c.CloseNow()
		defer close(done)
		for {
			_, msg, err := c.NextMessage(r.Context())
			if err != nil {
				return // 1013 when the Budget is taken, 1009 past MaxMessageSize
			}
			got = append(got[:0], msg...) // msg is valid until the next read
		}
	}))
	defer srv.Close()

	c, _, err := ws.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		log.Fatal(err)
	}
	c.WriteMessage(context.Background(), ws.TextMessage, []byte(strings.Repeat("x", 1<<20)))
	c.Close(ws.StatusNormalClosure, "")
	<-done
	fmt.Println(len(got), inflight.InUse(), inflight.Refused())
	// Output: 1048576 0 0
}

// A client: dial, send a message, read the answer, close with a code.
func ExampleDial() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, nil)
		if err != nil {
			return
		}
		_, msg, err := c.ReadMessage(r.Context())
		if err == nil {
			c.WriteMessage(r.Context(), ws.TextMessage, []byte("you said "+string(msg)))
		}
		c.ReadMessage(r.Context()) // wait for the client's close
	}))
	defer srv.Close()

	ctx := context.Background()
	c, resp, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/chat", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode)
	if err := c.WriteMessage(ctx, ws.TextMessage, []byte("hi")); err != nil {
		log.Fatal(err)
	}
	_, msg, err := c.ReadMessage(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", msg)
	fmt.Println(c.Close(ws.StatusNormalClosure, "bye"))
	// Output:
	// 101
	// you said hi
	// <nil>
}

// Dialing through a proxy: an HTTP proxy with basic authentication (HTTP
// CONNECT), or socks5://user:password@host:port for SOCKS5. Without
// DialOptions.Proxy, Dial follows HTTP_PROXY, HTTPS_PROXY and NO_PROXY.
func ExampleDial_proxy() {
	proxyURL, _ := url.Parse("http://user:secret@proxy.internal:3128")
	opts := &ws.DialOptions{
		Proxy: func(*url.URL) (*url.URL, error) { return proxyURL, nil },
	}
	c, _, err := ws.Dial(context.Background(), "wss://bus.example/core", opts)
	if err != nil {
		log.Print(err)
		return
	}
	defer c.CloseNow()
}

// permessage-deflate: the client offers it, the server accepts it, and each
// side compresses messages at least as large as the threshold.
func ExampleDialOptions_compression() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, &ws.AcceptOptions{EnableCompression: true})
		if err != nil {
			return
		}
		op, msg, err := c.ReadMessage(r.Context())
		if err == nil {
			c.WriteMessage(r.Context(), op, msg)
		}
		c.ReadMessage(r.Context())
	}))
	defer srv.Close()

	ctx := context.Background()
	c, _, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &ws.DialOptions{
		EnableCompression: true,
		Compression:       ws.CompressionOptions{Level: 6, Threshold: 64},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ws.StatusNormalClosure, "")
	p := c.Deflate()
	fmt.Println("negotiated:", p != nil, "server_no_context_takeover:", p.ServerNoContextTakeover)
	c.WriteMessage(ctx, ws.TextMessage, []byte(strings.Repeat("compress me ", 100)))
	_, msg, _ := c.ReadMessage(ctx)
	fmt.Println(len(msg))
	// Output:
	// negotiated: true server_no_context_takeover: true
	// 1200
}

// Broadcast: encode a message once, write the same bytes to every
// connection. Connections that negotiated permessage-deflate get the one
// compressed form, the others the plain one.
func ExampleNewPreparedMessage() {
	var clients []*ws.Conn // the server's accepted connections
	m, err := ws.NewPreparedMessage(ws.TextMessage, []byte(`{"type":"speak","data":{},"context":{}}`), ws.CompressionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range clients {
		if err := c.WritePrepared(context.Background(), m); err != nil {
			c.CloseNow()
		}
	}
}

// The sans-IO core, in the style of Python's wsproto: bytes in, events out,
// and no sockets. A client Protocol encodes a text message, a ping and a
// close frame; the bytes reach a server Protocol in two pieces, cut in the
// middle of the message, as a network may deliver them; the server answers
// the ping with a pong and the close with its echo (RFC 6455 §5.5), and the
// client reads those answers. Whatever carries the bytes (a net.Conn, a
// test, a simulation) is the caller's business; Conn is this loop on a
// socket.
func ExampleProtocol() {
	client := ws.NewProtocol(ws.Config{Role: ws.RoleClient})
	server := ws.NewProtocol(ws.Config{Role: ws.RoleServer})

	wire, _ := client.AppendMessage(nil, ws.OpText, []byte("hello"))
	wire = client.AppendPing(wire, []byte("are you there?"))
	wire, _ = client.AppendClose(wire, ws.StatusNormalClosure, "bye")

	// handle feeds the bytes that arrived to p and reports its events; the
	// frames p answers with are returned, to go back over the "network".
	handle := func(name string, p *ws.Protocol, in []byte) (out []byte) {
		p.Receive(in)
		var ev ws.Event // reused: NextInto overwrites every field
		for {
			if err := p.NextInto(&ev); err != nil {
				fmt.Println(name, "failed:", err)
				return out
			}
			switch ev.Kind {
			case ws.EventNone: // all bytes so far are processed
				return out
			case ws.EventMessage: // a message, or the part of it that arrived
				fmt.Printf("%s: %v %q fin=%v\n", name, ev.Op, ev.Payload, ev.Fin)
			case ws.EventPing:
				fmt.Printf("%s: ping %q\n", name, ev.Payload)
				out = p.AppendPong(out, ev.Payload)
			case ws.EventPong:
				fmt.Printf("%s: pong %q\n", name, ev.Payload)
			case ws.EventClose:
				fmt.Printf("%s: close %v %q\n", name, ev.Code, ev.Reason)
				if p.State() == ws.StateCloseReceived { // not sent by p first: echo it
					out, _ = p.AppendClose(out, ev.Code, "")
				}
				return out // nothing after a close frame counts (RFC 6455 §5.5.1)
			}
		}
	}

	const cut = 8 // a client frame header here is 6 bytes: cut after "he"
	reply := handle("server", server, wire[:cut])
	reply = append(reply, handle("server", server, wire[cut:])...)
	handle("client", client, reply)
	fmt.Println("server:", server.State(), "| client:", client.State())
	// Output:
	// server: text "he" fin=false
	// server: text "llo" fin=true
	// server: ping "are you there?"
	// server: close 1000 (normal closure) "bye"
	// client: pong "are you there?"
	// client: close 1000 (normal closure) ""
	// server: closed | client: closed
}
