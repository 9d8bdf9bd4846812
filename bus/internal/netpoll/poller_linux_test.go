//go:build linux

package netpoll

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/internal/testsock"
	"github.com/ovbus/ovbus/internal/testwait"
)

// fakeReader is a Reader as a server's is: each run reads what its socket
// holds without waiting, then arms its registration again; at the end of
// the stream, or when the socket is closed, it ends (closes the socket and
// lets the registration go). It counts its runs and any run that overlaps
// another; got is touched by the running reader only, so that two runs at
// once are a data race too.
type fakeReader struct {
	sock      net.Conn
	reg       Registration
	got       []byte
	runs      atomic.Int32
	running   atomic.Int32
	overlaps  atomic.Int32
	beforeArm func() // nil: none
	ended     chan struct{}
}

// register registers sock for a new fakeReader and runs it once, as a
// server does right after Register.
func register(t *testing.T, sock net.Conn, beforeArm func()) *fakeReader {
	t.Helper()
	r := &fakeReader{sock: sock, beforeArm: beforeArm, ended: make(chan struct{})}
	reg, err := Register(sock, r)
	if err != nil {
		t.Fatal(err)
	}
	r.reg = reg
	t.Cleanup(func() {
		sock.Close()
		if r.reg.Closed() {
			r.end()
		}
	})
	go r.Run()
	return r
}

func (r *fakeReader) Run() {
	r.runs.Add(1)
	if r.running.Add(1) != 1 {
		r.overlaps.Add(1)
	}
	var buf [700]byte
	for {
		n, err := readNow(r.sock, buf[:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			// Counted out before Arm: once armed, the poller may run
			// the next run at once.
			r.running.Add(-1)
			if r.beforeArm != nil {
				r.beforeArm()
			}
			if !r.reg.Arm() {
				r.end() // closed meanwhile
			}
			return
		case err != nil || n == 0: // closed, or the end of the stream
			r.running.Add(-1)
			r.end()
			return
		}
		r.got = append(r.got, buf[:n]...)
		runtime.Gosched() // let another run overlap this one, if one could
	}
}

// end ends the reader: it may happen once only (closing ended twice
// panics).
func (r *fakeReader) end() {
	r.sock.Close()
	r.reg.Unregister()
	close(r.ended)
}

// readNow reads what sock holds without waiting: syscall.EAGAIN when
// nothing.
func readNow(sock net.Conn, b []byte) (int, error) {
	rc, err := sock.(syscall.Conn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Control(func(fd uintptr) { n, rerr = syscall.Read(int(fd), b) }); err != nil {
		return 0, err
	}
	return max(n, 0), rerr
}

// socketPair returns a server socket, handed over (an fdConn) or kept in
// the runtime's poller (a *net.TCPConn), and its peer.
func socketPair(t *testing.T, ln net.Listener, handOver bool) (net.Conn, *net.TCPConn) {
	t.Helper()
	if handOver {
		return fdPair(t, ln)
	}
	return tcpPair(t, ln)
}

// unixPair returns the two ends of a socketpair as *net.UnixConn: a
// socket the runtime's poller keeps, whose bytes are readable on one end
// as soon as a write on the other returns.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ends [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		nc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = nc.(*net.UnixConn)
		t.Cleanup(func() { nc.Close() })
	}
	return ends[0], ends[1]
}

// kinds are the two kinds of registered socket.
var kinds = []struct {
	name     string
	handOver bool
}{{"handed-over", true}, {"kept", false}}

// TestReadersOneAtATime: many sockets, each fed by a peer in small writes,
// each read by a reader the poller runs whenever its socket is readable:
// never two runs of one socket's reader at once, and every reader gets its
// peer's bytes, all and in order, however the writes and the runs fall.
func TestReadersOneAtATime(t *testing.T) {
	ln := listen(t)
	const socks, writes = 100, 200
	readers := make([]*fakeReader, socks)
	want := make([][]byte, socks)
	var wg sync.WaitGroup
	for i := range socks {
		sock, peer := socketPair(t, ln, kinds[i%2].handOver)
		peer.SetNoDelay(true)
		readers[i] = register(t, sock, nil)
		var sent bytes.Buffer
		for k := range writes {
			sent.WriteString(fmt.Sprintf("%d:%d:%s;", i, k, bytes.Repeat([]byte{'x'}, (i*7+k*13)%500)))
		}
		want[i] = sent.Bytes()
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := want[i]
			for k := 0; len(b) > 0; k++ {
				n := min(len(b), 1+(k*37)%900)
				if _, err := peer.Write(b[:n]); err != nil {
					t.Error(err)
					return
				}
				b = b[n:]
				runtime.Gosched()
			}
			peer.CloseWrite() // the reader ends at the end of the stream
		}()
	}
	wg.Wait()
	for i, r := range readers {
		select {
		case <-r.ended:
		case <-time.After(30 * time.Second):
			t.Fatalf("socket %d (%s): the reader did not reach the end of the stream (%d of %d bytes)", i, kinds[i%2].name, len(r.got), len(want[i]))
		}
		if n := r.overlaps.Load(); n != 0 {
			t.Errorf("socket %d (%s): %d runs of its reader overlapped another", i, kinds[i%2].name, n)
		}
		if !bytes.Equal(r.got, want[i]) {
			t.Errorf("socket %d (%s): the reader got %d bytes, not the %d sent", i, kinds[i%2].name, len(r.got), len(want[i]))
		}
	}
}

// TestArmReportsBytesThatCameMeanwhile: bytes that arrive after the reader
// found the socket empty and before it armed the registration are
// reported as the reader arms it: the reader runs again and reads them,
// with nothing more sent.
func TestArmReportsBytesThatCameMeanwhile(t *testing.T) {
	ln := listen(t)
	for _, kind := range append(kinds, struct {
		name     string
		handOver bool
	}{"unix", false}) {
		t.Run(kind.name, func(t *testing.T) {
			var sock net.Conn
			var peer net.Conn
			if kind.name == "unix" {
				sock, peer = unixPair(t)
			} else {
				sock, peer = socketPair(t, ln, kind.handOver)
			}
			drained, proceed := make(chan struct{}), make(chan struct{})
			var first atomic.Bool
			r := register(t, sock, func() {
				if first.CompareAndSwap(false, true) {
					drained <- struct{}{} // found the socket empty: not armed yet
					<-proceed
				}
			})
			<-drained
			if _, err := peer.Write([]byte("meanwhile")); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, "the bytes in the socket", 10*time.Second, func() bool { return testsock.Unread(sock) == len("meanwhile") })
			close(proceed)
			testwait.Until(t, "the reader to run again and read them", 10*time.Second, func() bool { return r.runs.Load() == 2 && testsock.Unread(sock) == 0 })
			peer.Close()
			<-r.ended // reads the end of the stream: got is the reader's no more
			if string(r.got) != "meanwhile" {
				t.Fatalf("the reader got %q", r.got)
			}
		})
	}
}

// TestClosedEndsTheReaderOnce: a socket closed by another than its reader,
// while the reader runs, arms or waits in the poller, has its reader ended
// once: by the closer when the reader waited (Closed), else by the reader
// itself (its read or its Arm fails). Never twice (end would panic), never
// not at all.
func TestClosedEndsTheReaderOnce(t *testing.T) {
	ln := listen(t)
	for round := range 200 {
		kind := kinds[round%2]
		sock, peer := socketPair(t, ln, kind.handOver)
		r := register(t, sock, nil)
		for range round % 5 {
			peer.Write([]byte("x")) // a run under way, or about to be
		}
		for range round % 7 {
			runtime.Gosched() // vary where the close lands
		}
		go func() {
			sock.Close()
			if r.reg.Closed() {
				r.end()
			}
		}()
		select {
		case <-r.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d (%s): the reader of a closed socket was never ended", round, kind.name)
		}
		if r.reg.Closed() {
			t.Fatalf("round %d (%s): Closed reported an armed reader after the reader ended", round, kind.name)
		}
	}
}

// TestClosedSocketsTokenGoesToNoOneElse: once a socket whose reader armed
// is closed, its token's slot (and, likely, its descriptor number) may go to
// a new socket, and the new socket's events run the new reader only, never
// the old one; nor does an event the socket of the round before left
// behind (its slot is the same) run either.
func TestClosedSocketsTokenGoesToNoOneElse(t *testing.T) {
	ln := listen(t)
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			for range 50 {
				sock, _ := socketPair(t, ln, kind.handOver)
				old := register(t, sock, nil)
				testwait.Until(t, "the reader to arm", 10*time.Second, func() bool { return old.reg.p.state().Load() == readArmed })
				sock.Close()
				// Closed reports the armed reader, unless the Arm that made
				// it armed was still under way and found the socket closed:
				// then the reader ends itself (Arm reports false).
				if old.reg.Closed() {
					old.end()
				}
				select {
				case <-old.ended:
				case <-time.After(10 * time.Second):
					t.Fatal("the reader of the closed socket was never ended")
				}
				// The next token handed out is in the old one's slot, the last
				// let go: the new socket takes it (no other test runs
				// meanwhile), in the slot's next generation.
				nsock, npeer := socketPair(t, ln, kind.handOver)
				r := register(t, nsock, nil)
				if nt, ot := tokenOf(r.reg), tokenOf(old.reg); nt&tokenSlotMask != ot&tokenSlotMask || nt == ot {
					t.Fatalf("the new socket has token %#x, want the old one's slot in another generation (%#x)", nt, ot)
				}
				npeer.Write([]byte("new"))
				npeer.Close()
				select {
				case <-r.ended: // read "new" and the end of the stream
				case <-time.After(10 * time.Second):
					t.Fatal("the new reader did not read to the end of its stream")
				}
				if string(r.got) != "new" || old.runs.Load() != 1 || len(old.got) != 0 {
					t.Fatalf("the new reader got %q; the old one ran %d times and got %q", r.got, old.runs.Load(), old.got)
				}
			}
		})
	}
}

// tokenOf is r's token in the poller.
func tokenOf(r Registration) uint32 {
	if fc, ok := r.p.(*fdConn); ok {
		return fc.token
	}
	return r.p.(*kept).token
}

// TestTokens: a token is never 0 (the write epoll's) and never one still
// held; the slot of one let go is handed out again, in its next
// generation, so that the old token names nobody, and the old owner's late
// forget leaves the new owner in place.
func TestTokens(t *testing.T) {
	p := &poller{slots: make([]pollee, 1)} // its token table only: what add, forget and lookup use
	xs := make([]*kept, 100)
	held := map[uint32]bool{}
	for i := range xs {
		xs[i] = new(kept)
		p.add(xs[i])
		if tok := xs[i].token; tok == 0 || held[tok] {
			t.Fatalf("token %#x handed out (0, or still held)", tok)
		}
		held[xs[i].token] = true
	}
	for _, x := range xs[:50] {
		p.forget(x.token, x)
	}
	old := xs[49].token
	x1, x2 := new(kept), new(kept)
	p.add(x1)
	if t1 := x1.token; t1&tokenSlotMask != old&tokenSlotMask || t1 == old || t1 == 0 {
		t.Fatalf("token %#x, want the slot of %#x, the last one let go, in its next generation", t1, old)
	}
	p.forget(old, xs[49]) // the old owner, late
	p.mu.Lock()
	got, stale := p.lookup(x1.token), p.lookup(old)
	p.mu.Unlock()
	if got != pollee(x1) {
		t.Fatal("the old owner's forget took the token from its new owner")
	}
	if stale != nil {
		t.Fatal("the old token still names the slot's new owner: an event left by the old socket would wake it")
	}
	p.add(x2)
	if t2 := x2.token; t2 == 0 || t2&tokenSlotMask == x1.token&tokenSlotMask || !held[t2&tokenSlotMask] {
		t.Fatalf("token %#x after %#x: want the slot of another one let go", t2, x1.token)
	}
	// A slot's generations wrap within the token, never to 0.
	y := &kept{}
	p.forget(x2.token, x2)
	p.free[len(p.free)-1] |= ^uint32(tokenSlotMask) // as if at its last generation
	p.add(y)
	if y.token == 0 || y.token&tokenSlotMask != x2.token&tokenSlotMask || y.token>>tokenSlotBits != 0 {
		t.Fatalf("token %#x after the last generation of slot %#x", y.token, x2.token&tokenSlotMask)
	}
}

// TestRegisterNotASocket: a net.Conn that is no socket is not registered
// (errors.ErrUnsupported: the caller reads it another way), and a zero
// Registration is no registration.
func TestRegisterNotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := Register(a, &fakeReader{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Register(net.Pipe()): %v, want errors.ErrUnsupported", err)
	}
	var zero Registration
	if zero.Closed() {
		t.Fatal("a zero Registration reported an armed reader")
	}
	zero.Unregister()
}

// roundReader is a fakeReader that is told of its claims (RoundReader).
type roundReader struct {
	*fakeReader
	claimed   atomic.Int32
	unclaimed atomic.Int32 // runs the poller started without a claim before
}

func (r *roundReader) Claimed() { r.claimed.Add(1) }

func (r *roundReader) Run() {
	// The first run is register's, not the poller's.
	if polled := r.runs.Load(); polled > 0 && r.claimed.Load() < polled {
		r.unclaimed.Add(1)
	}
	r.fakeReader.Run()
}

// TestRoundReadersAreClaimed: a RoundReader is told of each claim before
// the run it claims, once per run the poller starts.
func TestRoundReadersAreClaimed(t *testing.T) {
	ln := listen(t)
	const socks = 20
	rs := make([]*roundReader, socks)
	peers := make([]*net.TCPConn, socks)
	for i := range rs {
		sock, peer := socketPair(t, ln, kinds[i%2].handOver)
		peers[i] = peer
		rs[i] = &roundReader{fakeReader: &fakeReader{sock: sock, ended: make(chan struct{})}}
		reg, err := Register(sock, rs[i])
		if err != nil {
			t.Fatal(err)
		}
		rs[i].reg = reg
		go rs[i].Run()
	}
	for k := range 50 {
		for _, p := range peers {
			fmt.Fprintf(p, "%d;", k)
		}
	}
	for _, p := range peers {
		p.CloseWrite()
	}
	for i, r := range rs {
		select {
		case <-r.ended:
		case <-time.After(30 * time.Second):
			t.Fatalf("socket %d: the reader did not reach the end of the stream", i)
		}
		if n := r.unclaimed.Load(); n != 0 {
			t.Errorf("socket %d: %d runs without a claim first", i, n)
		}
		if c, runs := r.claimed.Load(), r.runs.Load(); c != runs-1 {
			t.Errorf("socket %d: %d claims for %d runs of the poller's", i, c, runs-1)
		}
	}
}
