package bus

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// Following the log. Every reader of the log — a session's writer, the
// in-process dispatcher, a public Follower — is a follower and reads it with
// the one loop below (follower.next): fetch what is there after the cursor,
// or register as a sleeper and wait for the publisher's wake-up.

// wakeHow is what a follower's owner is asked to do (followerOwner.wake).
type wakeHow uint8

const (
	// wakeStart: the publisher wakes it; start what reads the log (a
	// goroutine) and return at once.
	wakeStart wakeHow = iota
	// wakeInline: the waker wakes it; it may also do one bounded step of
	// the reading itself, without waiting, and ask to be called again.
	wakeInline
	// wakeAgain: the next step, after one that asked for it.
	wakeAgain
	// wakeHandOff: after one that asked for it, the waker stops calling:
	// start what reads the log.
	wakeHandOff
)

// ErrLagged is returned by Follower.Next once the follower fell further
// behind the log than its bounds allow; it has missed frames and is cut.
var ErrLagged = errors.New("bus: follower fell behind the queue bounds")

// ErrFollowerClosed is returned by Follower.Next after Close.
var ErrFollowerClosed = errors.New("bus: follower closed")

// errStopped: the follower's done channel closed (or it stopped) while it
// waited.
var errStopped = errors.New("bus: follower stopped")

// isClosed reports whether ch is closed (it never carries values).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// follower is a reader of the log.
type follower struct {
	h *hub
	// cursor is the next sequence number the follower will fetch. Entries
	// below the smallest cursor may be released.
	cursor atomic.Uint64
	// fetched is the log's cumulative bytes through the last fetched entry.
	fetched atomic.Int64
	// Own bounds, tighter than the hub's; 0: only the hub's apply.
	maxMsgs  uint64
	maxBytes int64
	// wake receives a token when the follower sleeps and a message arrives,
	// unless owner is set: then owner.wake is called instead (followerOwner),
	// which is how a session starts its writer only when it has something to
	// write. A wake may come late: the follower then finds nothing new and
	// sleeps again.
	wake     chan struct{}
	owner    followerOwner
	idx      int32  // position in hub.followers (under hub.mu)
	sleepIdx int32  // position in hub.sleepers, -1 when not there (under hub.mu)
	sleepAt  uint64 // the cursor it sleeps at (under hub.mu)
	left     bool   // hub.leave was called: never a sleeper again (under hub.mu)
	// cuts lets the hub cut the follower as soon as the bounds release an
	// entry it still needs (hub.cutBehind): cut is set, it leaves the log,
	// and owner.onCut, if there is an owner, is called (outside the hub's
	// lock). Without it the follower finds out on its next fetch.
	cuts bool
	// paces: when far behind, it slows the senders, or is cut when it
	// stalls (hub.pace; seenCursor and seenAt, below). Packed with the
	// flags above, as the int32 indexes are, so that a follower is 112
	// bytes and a session fits its size class (TestSessionSize).
	paces bool
	cut   atomic.Bool
	// stopped: its reader ended (session.finish); tryBatch then returns
	// errStopped, as when its done channel is closed. A flag, not a
	// channel: a session's end is only ever checked, never waited for.
	stopped atomic.Bool
	// stalled: cut for taking nothing while far behind (hub.pressured),
	// before reaching its bound.
	stalled atomic.Bool
	// seenCursor and seenAt are the cursor pressured last saw and the hub
	// time it first saw it (under hub.mu), for paces: a writer fetches
	// again as soon as a write completes, so an unchanged cursor means no
	// progress, at no cost to the writer.
	seenCursor uint64
	seenAt     int64
}

// followerOwner runs a follower that has no waiting goroutine (a session;
// an interface rather than func fields, so a session is its own owner and
// costs no closures). wake replaces the wake token: called once per sleep,
// outside the hub's lock, on the publisher's or the waker's goroutine, it
// must not block; how says who calls and what it may do (wakeHow), and it
// reports whether the waker must call it again. onCut is called when the
// hub cut the follower (cuts). holds returns the sequence number of the
// oldest frame its reader may still read (a batch being written), or
// released: shared segments before it may be recycled (arena). It must not
// be above the reader's next cursor, and may be read at any time under the
// hub's lock.
type followerOwner interface {
	wake(how wakeHow) (again bool)
	onCut()
	holds() uint64
}

func newFollower(h *hub) *follower {
	return &follower{h: h, wake: make(chan struct{}, 1), idx: -1, sleepIdx: -1}
}

// next blocks until the log holds entries at f's cursor, appends up to maxN
// of them to dst (stopping once maxBytes are in), advances the cursor past
// them and returns dst. It returns ErrLagged when f fell behind its bounds
// (the hub's or its own), errStopped when done is closed, ErrServerClosed
// when closing is closed and nothing is left to fetch, or ctx.Err(). nil
// channels never fire.
func (f *follower) next(ctx context.Context, done, closing <-chan struct{}, dst []*entry, maxN int, maxBytes int64) ([]*entry, error) {
	b := batch{entries: dst}
	err := f.nextBatch(ctx, done, closing, &b, false, maxN, maxBytes)
	return b.entries, err
}

// batch is what a follower takes from the log at once: a run (rn.n > 0),
// or entries one by one.
type batch struct {
	rn      run
	entries []*entry
}

// nextBatch is next into b, taking a run when runs is set and the log has
// one at the cursor (the entries are then left alone); otherwise entries
// are appended to b.entries as next does.
func (f *follower) nextBatch(ctx context.Context, done, closing <-chan struct{}, b *batch, runs bool, maxN int, maxBytes int64) error {
	for {
		asleep, err := f.tryBatch(done, closing, b, runs, maxN, maxBytes)
		if !asleep || err != nil {
			return err
		}
		select {
		case <-f.wake:
		case <-done:
			return errStopped
		case <-closing: // fetch once more: the frames published before it
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryBatch is nextBatch without the wait: when the log holds nothing at
// f's cursor it registers f as a sleeper and reports asleep; the next
// publish then wakes f (its wake token, or owner.wake). Its results are
// otherwise nextBatch's.
func (f *follower) tryBatch(done, closing <-chan struct{}, b *batch, runs bool, maxN int, maxBytes int64) (asleep bool, _ error) {
	for {
		if isClosed(done) || f.stopped.Load() {
			return false, errStopped
		}
		ok, err := f.take(b, runs, maxN, maxBytes)
		if ok || err != nil {
			return false, err
		}
		if isClosed(closing) {
			return false, ErrServerClosed
		}
		if f.h.sleep(f, f.cursor.Load()) {
			return true, nil
		}
	}
}

// take is one fetch of tryBatch, without waiting: it reports whether it
// took something, or ErrLagged.
func (f *follower) take(b *batch, runs bool, maxN int, maxBytes int64) (bool, error) {
	h := f.h
	cursor := f.cursor.Load()
	if f.cut.Load() || f.behind(cursor) {
		return false, ErrLagged
	}
	if runs {
		rn, lagged := h.fetchRun(cursor)
		switch {
		case lagged:
			return false, ErrLagged
		case rn.n > 0:
			b.rn = rn
			f.fetched.Store(rn.first.end - rn.first.size + int64(len(rn.frames)))
			f.cursor.Store(cursor + rn.n)
			return true, nil
		case rn.first == nil:
			return false, nil // nothing yet
		}
	}
	n0 := len(b.entries)
	var lagged bool
	b.entries, lagged = h.fetch(cursor, b.entries, maxN, maxBytes)
	if lagged {
		clear(b.entries[n0:])
		b.entries = b.entries[:n0]
		return false, ErrLagged
	}
	if len(b.entries) == n0 {
		return false, nil
	}
	f.fetched.Store(b.entries[len(b.entries)-1].end)
	f.cursor.Store(cursor + uint64(len(b.entries)-n0))
	return true, nil
}

// behind reports whether f, about to fetch at cursor, is further behind
// the head of the log than its own bounds allow.
func (f *follower) behind(cursor uint64) bool {
	if f.maxMsgs == 0 && f.maxBytes == 0 {
		return false
	}
	h := f.h
	return f.maxMsgs > 0 && h.head.Load()-cursor > f.maxMsgs ||
		f.maxBytes > 0 && h.bytes.Load()-f.fetched.Load() > f.maxBytes
}

// lag returns how far f is behind the head of the log.
func (f *follower) lag() (msgs uint64, size int64) {
	return f.h.head.Load() - f.cursor.Load(), f.h.bytes.Load() - f.fetched.Load()
}

// skip moves a lagging f to the oldest entry the log still holds and
// returns how many entries it missed.
func (f *follower) skip() uint64 {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	tail, cursor := h.tail.Load(), f.cursor.Load()
	if tail <= cursor {
		return 0
	}
	f.fetched.Store(h.tailBytes)
	f.cursor.Store(tail)
	return tail - cursor
}

// FollowOptions configures a Follower.
type FollowOptions struct {
	Name        string // for logs and metrics
	MaxMessages int    // 0: the bus's MaxQueueMessages
	MaxBytes    int64  // 0: the bus's MaxQueueBytes
}

// Follower is a bounded reader of the bus's log: it sees every frame
// appended after Follow, in the log's order, as a client does. Next must not
// be called concurrently with itself; Close may be called at any time.
type Follower struct {
	s      *Server
	name   string
	f      *follower
	closed chan struct{}
	once   sync.Once
	batch  []*entry
	err    error // ErrLagged once cut (only Next touches it)
}

// Follow returns a bounded reader of the log that starts after the newest
// frame. It is cut like a slow client: once it falls more than MaxMessages
// or MaxBytes behind (bounds above the bus's own cannot be kept: the bus's
// apply then), Next returns ErrLagged. Shutdown does not wait for
// followers: after it, Next returns what was published before and then
// ErrServerClosed.
func (s *Server) Follow(o FollowOptions) *Follower {
	f := newFollower(s.hub)
	f.cuts = true // Next reports ErrLagged
	if o.MaxMessages > 0 {
		f.maxMsgs = uint64(o.MaxMessages)
	}
	if o.MaxBytes > 0 {
		f.maxBytes = o.MaxBytes
	}
	s.hub.join(f)
	return &Follower{s: s, name: o.Name, f: f, closed: make(chan struct{})}
}

// Next blocks until at least one frame is there, appends up to
// cap(dst)-len(dst) frames (at least one) to dst and returns it; ErrLagged
// once cut, ErrServerClosed after Shutdown (once the frames published before
// it were returned), ErrFollowerClosed after Close, or ctx.Err().
func (fl *Follower) Next(ctx context.Context, dst []Frame) ([]Frame, error) {
	if fl.err != nil {
		return dst, fl.err
	}
	n := len(dst)
	var err error
	for len(dst) == n && err == nil { // a batch of notices for one client only: wait on
		var batch []*entry
		batch, err = fl.f.next(ctx, fl.closed, fl.s.closingC, fl.batch[:0], max(cap(dst)-len(dst), 1), math.MaxInt64)
		for _, e := range batch {
			if e.to == 0 { // not a notice for one client
				dst = append(dst, fl.s.frame(e))
			}
		}
		clear(batch)
		fl.batch = batch[:0]
	}
	switch err {
	case ErrLagged:
		msgs, size := fl.f.lag()
		fl.s.hub.leave(fl.f)
		fl.s.m.followerLagged(fl.name)
		fl.s.log.Warn("Follower fell behind the queue bounds", "follower", fl.name, "lag_messages", msgs, "lag_bytes", size)
		fl.err = ErrLagged
	case errStopped:
		err = ErrFollowerClosed
	}
	return dst, err
}

// Close stops the follower: it no longer holds frames in the log, and Next
// returns ErrFollowerClosed.
func (fl *Follower) Close() {
	fl.once.Do(func() {
		close(fl.closed)
		fl.s.hub.leave(fl.f)
	})
}

// Frame is one message of the bus's log, as every client receives it.
type Frame struct {
	Op ws.Opcode // ws.OpText or ws.OpBinary
	// Payload is the bytes relayed, unchanged; shared by every reader: never
	// modify. It lies in a buffer of the log shared with the frames around
	// it, which stays in memory as long as the payload does: a reader that
	// keeps payloads for long should copy them.
	Payload []byte
	// Origin is "" for frames this server accepted from its own clients or
	// Emit; otherwise the origin passed to Publish (e.g. another cluster
	// node's name).
	Origin string
	Seq    uint64    // position in this server's log
	Time   time.Time // when it entered the log
}

// Type returns the OVOS message type of a text frame holding a JSON object,
// else "".
func (f Frame) Type() string {
	if f.Op != ws.OpText {
		return ""
	}
	return messageType(f.Payload)
}

func (s *Server) frame(e *entry) Frame {
	return Frame{Op: e.msg.Op(), Payload: e.msg.Payload(), Origin: e.origin, Seq: e.seq, Time: s.hub.epoch.Add(time.Duration(e.born))}
}
