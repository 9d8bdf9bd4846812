package client

import (
	"context"
	"fmt"

	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// Sending to the bus: a message is written at once, or queued while the
// client is not connected (Options.QueueSize).

// Emit sends m to the bus (which relays it to every client, this one included). It returns once
// the message has been written to the connection, or queued while the client is not connected
// (Options.QueueSize); it returns ErrQueueFull or ErrDisconnected when it can do neither, and
// ErrClosed after Close. ctx bounds the write: a write cut short by ctx breaks the connection,
// which is then re-established.
func (c *Client) Emit(ctx context.Context, m message.Message) error {
	b, err := m.MarshalJSON()
	if err != nil {
		return err
	}
	return c.EmitRaw(ctx, b)
}

// EmitRaw sends one text frame as it is, like Emit; b need not be an OVOS message. EmitRaw does
// not keep b.
func (c *Client) EmitRaw(ctx context.Context, b []byte) error {
	var cause error
	for {
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return ErrClosed
		}
		conn := c.conn
		if conn == nil {
			defer c.mu.Unlock()
			switch {
			case c.opts.QueueSize < 0:
				if cause != nil {
					return fmt.Errorf("%w: %w", ErrDisconnected, cause)
				}
				return ErrDisconnected
			case len(c.queue) >= c.opts.QueueSize:
				return ErrQueueFull
			}
			c.queue = append(c.queue, append([]byte(nil), b...))
			return nil
		}
		c.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err // before writing anything: the connection stays up
		}
		err := conn.WriteMessage(ctx, ws.TextMessage, b)
		if err == nil {
			return nil
		}
		// The connection is unusable (a failed write leaves a frame half written): drop it; the
		// reader notices and the client reconnects.
		conn.CloseNow()
		c.mu.Lock()
		if c.conn == conn {
			c.conn = nil
		}
		c.mu.Unlock()
		if ctx.Err() != nil {
			return err
		}
		cause = err // queue it, or write it to a newer connection
	}
}

// Queued returns the number of messages waiting for a connection.
func (c *Client) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}
