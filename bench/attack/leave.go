//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// leaveWay is one way a client leaves the bus: it connects to s and goes.
type leaveWay struct {
	name string
	run  func(ctx context.Context, s *server) error
}

// leaveWays are the ways a client can leave, from the polite to the abrupt.
// Each ends the connection at a different point of the server's work (the
// upgrade, the reader, the writer), which is where a closed connection's
// memory can be kept by mistake.
var leaveWays = []leaveWay{
	{"close frame", func(ctx context.Context, s *server) error {
		c, err := greetedConn(ctx, s)
		if err != nil {
			return err
		}
		defer c.nc.Close()
		if err := c.send(opClose, []byte{0x03, 0xe8}, false); err != nil { // 1000
			return err
		}
		// The closing handshake of RFC 6455 §7.1.2: the server echoes the
		// close frame, then ends the TCP connection.
		if o := c.waitClose(10 * time.Second); o.Code != 1000 {
			return fmt.Errorf("close frame: the server answered %s", o.How)
		}
		return nil
	}},
	{"reset after the greeting", func(ctx context.Context, s *server) error {
		c, err := greetedConn(ctx, s)
		if err != nil {
			return err
		}
		return reset(c.nc)
	}},
	{"reset before the 101", func(ctx context.Context, s *server) error {
		nc, err := dialTCP(ctx, s.addr, dialOptions{Source: nextSource()})
		if err != nil {
			return err
		}
		if _, err := io.WriteString(nc, upgradeRequest(s.addr, s.route, dialOptions{})); err != nil {
			nc.Close()
			return err
		}
		return reset(nc)
	}},
	{"FIN without a close frame", func(ctx context.Context, s *server) error {
		c, err := greetedConn(ctx, s)
		if err != nil {
			return err
		}
		return c.nc.Close()
	}},
}

// greetedConn connects to s from the next source address and reads the
// greeting.
func greetedConn(ctx context.Context, s *server) (*conn, error) {
	c, err := dial(ctx, s.addr, s.route, dialOptions{Source: nextSource()})
	if err != nil {
		return nil, err
	}
	if err := c.readGreeting(10 * time.Second); err != nil {
		c.nc.Close()
		return nil, err
	}
	return c, nil
}

// reset closes nc with a TCP RST instead of a FIN: with SO_LINGER at zero,
// close(2) discards what is unsent and resets the connection.
func reset(nc net.Conn) error {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return fmt.Errorf("reset: %T is not a TCP connection", nc)
	}
	if err := tc.SetLinger(0); err != nil {
		tc.Close()
		return err
	}
	return tc.Close()
}
