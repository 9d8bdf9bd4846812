//go:build linux

package nonblock_test

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"github.com/ovbus/ovbus/ws"
	"github.com/ovbus/ovbus/ws/nonblock"
)

// waitReadable waits until nc has bytes to read (or has ended): here
// through Go's runtime poller, one connection at a time; a server of many
// connections waits for all of them at once with epoll instead. It peeks
// before it waits, so that bytes that came after the last read are not
// missed.
func waitReadable(nc net.Conn) {
	rc, _ := nc.(*net.TCPConn).SyscallConn()
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN
	})
}

// A server that reads a connection only when its socket is readable, and
// writes without waiting, handing a write on only when the socket is full.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	done := make(chan struct{})
	go func() { // a client: sends one message, reads the echo
		defer close(done)
		ctx := context.Background()
		c, _, err := ws.Dial(ctx, "ws://"+ln.Addr().String(), nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer c.CloseNow()
		c.WriteMessage(ctx, ws.TextMessage, []byte("hello"))
		_, p, _ := c.ReadMessage(ctx)
		fmt.Printf("client got %q\n", p)
	}()

	nc, _ := ln.Accept()
	c, _, _ := ws.UpgradeConn(nc, nil)
	defer c.CloseNow()
	fmt.Println("supported:", nonblock.Supported(c))
	for {
		op, p, err := nonblock.NextMessage(c)
		if err == nonblock.ErrWouldBlock {
			waitReadable(nc) // nothing more for now: wait, then read again
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		// Echo it: a prepared frame, written without waiting.
		pm, _ := ws.NewPreparedMessage(op, p, ws.CompressionOptions{})
		frame := pm.Frame(false)
		w, err := nonblock.TryWrite(c, frame)
		switch {
		case err != nil:
			fmt.Println(err)
		case w.Pending(): // the socket took part of it: the rest may wait
			err = w.Finish(context.Background())
		case w.N() < len(frame): // nothing written: write it the ordinary way
			err = c.WritePreparedFrames(context.Background(), frame)
		}
		<-done
		return
	}
	// Output:
	// supported: true
	// client got "hello"
}
