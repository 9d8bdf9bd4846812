//go:build linux

package nonblock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
	"github.com/ovbus/ovbus/ws/nonblock"
)

// pair returns a server Conn over a TCP socket and the client's raw end.
func pair(t *testing.T) (*ws.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	client.(*net.TCPConn).SetReadBuffer(16 << 10)
	client.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := ws.UpgradeConn(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	resp := make([]byte, 4096)
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	for n := 0; !bytes.Contains(resp[:n], []byte("\r\n\r\n")); {
		k, err := client.Read(resp[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	client.SetReadDeadline(time.Time{})
	return c, client
}

// TestNotSupported: over a connection ws cannot read with raw system calls
// (net.Pipe), NextMessage fails and TryWrite writes nothing, holds nothing.
func TestNotSupported(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go b.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
	go io.Copy(io.Discard, b)
	c, _, err := ws.UpgradeConn(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if nonblock.Supported(c) {
		t.Fatal("a net.Pipe connection is Supported")
	}
	if _, _, err := nonblock.NextMessage(c); err == nil || errors.Is(err, nonblock.ErrWouldBlock) {
		t.Fatalf("NextMessage: %v, want an error saying it is not supported", err)
	}
	w, err := nonblock.TryWrite(c, []byte{0x81, 0x01, 'x'})
	if err != nil || w.N() != 0 || w.Pending() || w.Finish(context.Background()) != nil {
		t.Fatalf("TryWrite: %d bytes, pending %v, %v", w.N(), w.Pending(), err)
	}
}

// TestPendingWriteFinished: tries on a socket whose peer reads nothing fill
// it, one part way (Pending); while it is pending no other write gets
// through; Finish writes the rest once the peer reads, and the peer gets
// every byte in order.
func TestPendingWriteFinished(t *testing.T) {
	c, client := pair(t)
	pm, err := ws.NewPreparedMessage(ws.OpBinary, bytes.Repeat([]byte("0123456789"), 10000), ws.CompressionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	frame := pm.Frame(false)
	var sent []byte
	var pending nonblock.Write
	for tries := 0; !pending.Pending(); tries++ {
		if tries > 10000 {
			t.Fatal("the socket never filled")
		}
		w, err := nonblock.TryWrite(c, frame)
		if err != nil {
			t.Fatal(err)
		}
		if w.N() == len(frame) && !w.Pending() {
			sent = append(sent, frame...)
			continue
		}
		if w.N() == 0 && !w.Pending() {
			t.Fatal("the socket filled exactly at a frame's end; the test needs a frame cut part way")
		}
		pending = w
	}
	sent = append(sent, frame...) // all of it once finished
	// The pending write holds the connection: a try writes nothing.
	if w, err := nonblock.TryWrite(c, frame); err != nil || w.N() != 0 || w.Pending() {
		t.Fatalf("a try while another is pending: %d bytes, pending %v, %v", w.N(), w.Pending(), err)
	}
	got := make(chan []byte)
	go func() {
		b := make([]byte, len(sent))
		n, _ := io.ReadFull(client, b)
		got <- b[:n]
	}()
	if err := pending.Finish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, sent) {
		t.Fatalf("the peer got %d bytes, not the %d written", len(b), len(sent))
	}
}

// TestNextMessageWouldBlock: NextMessage reads a message the peer sent in
// two pieces, saying ErrWouldBlock until the second arrives.
func TestNextMessageWouldBlock(t *testing.T) {
	c, client := pair(t)
	if _, _, err := nonblock.NextMessage(c); err != nonblock.ErrWouldBlock {
		t.Fatalf("a silent socket: %v, want ErrWouldBlock", err)
	}
	frame := []byte{0x81, 0x85, 1, 2, 3, 4, 'h' ^ 1, 'e' ^ 2, 'l' ^ 3, 'l' ^ 4, 'o' ^ 1}
	client.Write(frame[:7])
	var op ws.Opcode
	var p []byte
	var err error
	for second := false; ; {
		op, p, err = nonblock.NextMessage(c)
		if err != nonblock.ErrWouldBlock {
			break
		}
		if !second {
			second = true
			client.Write(frame[7:])
		}
		waitReadable(c.NetConn())
	}
	if err != nil || op != ws.OpText || string(p) != "hello" {
		t.Fatalf("%v %q %v", op, p, err)
	}
}
