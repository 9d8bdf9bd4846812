//go:build linux

package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ovbus/ovbus/bench"
	"github.com/ovbus/ovbus/bench/stats"
)

// The floor of steady traffic (-steady): N clients that all send, at a total
// rate spread evenly over them, frames of the steady mix (bench.SteadyPlan and
// bench.SizeMix: the very frames `ovbus bench --steady` sends, at the same
// moments), and every frame goes to all N, its sender too. The writer (this
// process) reads each client's frames as they come, one read per readiness
// of a level-triggered epoll, and after each read writes the whole frames it
// got to every client: one write call per client and read when the socket
// takes it, what it does not take kept until the socket has room (EPOLLOUT is
// asked for only then: a socket that always asks for it would wake the writer
// each time the receiver's acknowledgements free room). Nothing else: no
// unmasking (the reader sends unmasked frames), no log, no goroutines. Its
// CPU time over the run, divided by the frames sent and by the deliveries, is
// the least a server that sends each frame with write(2) as it comes spends
// on that traffic (floor-steady).
//
// A server can spend less by writing fewer times than once a frame:
// floor-steady-corked gathers the whole frames of every socket that one
// epoll_wait found readable and writes them to each client in one call at the
// end of the loop's pass, as uWebSockets corks a socket until its loop's
// iteration ends. At a steady rate it saves what frames happen to arrive in
// the same pass; its writes per delivery say how many did.
//
// Or by making fewer system calls for the same writes: floor-steady-uring
// relays as floor-steady does, after each read, but hands that read's sends
// to every client whose queue is empty to the kernel as one batch, one
// IORING_OP_SEND each, submitted and reaped with a single io_uring_enter
// (uring_linux.go); what a socket does not take is queued as in the other
// modes, and the sends that drain the queues of the sockets one epoll_wait
// found writable go in one batch too. Reading stays with epoll and read(2),
// as in the other modes, so that the writes are the only difference. Its
// system calls per delivery count every call the loop makes (epoll_wait,
// read, epoll_ctl, write and io_uring_enter) in every mode.
//
// The reader (this program again, -steady-reader, on another CPU) is the N
// clients: Go connections, a sender goroutine each on its schedule and a
// receiver each that counts bytes until it has every frame.

// steadyModes are the floors, run interleaved: every frame written as it
// comes (relay), the frames of one pass of the loop written together
// (corked), and every frame sent as it comes with one io_uring_enter for all
// its sends (uring).
var steadyModes = []string{"steady", "steady-corked", "steady-uring"}

// errUringUnavailable says that this kernel or architecture has no io_uring
// for the steady-uring floor.
var errUringUnavailable = errors.New("io_uring unavailable")

// steadyFloor is one run's figures. Per delivery: writes are write(2) calls,
// sends are writes and io_uring sends, enters are io_uring_enter calls, and
// syscalls every system call of the loop.
type steadyFloor struct {
	perFrame, perDelivery           float64
	writes, sends, enters, syscalls float64
	frames                          int
	full                            int // sends that left bytes queued (the socket was full)
}

// runSteadyFloors runs every scenario repeat times and prints the medians;
// with jsonOut it also writes the runs as a steady report (a target
// floor-MODE for each of steadyModes), whose scenarios are named as ovbus
// bench names them.
func runSteadyFloors(list string, duration time.Duration, repeat int, opt steadyOptions, jsonOut string) {
	scs, err := bench.ParseSteadyScenarios(list)
	if err != nil {
		fail(fmt.Errorf("-steady: %v", err))
	}
	rep := bench.NewReport(bench.KindSteady, repeat, map[string]any{"duration": duration.String(), "steady": list,
		"json_size":   fmt.Sprintf("%d-%d", bench.DefaultSizeMix.JSONMin, bench.DefaultSizeMix.JSONMax),
		"binary_size": fmt.Sprintf("%d-%d", bench.DefaultSizeMix.BinaryMin, bench.DefaultSizeMix.BinaryMax), "seed": bench.DefaultSteadySeed, "sndbuf": opt.sndbuf})
	rep.Command = strings.Join(os.Args, " ")
	modes := steadyModes
	uringErr := uringAvailable()
	if uringErr != nil {
		fmt.Fprintf(os.Stderr, "fanfloor: floor-steady-uring left out: %v\n", uringErr)
		modes = slices.DeleteFunc(slices.Clone(modes), func(m string) bool { return m == "steady-uring" })
		rep.Settings["uring"] = uringErr.Error()
	}
	runs := make([][][]steadyFloor, len(modes)) // [mode][scenario][run]
	for m := range modes {
		runs[m] = make([][]steadyFloor, len(scs))
	}
	for r := range repeat {
		for i, sc := range scs {
			for m, mode := range modes {
				f := steadyFloorRun(sc, duration, mode, opt)
				runs[m][i] = append(runs[m][i], f)
				rep.SeriesFor(sc.String(), bench.Target{Name: bench.FloorPrefix + mode, PID: -1}).Add(map[string]float64{
					"clients": float64(sc.Clients), "rate": sc.Rate, "binary_share": sc.BinaryShare, "duration_s": duration.Seconds(),
					"sent": float64(f.frames), "delivered": float64(f.frames * sc.Clients), "lost": 0,
					"server_cpu_us_per_frame": f.perFrame, "server_cpu_us_per_delivery": f.perDelivery,
					"writes_per_delivery": f.writes, "sends_per_delivery": f.sends, "enters_per_delivery": f.enters,
					"syscalls_per_delivery": f.syscalls, "full_per_delivery": float64(f.full) / float64(f.frames*sc.Clients),
				})
				fmt.Fprintf(os.Stderr, "fanfloor: %s %s run %d/%d: %.2f µs per frame, %.3f per delivery\n", mode, sc, r+1, repeat, f.perFrame, f.perDelivery)
			}
		}
	}
	if jsonOut != "" {
		rep.Finish()
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fail(err)
		}
	}
	fmt.Printf("# fanfloor -steady: the frames of ovbus bench --steady, %v each, %d runs, medians (min-max)\n", duration, repeat)
	if uringErr != nil {
		fmt.Printf("floor-steady-uring left out: %v\n", uringErr)
	}
	fmt.Println("| scenario | floor | writer CPU µs per frame | ÷ floor-steady | µs per delivery | sends per delivery | write(2) per delivery | io_uring_enter per delivery | system calls per delivery |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for i, sc := range scs {
		var base float64 // floor-steady's median µs per frame, the first mode's
		for m, mode := range modes {
			get := func(f func(steadyFloor) float64) []float64 {
				v := make([]float64, len(runs[m][i]))
				for j, r := range runs[m][i] {
					v[j] = f(r)
				}
				return v
			}
			pf, pd := get(func(f steadyFloor) float64 { return f.perFrame }), get(func(f steadyFloor) float64 { return f.perDelivery })
			if m == 0 {
				base = median(pf)
			}
			fmt.Printf("| %s | %s | %.2f (%.2f–%.2f) | ×%.2f | %.3f (%.3f–%.3f) | %.3f | %.3f | %.3f | %.3f |\n", sc, bench.FloorPrefix+mode, median(pf), slices.Min(pf), slices.Max(pf),
				median(pf)/base, median(pd), slices.Min(pd), slices.Max(pd), median(get(func(f steadyFloor) float64 { return f.sends })),
				median(get(func(f steadyFloor) float64 { return f.writes })), median(get(func(f steadyFloor) float64 { return f.enters })),
				median(get(func(f steadyFloor) float64 { return f.syscalls })))
		}
	}
}

// steadyScenarioArg writes a scenario as ParseSteadyScenarios reads it.
func steadyScenarioArg(sc bench.SteadyScenario) string {
	return fmt.Sprintf("%d@%s:%s", sc.Clients, strconv.FormatFloat(sc.Rate, 'g', -1, 64), strconv.FormatFloat(sc.BinaryShare, 'g', -1, 64))
}

// frameBytes is the length on the wire of a frame of payload n (an unmasked
// header of 4 or 10 bytes: every steady frame is above 125 bytes).
func frameBytes(n int) int {
	if n < 1<<16 {
		return 4 + n
	}
	return 10 + n
}

// appendHeader appends an unmasked frame header for a payload of n bytes.
func appendHeader(dst []byte, binaryFrame bool, n int) []byte {
	op := byte(0x81)
	if binaryFrame {
		op = 0x82
	}
	if n < 1<<16 {
		return append(dst, op, 126, byte(n>>8), byte(n))
	}
	dst = append(dst, op, 127)
	return binary.BigEndian.AppendUint64(dst, uint64(n))
}

// frameLen returns the length of the frame at the front of b, or 0 when b
// does not hold all of its header yet.
func frameLen(b []byte) int {
	if len(b) < 4 {
		return 0
	}
	switch b[1] & 0x7f {
	case 126:
		return 4 + int(binary.BigEndian.Uint16(b[2:]))
	case 127:
		if len(b) < 10 {
			return 0
		}
		return 10 + int(binary.BigEndian.Uint64(b[2:]))
	}
	return 2 + int(b[1]&0x7f)
}

// mixOf is the mix of a scenario: the presets' sizes, its binary share.
func mixOf(sc bench.SteadyScenario) bench.SizeMix {
	m := bench.DefaultSizeMix
	m.BinaryShare = sc.BinaryShare
	return m
}

// runBytes is what every client receives in a run: every frame of the plan,
// on the wire.
func runBytes(sc bench.SteadyScenario, d time.Duration) (frames, bytes int) {
	plan := bench.SteadyPlan{Clients: sc.Clients, Rate: sc.Rate, Duration: d}
	mix := mixOf(sc)
	for i := range sc.Clients {
		for k := range plan.Frames(i) {
			size, _ := mix.Frame(bench.DefaultSteadySeed, i, k)
			bytes += frameBytes(size)
			frames++
		}
	}
	return frames, bytes
}

// floorConn is one client's socket on the writer's side.
type floorConn struct {
	i, fd   int
	in      []byte // bytes read and not yet relayed (a partial frame)
	out     []byte // bytes to write once the socket has room
	written int
}

// steadyOptions are how the floors run.
type steadyOptions struct {
	readerCPU string // the reader's CPU list (taskset), empty for any
	sndbuf    int    // SO_SNDBUF of the writer's sockets, 0 for the kernel's autotuning
}

// steadyFloorRun makes one run of sc in mode (one of steadyModes) and
// returns the writer's figures.
func steadyFloorRun(sc bench.SteadyScenario, d time.Duration, mode string, opt steadyOptions) steadyFloor {
	corked := mode == "steady-corked"
	lfd, port := listen()
	defer syscall.Close(lfd)
	ctl, stop := startReader(opt.readerCPU, func(ctlAddr string) []string {
		return []string{"-steady-reader", ctlAddr, "-port", fmt.Sprint(port), "-steady", steadyScenarioArg(sc), "-duration", d.String()}
	})
	defer stop()
	conns := make([]*floorConn, 0, sc.Clients)
	fds := make([]int, 0, sc.Clients)
	for len(conns) < sc.Clients {
		fd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fail(err)
		}
		if opt.sndbuf > 0 {
			if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, opt.sndbuf); err != nil {
				fail(err)
			}
		}
		conns = append(conns, &floorConn{i: len(conns), fd: fd, in: make([]byte, 0, 64<<10)})
		fds = append(fds, fd)
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	var ring *uring
	if mode == "steady-uring" {
		// The ring is this thread's: single issuer, deferred task work.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var err error
		if ring, err = newUring(len(conns), fds); err != nil {
			fail(err)
		}
		defer ring.close()
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		fail(err)
	}
	defer syscall.Close(ep)
	calls, writes, done, full := 0, 0, 0, 0 // system calls of the loop, write(2) calls among them
	watch := func(c *floorConn, op int, events uint32) {
		ev := syscall.EpollEvent{Events: events, Fd: int32(c.i)}
		calls++
		if err := syscall.EpollCtl(ep, op, c.fd, &ev); err != nil {
			fail(err)
		}
	}
	for _, c := range conns {
		watch(c, syscall.EPOLL_CTL_ADD, syscall.EPOLLIN)
	}
	ctlr := bufio.NewReader(ctl)
	expect(ctlr, "ready")
	frames, total := runBytes(sc, d)
	flushed := func(c *floorConn, n int) { // n bytes of c.out went; EPOLLOUT off once it is all out
		c.written += n
		c.out = c.out[:copy(c.out, c.out[n:])]
		if len(c.out) == 0 {
			watch(c, syscall.EPOLL_CTL_MOD, syscall.EPOLLIN)
		}
		if c.written == total {
			done++
		}
	}
	reapFlush := func(i, res int) { flushed(conns[i], sendResult(res)) }
	flush := func(c *floorConn) { // write what c has waiting
		if ring != nil {
			ring.send(c.i, c.out, reapFlush) // submitted with the other flushes of this pass
			return
		}
		n, k := writeSome(c.fd, c.out)
		writes += k
		flushed(c, n)
	}
	var relayed []byte                  // what the ring's sends of relay carry
	sent := func(c *floorConn, n int) { // n bytes of relayed went to c
		c.written += n
		if n < len(relayed) { // the socket is full: the rest when it has room
			full++
			c.out = append(c.out, relayed[n:]...)
			watch(c, syscall.EPOLL_CTL_MOD, syscall.EPOLLIN|syscall.EPOLLOUT)
		}
		if c.written == total {
			done++
		}
	}
	reapRelay := func(i, res int) { sent(conns[i], sendResult(res)) }
	relay := func(b []byte) { // b: whole frames, to every client
		relayed = b
		for _, c := range conns {
			switch {
			case len(c.out) > 0:
				c.out = append(c.out, b...)
			case ring != nil:
				ring.send(c.i, b, reapRelay)
			default:
				n, k := writeSome(c.fd, b)
				writes += k
				sent(c, n)
			}
		}
		if ring != nil {
			ring.submit(reapRelay)
		}
	}
	start := cpuSample()
	if _, err := ctl.Write([]byte("go\n")); err != nil {
		fail(err)
	}
	evs := make([]syscall.EpollEvent, 256)
	var pass []byte // corked: the whole frames of this pass of the loop, in the order read
	for done < len(conns) {
		k, err := syscall.EpollWait(ep, evs, -1)
		calls++
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fail(err)
		}
		// The queues of the sockets that have room first (with the ring,
		// in one batch), then what the readable ones sent.
		for _, ev := range evs[:k] {
			if c := conns[ev.Fd]; ev.Events&syscall.EPOLLOUT != 0 && len(c.out) > 0 {
				flush(c)
			}
		}
		if ring != nil {
			ring.submit(reapFlush)
		}
		for _, ev := range evs[:k] {
			c := conns[ev.Fd]
			if ev.Events&syscall.EPOLLIN == 0 {
				continue
			}
			// Level-triggered: one read; what it leaves wakes the loop again.
			if cap(c.in)-len(c.in) < 16<<10 {
				c.in = slices.Grow(c.in, 64<<10)
			}
			if n := frameLen(c.in); n > cap(c.in) {
				c.in = slices.Grow(c.in, n-len(c.in))
			}
			r, err := syscall.Read(c.fd, c.in[len(c.in):cap(c.in)])
			calls++
			if err == syscall.EINTR || err == syscall.EAGAIN {
				continue
			}
			if err != nil || r == 0 {
				fail(fmt.Errorf("client %d: read: %v", ev.Fd, err))
			}
			c.in = c.in[:len(c.in)+r]
			whole := 0
			for n := frameLen(c.in[whole:]); n > 0 && whole+n <= len(c.in); n = frameLen(c.in[whole:]) {
				whole += n
			}
			if whole > 0 {
				if corked {
					pass = append(pass, c.in[:whole]...)
				} else {
					relay(c.in[:whole])
				}
				c.in = c.in[:copy(c.in, c.in[whole:])]
			}
		}
		if len(pass) > 0 {
			relay(pass)
			pass = pass[:0]
		}
	}
	expect(ctlr, "done")
	cpu := stats.CPUSince(start, cpuSample())
	us := float64(cpu.Nanoseconds()) / 1e3
	deliveries := float64(frames * sc.Clients)
	f := steadyFloor{perFrame: us / float64(frames), perDelivery: us / deliveries, frames: frames, full: full,
		writes: float64(writes) / deliveries, sends: float64(writes) / deliveries}
	calls += writes
	if ring != nil {
		calls += ring.enters
		f.sends += float64(ring.submitted) / deliveries
		f.enters = float64(ring.enters) / deliveries
	}
	f.syscalls = float64(calls) / deliveries
	return f
}

// sendResult is the bytes an io_uring send took, as writeSome counts them:
// -EAGAIN (the socket is full) took none; any other error ends the run.
func sendResult(res int) int {
	if res == -int(syscall.EAGAIN) {
		return 0
	}
	if res < 0 {
		fail(fmt.Errorf("io_uring send: %v", syscall.Errno(-res)))
	}
	return res
}

// uringAvailable says whether this kernel sets up a ring.
func uringAvailable() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := newUring(1, nil)
	if err != nil {
		return err
	}
	r.close()
	return nil
}

// writeSome writes as much of b to the non-blocking socket fd as it takes
// and returns the bytes written and the calls made.
func writeSome(fd int, b []byte) (written, calls int) {
	for written < len(b) {
		n, err := syscall.Write(fd, b[written:])
		calls++
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			return written, calls
		}
		if err != nil {
			fail(err)
		}
		written += n
	}
	return written, calls
}

// runSteadyReader is the reader process of a steady floor run: the clients.
func runSteadyReader(ctlAddr string, port int, list string, d time.Duration) {
	scs, err := bench.ParseSteadyScenarios(list)
	if err != nil || len(scs) != 1 {
		fail(fmt.Errorf("reader: scenario %q: %v", list, err))
	}
	sc := scs[0]
	plan := bench.SteadyPlan{Clients: sc.Clients, Rate: sc.Rate, Duration: d}
	mix := mixOf(sc)
	_, total := runBytes(sc, d)
	ctl, err := net.Dial("tcp", ctlAddr)
	if err != nil {
		fail(err)
	}
	conns := make([]net.Conn, sc.Clients)
	for i := range conns {
		if conns[i], err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			fail(fmt.Errorf("reader: connect: %v", err))
		}
	}
	var received sync.WaitGroup
	for i, c := range conns {
		received.Add(1)
		go func() {
			defer received.Done()
			buf := make([]byte, 256<<10)
			for got := 0; got < total; {
				n, err := c.Read(buf)
				if err != nil {
					fail(fmt.Errorf("reader: client %d after %d of %d bytes: %v", i, got, total, err))
				}
				got += n
			}
		}()
	}
	if _, err := ctl.Write([]byte("ready\n")); err != nil {
		fail(err)
	}
	expect(bufio.NewReader(ctl), "go")
	start := time.Now()
	for i, c := range conns {
		go func() {
			frame := make([]byte, 0, 10+mix.BinaryMax)
			for k := range plan.Frames(i) {
				if wait := time.Until(start.Add(plan.Due(i, k))); wait > 0 {
					bench.Pause(wait) // as ovbus bench's senders: on time, not on the millisecond
				}
				size, bin := mix.Frame(bench.DefaultSteadySeed, i, k)
				frame = appendHeader(frame[:0], bin, size)
				frame = frame[:len(frame)+size] // the payload: whatever the buffer holds
				if _, err := c.Write(frame); err != nil {
					fail(fmt.Errorf("reader: client %d: write: %v", i, err))
				}
			}
		}()
	}
	received.Wait()
	if _, err := ctl.Write([]byte("done\n")); err != nil {
		fail(err)
	}
	io.Copy(io.Discard, ctl) // until the writer closes
	for _, c := range conns {
		c.Close()
	}
}
