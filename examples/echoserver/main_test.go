package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

func TestEchoServerLargeCompressed(t *testing.T) {
	srv := httptest.NewServer(newHandler(16<<20, true))
	defer srv.Close()
	ctx := context.Background()
	c, _, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &ws.DialOptions{
		EnableCompression: true, MaxMessageSize: 32 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if c.Deflate() == nil {
		t.Fatal("the echo server did not accept permessage-deflate")
	}
	big := bytes.Repeat([]byte("sixteen mebibytes "), (16<<20)/18)
	for _, m := range []struct {
		op ws.Opcode
		p  []byte
	}{{ws.TextMessage, []byte("hello")}, {ws.BinaryMessage, []byte{0, 1, 2, 255}}, {ws.BinaryMessage, big}} {
		if err := c.WriteMessage(ctx, m.op, m.p); err != nil {
			t.Fatal(err)
		}
		op, got, err := c.ReadMessage(ctx)
		if err != nil || op != m.op || !bytes.Equal(got, m.p) {
			t.Fatalf("echo of %d bytes: op %v, %d bytes, %v", len(m.p), op, len(got), err)
		}
	}
	if err := c.Close(ws.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
}
