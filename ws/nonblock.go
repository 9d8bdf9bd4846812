package ws

import (
	"context"

	"github.com/ovbus/ovbus/ws/internal/connx"
)

// The calls that never wait, which package nonblock offers: a server that
// waits for readiness itself is the only user, so they stay out of Conn's
// API.
func init() {
	connx.NextMessage = func(c any) (byte, []byte, error) {
		op, p, err := c.(*Conn).tryNextMessage()
		return byte(op), p, err
	}
	connx.Supported = func(c any) bool { return c.(*Conn).canTryRead() }
	connx.TryWrite = func(c any, frames []byte) (int, bool, error) { return c.(*Conn).tryWritePreparedFrames(frames) }
	connx.Finish = func(c any, ctx context.Context, rest []byte) error {
		return c.(*Conn).finishPreparedFrames(ctx, rest)
	}
}
