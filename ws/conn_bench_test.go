package ws

import (
	"context"
	"net"
	"strconv"
	"testing"
)

// BenchmarkEcho measures one connection's round trip over loopback: the
// client writes a binary message, the server reads it and writes it back,
// the client reads the echo. Both ends are this package, with the server on
// a raw listener (UpgradeConn).
func BenchmarkEcho(b *testing.B) {
	for _, size := range []int{300, 1 << 20} {
		name := strconv.Itoa(size)
		if size == 1<<20 {
			name = "1MiB"
		}
		b.Run(name, func(b *testing.B) { benchEcho(b, size) })
	}
}

// rawEchoServer is echoServer on a raw listener (UpgradeConn, no
// net/http) for the benchmarks: one connection, echoed by echoLoop.
func rawEchoServer(b *testing.B, opts *AcceptOptions, buffered bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c, _, err := UpgradeConn(nc, opts)
		if err != nil {
			return
		}
		defer c.CloseNow()
		echoLoop(c, buffered)
	}()
	return "ws://" + ln.Addr().String() + "/"
}

func benchEcho(b *testing.B, size int) {
	url := rawEchoServer(b, &AcceptOptions{MaxMessageSize: 4 << 20, MaxFrameSize: 4 << 20}, false)
	ctx := context.Background()
	c, _, err := Dial(ctx, url, &DialOptions{MaxMessageSize: 4 << 20, MaxFrameSize: 4 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(i)
	}
	buf := make([]byte, 0, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := c.WriteMessage(ctx, BinaryMessage, msg); err != nil {
			b.Fatal(err)
		}
		if _, buf, err = c.ReadMessageInto(ctx, buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextMessageLarge: the server's read of large messages, as the bus
// reads them (NextMessage, whose buffers come from the pools of pool.go):
// one connection over loopback, a client writing messages of 683 KiB (the
// size of bench/attack's large-idle attack) back to back, plain and compressed.
func BenchmarkNextMessageLarge(b *testing.B) {
	for _, deflate := range []bool{false, true} {
		name := "plain"
		if deflate {
			name = "deflate"
		}
		b.Run(name, func(b *testing.B) { benchNextMessage(b, 683<<10, deflate) })
	}
}

func benchNextMessage(b *testing.B, size int, deflate bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	msg := benchPayload(size)
	go func() {
		c, _, err := Dial(context.Background(), "ws://"+ln.Addr().String()+"/", &DialOptions{EnableCompression: deflate, MaxMessageSize: 4 << 20})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for c.WriteMessage(context.Background(), OpText, msg) == nil {
		}
	}()
	nc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	c, _, err := UpgradeConn(nc, &AcceptOptions{MaxMessageSize: 4 << 20, EnableCompression: deflate})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, m, err := c.NextMessage(ctx); err != nil || len(m) != size {
			b.Fatalf("%d bytes, %v", len(m), err)
		}
	}
}

// BenchmarkEchoPipelined is the window scenario of ovbus loadtest on one
// connection over loopback: the client keeps 16 messages of 1 KiB in
// flight, refilling the window with BufferMessage as echoes come back; the
// server answers as examples/echoserver does (ReadMessageInto and
// BufferMessage), so both ends write once per burst. One op is one echo.
func BenchmarkEchoPipelined(b *testing.B) {
	const size, window = 1024, 16
	url := rawEchoServer(b, nil, true)
	ctx := context.Background()
	c, _, err := Dial(ctx, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	msg := make([]byte, size)
	buf := make([]byte, 0, size)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for got := 0; got < b.N; got++ {
		for ; sent < b.N && sent-got < window; sent++ {
			if err := c.BufferMessage(BinaryMessage, msg); err != nil {
				b.Fatal(err)
			}
		}
		if _, buf, err = c.ReadMessageInto(ctx, buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
