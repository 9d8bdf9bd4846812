//go:build linux

// Command fanfloor measures the kernel's part of a fan-out: the CPU time it
// takes to write N frames to each of M loopback TCP sockets, with nothing of
// a bus around it (no WebSocket parsing, no log, no goroutines: one thread,
// raw system calls, one epoll). It is the floor under a server's CPU time
// per delivery at that shape ("the cost curve").
//
// A reader process (this program run again with -reader, on another CPU)
// opens the M connections and reads them all through one epoll, as the
// fan-out benchmark's client does. Two modes run, interleaved:
//
//	burst  The writer has all N frames before it starts (the best case for
//	       any server: a burst already in its log) and writes each
//	       subscriber's frames in as few calls as the socket takes:
//	       everything in one write when the send buffer has room, otherwise
//	       what fits, and the rest as room comes (edge-triggered EPOLLOUT).
//	       No server delivers the burst with fewer or cheaper writes.
//	relay  The frames come from a sender, as in `ovbus bench`: the reader
//	       process also sends the N frames on one more connection, back to
//	       back, one write call each. The writer reads them (32 KiB at a
//	       time, as ws does) and after each read writes everything its
//	       subscribers have not had yet: a relay that never holds a frame
//	       back to make a larger batch, with no work of its own but the
//	       system calls.
//
// The figure is the writer's CPU time (every thread of this process, read
// as `ovbus bench` reads a server's: bench/stats) from the start of the
// burst to the reader's word that every byte arrived, divided by M×N. On loopback a write also runs the
// receiving side's TCP processing, as it does for a real server.
//
//	go run ./bench/cmd/fanfloor [-preset 10x20000,100x2000,1000x200,10000x100] [-size 256] [-repeat 5]
//	go run ./bench/cmd/fanfloor -steady steady [-duration 30s] [-repeat 5] [-json FILE]
//
// The frames are WebSocket text frames of -size payload bytes (a 4-byte
// header above 125 bytes), as `ovbus bench` sends them (its default size is
// 256). Every run has fresh connections; the medians are printed, each as a
// ratio to the 100-subscriber scenario's, with the write calls per
// subscriber; -json FILE also writes the runs as a fan-out report, whose
// targets floor-burst and floor-relay bench/curve.sh draws beside the
// servers' cost curves. Pin the writer for steady figures (taskset -c 0); the
// reader follows -reader-cpu when taskset is installed.
//
// -steady measures the floors of steady traffic instead (steady.go): the
// frames of `ovbus bench --steady`, sent by N clients at a total rate, each
// relayed to all N by one thread with raw system calls: write(2) as each
// frame comes, write(2) once per pass of the loop, and one io_uring_enter
// for all of a frame's sends (uring_linux.go).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/ovbus/ovbus/bench"
	"github.com/ovbus/ovbus/bench/stats"
)

type scenario struct{ subs, frames int }

// epollET is EPOLLET as epoll_event's uint32 (syscall's is negative on
// some platforms, positive on others).
const epollET = 1 << 31

var modes = []string{"burst", "relay"}

func main() {
	preset := flag.String("preset", "10x20000,100x2000,1000x200,10000x100", "scenarios, SUBSCRIBERSxFRAMES comma-separated")
	size := flag.Int("size", 256, "payload bytes per frame")
	repeat := flag.Int("repeat", 5, "runs of every scenario and mode, interleaved")
	reader := flag.String("reader", "", "run as the reader of the writer at `ADDR` (internal)")
	readerCPU := flag.String("reader-cpu", "1", "CPU list for the reader process (taskset), empty for none")
	port := flag.Int("port", 0, "the writer's port (with -reader, internal)")
	conns := flag.Int("conns", 0, "subscriber connections (with -reader, internal)")
	frames := flag.Int("frames", 0, "frames per subscriber (with -reader, internal)")
	send := flag.Bool("send", false, "also send the frames on one more connection (with -reader, internal)")
	jsonOut := flag.String("json", "", "also write the runs to `FILE` as a fan-out report (targets floor-burst and floor-relay), for bench/cmd/curve; with -steady, a steady report (targets floor-steady, floor-steady-corked and floor-steady-uring)")
	steady := flag.String("steady", "", "measure the floor of steady traffic instead: a `LIST` of steady scenarios as ovbus bench --preset takes them (steady, steady20, steady20-json, steady10, CLIENTS@RATE[:BINARY_SHARE])")
	duration := flag.Duration("duration", bench.DefaultSteadyDuration, "with -steady: how long the clients send")
	sndbuf := flag.Int("sndbuf", 0, "with -steady: SO_SNDBUF of the writer's sockets in `BYTES` (the kernel doubles it and stops tuning it), 0 for the kernel's own")
	steadyReader := flag.String("steady-reader", "", "run as the clients of a -steady writer at `ADDR` (internal)")
	flag.Parse()
	switch {
	case *steadyReader != "":
		runSteadyReader(*steadyReader, *port, *steady, *duration)
		return
	case *steady != "":
		runSteadyFloors(*steady, *duration, *repeat, steadyOptions{readerCPU: *readerCPU, sndbuf: *sndbuf}, *jsonOut)
		return
	}
	if *size < 126 || *size > 65535 {
		fail(fmt.Errorf("-size: %d is outside 126-65535 (the frames have a 4-byte header)", *size))
	}
	frame := make([]byte, 4+*size)
	frame[0], frame[1], frame[2], frame[3] = 0x81, 126, byte(*size>>8), byte(*size)
	for i := 4; i < len(frame); i++ {
		frame[i] = 'a' + byte(i%26)
	}
	if *reader != "" {
		runReader(*reader, *port, *conns, *frames, frame, *send)
		return
	}
	var scs []scenario
	for _, s := range strings.Split(*preset, ",") {
		m, n, ok := strings.Cut(strings.TrimSpace(s), "x")
		subs, err1 := strconv.Atoi(m)
		frames, err2 := strconv.Atoi(n)
		if !ok || err1 != nil || err2 != nil || subs < 1 || frames < 1 {
			fail(fmt.Errorf("-preset: %q is not SUBSCRIBERSxFRAMES (for example 100x2000)", s))
		}
		scs = append(scs, scenario{subs, frames})
	}
	// perDelivery[mode][scenario] and writes likewise: one figure a run.
	perDelivery := make([][][]float64, len(modes))
	writes := make([][][]float64, len(modes))
	for m := range modes {
		perDelivery[m] = make([][]float64, len(scs))
		writes[m] = make([][]float64, len(scs))
	}
	rep := bench.NewReport(bench.KindFanout, *repeat, map[string]any{"size": *size, "preset": *preset})
	rep.Command = strings.Join(os.Args, " ")
	for r := 0; r < *repeat; r++ {
		for i, sc := range scs {
			for m, mode := range modes {
				us, w := run(sc, frame, mode == "relay", *readerCPU)
				perDelivery[m][i] = append(perDelivery[m][i], us)
				writes[m][i] = append(writes[m][i], w)
				rep.SeriesFor(fmt.Sprintf("%d×%d", sc.subs, sc.frames), bench.Target{Name: bench.FloorPrefix + mode, PID: -1}).Add(map[string]float64{
					"clients": float64(sc.subs), "messages": float64(sc.frames), bench.CurveMetric: us, "writes_per_subscriber": w,
				})
			}
		}
	}
	if *jsonOut != "" {
		rep.Finish()
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fail(err)
		}
	}
	fmt.Printf("# fanfloor: %d-byte frames (%d payload), %d runs of each, medians (min-max)\n", len(frame), *size, *repeat)
	fmt.Println("| scenario | burst: writer CPU µs per delivery | ×100-subscriber | writes per subscriber | relay: writer CPU µs per delivery | ×100-subscriber | writes per subscriber |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for i, sc := range scs {
		fmt.Printf("| %d×%d", sc.subs, sc.frames)
		for m := range modes {
			med := median(perDelivery[m][i])
			ratio := "—"
			for j, o := range scs {
				if o.subs == 100 {
					ratio = fmt.Sprintf("×%.2f", med/median(perDelivery[m][j]))
				}
			}
			fmt.Printf(" | %.3f (%.3f–%.3f) | %s | %.2f", med, slices.Min(perDelivery[m][i]), slices.Max(perDelivery[m][i]), ratio, median(writes[m][i]))
		}
		fmt.Println(" |")
	}
	fmt.Println("\nruns, µs per delivery in the order run:")
	for i, sc := range scs {
		for m, mode := range modes {
			fmt.Printf("%d×%d %s %s\n", sc.subs, sc.frames, mode, strings.Join(format(perDelivery[m][i]), " "))
		}
	}
}

func format(v []float64) []string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return s
}

// run makes one run of sc: it starts a reader, accepts its connections,
// writes every subscriber's frames (relay: as they come from the sender) and
// waits for the reader to have them all. It returns the writer's CPU µs per
// delivery and the write calls per subscriber.
func run(sc scenario, frame []byte, relay bool, readerCPU string) (float64, float64) {
	// The sockets are raw descriptors, out of the Go runtime's poller, so
	// that nothing but these calls touches them.
	lfd, port := listen()
	defer syscall.Close(lfd)
	// The reader says on the control connection when it reads every
	// subscriber ("ready"), and when it has every byte ("done").
	ctl, stop := startReader(readerCPU, func(ctlAddr string) []string {
		return []string{"-reader", ctlAddr, "-port", fmt.Sprint(port), "-conns", fmt.Sprint(sc.subs),
			"-frames", fmt.Sprint(sc.frames), "-size", fmt.Sprint(len(frame) - 4), fmt.Sprintf("-send=%v", relay)}
	})
	defer stop()
	n := sc.subs
	if relay {
		n++ // the sender's connection comes last
	}
	fds := make([]int, 0, n)
	for len(fds) < n {
		fd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fail(err)
		}
		fds = append(fds, fd)
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		fail(err)
	}
	defer syscall.Close(ep)
	for i, fd := range fds {
		ev := syscall.EpollEvent{Events: syscall.EPOLLOUT | epollET, Fd: int32(i)}
		if i == sc.subs {
			ev.Events = syscall.EPOLLIN // the sender: level-triggered
		}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			fail(err)
		}
	}
	ctlr := bufio.NewReader(ctl)
	expect(ctlr, "ready")

	// The log: every frame, back to back; avail bytes of it are whole
	// frames the writer has (all of them in a burst).
	total := len(frame) * sc.frames
	log := make([]byte, 0, total)
	for range sc.frames {
		log = append(log, frame...)
	}
	avail, got := total, total
	if relay {
		avail, got = 0, 0
		if _, err := ctl.Write([]byte("go\n")); err != nil {
			fail(err)
		}
	}
	sent := make([]int, sc.subs)
	full := make([]bool, sc.subs) // waiting for EPOLLOUT
	calls, done := 0, 0
	start := cpuSample()
	catchUp := func(i int) {
		if full[i] || sent[i] == avail {
			return
		}
		c, ok := write(fds[i], log[:avail], &sent[i])
		calls += c
		full[i] = !ok
		if sent[i] == total {
			done++
		}
	}
	if !relay {
		for i := range sent {
			catchUp(i)
		}
	}
	evs := make([]syscall.EpollEvent, 256)
	for done < sc.subs {
		k, err := syscall.EpollWait(ep, evs, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fail(err)
		}
		for _, ev := range evs[:k] {
			i := int(ev.Fd)
			if i < sc.subs {
				full[i] = false
				catchUp(i)
				continue
			}
			// The sender: read what it sent, up to 32 KiB, and relay
			// the whole frames to every subscriber that has room.
			r, err := syscall.Read(fds[i], log[got:min(got+32<<10, total)])
			if err == syscall.EAGAIN || err == syscall.EINTR {
				continue
			}
			if err != nil || r == 0 {
				fail(fmt.Errorf("sender after %d of %d bytes: %v", got, total, err))
			}
			got += r
			avail = got - got%len(frame)
			if got == total {
				syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, fds[i], nil)
			}
			for j := range sent {
				catchUp(j)
			}
		}
	}
	expect(ctlr, "done")
	cpu := stats.CPUSince(start, cpuSample())
	return float64(cpu.Nanoseconds()) / 1e3 / float64(sc.subs*sc.frames), float64(calls) / float64(sc.subs)
}

// startReader starts this program again as a reader, with the arguments
// args returns for the address of a control listener (on the CPUs readerCPU
// lists, when taskset is installed), and returns the reader's control
// connection and a function that closes it and waits for the reader.
func startReader(readerCPU string, args func(ctlAddr string) []string) (net.Conn, func()) {
	ctlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	defer ctlLn.Close()
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	a := args(ctlLn.Addr().String())
	cmd := exec.Command(self, a...)
	if _, err := exec.LookPath("taskset"); err == nil && readerCPU != "" {
		cmd = exec.Command("taskset", append([]string{"-c", readerCPU, self}, a...)...)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	ctl, err := ctlLn.Accept()
	if err != nil {
		cmd.Process.Kill()
		fail(err)
	}
	return ctl, func() { ctl.Close(); cmd.Wait() }
}

// write writes b[*sent:] to the non-blocking socket fd, as much as it
// takes, and returns the write calls made and whether it took it all. A
// write that takes less than it was given found the send buffer full,
// which also asks the kernel for an EPOLLOUT edge once there is room: the
// caller waits for it.
func write(fd int, b []byte, sent *int) (calls int, all bool) {
	for *sent < len(b) {
		n, err := syscall.Write(fd, b[*sent:])
		calls++
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			return calls, false
		}
		if err != nil {
			fail(err)
		}
		*sent += n
		if *sent < len(b) {
			return calls, false
		}
	}
	return calls, true
}

func expect(r *bufio.Reader, word string) {
	line, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != word {
		fail(fmt.Errorf("reader: want %q, got %q (%v)", word, line, err))
	}
}

// listen returns a blocking listening socket on 127.0.0.1 and its port.
func listen() (int, int) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		fail(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		fail(err)
	}
	if err := syscall.Listen(fd, 4096); err != nil {
		fail(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		fail(err)
	}
	return fd, sa.(*syscall.SockaddrInet4).Port
}

// runReader is the reader process: conns connections to 127.0.0.1:port
// (raw descriptors, as the writer's), all read through one level-triggered
// epoll into one 64 KiB buffer until each has had frames frames; ctlAddr is
// the writer's control listener. With send, one more connection sends the
// frames once the writer says "go", back to back, one write call each,
// between reads.
func runReader(ctlAddr string, port, conns, frames int, frame []byte, send bool) {
	ctl, err := net.Dial("tcp", ctlAddr)
	if err != nil {
		fail(err)
	}
	dial := func() int {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			fail(err)
		}
		if err := syscall.Connect(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != nil {
			fail(fmt.Errorf("reader: connect: %v", err))
		}
		if err := syscall.SetNonblock(fd, true); err != nil {
			fail(err)
		}
		return fd
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		fail(err)
	}
	bytes := frames * len(frame)
	got := make([]int, conns)
	fds := make([]int, conns)
	for i := range fds {
		fds[i] = dial()
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fds[i], &ev); err != nil {
			fail(err)
		}
	}
	sender, toSend, full := -1, 0, false
	if send {
		sender, toSend = dial(), frames
		ev := syscall.EpollEvent{Events: syscall.EPOLLOUT | epollET, Fd: int32(conns)}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, sender, &ev); err != nil {
			fail(err)
		}
	}
	if _, err := ctl.Write([]byte("ready\n")); err != nil {
		fail(err)
	}
	if send {
		expect(bufio.NewReader(ctl), "go")
	}
	buf := make([]byte, 64<<10)
	evs := make([]syscall.EpollEvent, 256)
	for left := conns; left > 0; {
		// Some frames, one write each, then whatever is readable. A
		// full send buffer waits for its EPOLLOUT edge, not in a loop.
		for k := 0; k < 16 && toSend > 0 && !full; k++ {
			_, err := syscall.Write(sender, frame)
			if err == syscall.EAGAIN {
				full = true // a frame this small goes whole or not at all
				break
			}
			if err != nil && err != syscall.EINTR {
				fail(err)
			}
			if err == nil {
				toSend--
			}
		}
		wait := -1
		if toSend > 0 && !full {
			wait = 0
		}
		n, err := syscall.EpollWait(ep, evs, wait)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fail(err)
		}
		for _, ev := range evs[:n] {
			i := int(ev.Fd)
			if i == conns {
				full = false // the sender has room again
				continue
			}
			r, err := syscall.Read(fds[i], buf)
			if err == syscall.EAGAIN || err == syscall.EINTR {
				continue
			}
			if err != nil || r == 0 {
				fail(fmt.Errorf("reader: connection %d after %d of %d bytes: %v", i, got[i], bytes, err))
			}
			got[i] += r
			if got[i] == bytes {
				left--
				syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, fds[i], nil)
			}
		}
	}
	if _, err := ctl.Write([]byte("done\n")); err != nil {
		fail(err)
	}
	var b [1]byte
	ctl.Read(b[:]) // until the writer closes
	for _, fd := range fds {
		syscall.Close(fd)
	}
	if sender >= 0 {
		syscall.Close(sender)
	}
}

// cpuSample reads this process's CPU time the way `ovbus bench` reads a
// server's (bench/stats), so that the floor and the servers' figures come
// from the same clock.
func cpuSample() stats.CPUSample {
	c, err := stats.ReadCPU(os.Getpid())
	if err != nil {
		fail(err)
	}
	return c
}

// median is the median of v, which it leaves as it was.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return stats.Median(s)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fanfloor:", err)
	os.Exit(1)
}
