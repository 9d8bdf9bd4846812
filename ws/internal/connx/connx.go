// Package connx carries the calls of a ws.Conn that package ws leaves out of
// its API to the package that offers them, ws/nonblock: ws sets the
// functions when it is initialised, and c is always a *ws.Conn.
package connx

import (
	"context"
	"errors"
)

// ErrWouldBlock is nonblock.ErrWouldBlock: the socket holds nothing more to
// read for now.
var ErrWouldBlock = errors.New("ws: nothing more to read for now")

// The calls, set by package ws.
var (
	NextMessage func(c any) (op byte, p []byte, err error)
	Supported   func(c any) bool
	TryWrite    func(c any, frames []byte) (n int, held bool, err error)
	Finish      func(c any, ctx context.Context, rest []byte) error
)
