package bus

import (
	"context"
	"sync"

	"github.com/ovbus/ovbus/ws"
)

// What one write to a client carries. A session's writer takes a
// writeBatch from the log (session.takeBatch), writes it (writeBatch.write)
// and records it (the fields below); the writer borrows it from
// writeBatches for as long as it runs, so an idle session holds none. A
// client that takes every frame as it is, the common case, gets a run: the
// frames of one segment of the log in one slice and one system call, with
// no work per frame. A client with a
// receive rule or with deflate, and any stretch of the log holding a notice
// for one session (entry.to), goes frame by frame: each frame it may
// receive, in its compressed form for deflate, in one writev.

// writeBatch is one write to a client.
type writeBatch struct {
	b   batch
	pms []*ws.PreparedMessage

	n       int    // frames to write (0: none of those fetched is for this client)
	size    int64  // their plain bytes
	born    int64  // publish time of the first frame fetched (hub time)
	cursor  uint64 // the follower's cursor after the batch
	fetched int64  // the log's cumulative bytes through it
}

var writeBatches = sync.Pool{New: func() any {
	return &writeBatch{b: batch{entries: make([]*entry, 0, 64)}, pms: make([]*ws.PreparedMessage, 0, 64)}
}}

// runs reports whether c takes every frame of the log as it is: no
// receive rule, no deflate, no reply routing.
func (c *session) runs() bool {
	perms := c.permissions()
	return c.windowBits < 0 && (perms == nil || perms.Receive == nil) && !c.routed()
}

// takeBatch takes what the log holds at c's cursor into wb, keeping the
// frames c receives (docs/protocol.md §3: receive rule, notices for one
// client, reply routing). When the log holds nothing there it leaves wb empty, puts c's
// follower to sleep in the hub (the next publish starts a writer: wake)
// and reports asleep; it fails as follower.next does.
func (c *session) takeBatch(wb *writeBatch) (asleep bool, err error) {
	wb.reset()
	asleep, err = c.f.tryBatch(nil, nil, &wb.b, c.runs(), maxBatchFrames, maxBatchBytes)
	if asleep || err != nil {
		return asleep, err
	}
	c.selectBatch(wb)
	return false, nil
}

// selectBatch fills in wb from what the follower took into wb.b.
func (c *session) selectBatch(wb *writeBatch) {
	wb.cursor, wb.fetched = c.f.cursor.Load(), c.f.fetched.Load()
	if rn := wb.b.rn; rn.n > 0 {
		wb.n, wb.size, wb.born = int(rn.n), int64(len(rn.frames)), rn.first.born
		return
	}
	es := wb.b.entries
	wb.born = es[0].born
	perms := c.permissions()
	for _, e := range es {
		if e.to != 0 {
			if e.to != c.id {
				continue // another client's notice
			}
		} else if perms != nil && perms.Receive != nil && !perms.CanReceive(e.mtype) {
			continue
		} else if e.route != nil && c.routed() && !e.route.delivers(c.id) {
			continue // another routed client's private frame
		}
		if c.windowBits >= 0 && !c.ownDeflate {
			c.s.hub.countCompressed(e, int(c.windowBits))
		}
		wb.pms = append(wb.pms, &e.msg)
		wb.size += e.size
	}
	wb.n = len(wb.pms)
	clear(es)
	wb.b.entries = es[:0]
}

// write writes the batch to conn, a run as one slice, frames in one
// writev, and lets the frames go (a writer that waits holds no part of the
// log); what is to be recorded (n, size, born, cursor, fetched) stays.
func (wb *writeBatch) write(conn *ws.Conn) error {
	var err error
	if rn := wb.b.rn; rn.n > 0 {
		err = conn.WritePreparedFrames(context.Background(), rn.frames)
		wb.b.rn = run{}
	} else {
		err = conn.WritePreparedBatch(context.Background(), wb.pms)
		clear(wb.pms)
		wb.pms = wb.pms[:0]
	}
	return err
}

// reset lets the frames of the last batch go.
func (wb *writeBatch) reset() {
	clear(wb.pms)
	wb.pms = wb.pms[:0]
	clear(wb.b.entries)
	wb.b.entries = wb.b.entries[:0]
	wb.b.rn = run{}
	wb.n, wb.size = 0, 0
}
