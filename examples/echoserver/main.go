// Command echoserver is a WebSocket echo server on package ws: every text or
// binary message is sent back as received. It offers permessage-deflate and
// accepts messages of up to 16 MiB, so a conformance suite (Autobahn's
// fuzzingclient) can be pointed at it:
//
//	go run ./examples/echoserver -addr 127.0.0.1:9001
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"

	"github.com/ovbus/ovbus/ws"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9001", "listen address HOST:PORT")
	maxSize := flag.Int64("max-message-size", 16<<20, "largest message accepted, in bytes")
	compress := flag.Bool("deflate", true, "offer permessage-deflate")
	flag.Parse()

	http.Handle("/", newHandler(*maxSize, *compress))
	log.Printf("echoserver listening on ws://%s/", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}

// newHandler returns the echo handler: every origin is accepted, deflate is
// offered when compress is set, and messages up to maxSize bytes are taken.
func newHandler(maxSize int64, compress bool) http.Handler {
	opts := &ws.AcceptOptions{
		CheckOrigin:       func(*http.Request) bool { return true },
		EnableCompression: compress,
		// The conformance suite sends compressed messages with context
		// takeover; accept them.
		AllowClientContextTakeover: true,
		MaxMessageSize:             maxSize,
		MaxFrameSize:               maxSize,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, opts)
		if err != nil {
			return
		}
		echo(c)
	})
}

// echo sends every message back until the peer closes. The answers are
// buffered (BufferMessage): the Conn writes them before it next waits for the
// network, so the echoes of all the messages one read brought in leave in
// one system call, and a lone message's echo leaves at once. The message is
// read with ReadMessageInto into one buffer kept for the connection's life:
// a large message is read straight into it and goes out from it again
// (header and payload in one writev), with no pool round trip per message
// (NextMessage's buffers go back to shared pools, the better choice for a
// server of many mostly idle connections).
func echo(c *ws.Conn) {
	defer c.CloseNow()
	var buf []byte
	ctx := context.Background()
	for {
		op, msg, err := c.ReadMessageInto(ctx, buf[:0])
		if err != nil {
			var ce *ws.CloseError
			if !errors.As(err, &ce) {
				log.Printf("%s: %v", c.RemoteAddr(), err)
			}
			return
		}
		buf = msg
		if err := c.BufferMessage(op, msg); err != nil {
			return
		}
	}
}
