//go:build unix

// Command sendcopy measures what the kernel's copy of a large send costs
// depending on how the bytes are laid out in memory: the echo of a 1 MiB
// WebSocket message, reduced to its system calls. A client process (this
// program run again with -client) sends N bytes over loopback TCP; the
// server reads them into one buffer and sends them back behind a frame
// header in one of several ways, and reports its own CPU time (getrusage,
// every thread of this process; the client is another process) per echo.
//
//	go run ./bench/cmd/sendcopy [-size 1048576] [-echoes 400] [-repeat 5] [-at 0]
//
// Layouts (the header is 10 bytes, as for a WebSocket frame over 64 KiB):
//
//	writev-h10   writev(header, payload): ws before staged writes
//	writev-h16   writev(16 bytes, payload): the same with a 16-byte first
//	             part, so the payload has the same offset modulo 16 in the
//	             stream as in memory
//	copy         copy header and payload into another buffer, then write it:
//	             ws now (writeStaged, a payload up to its 1 MiB chunk)
//	copy-256k    the same through the buffer 256 KiB of payload at a time,
//	copy-128k    one write each (writeStaged with a smaller stageChunk)
//	in-place     write(header, payload) as one buffer: the header written
//	             into the 10 bytes in front of where the read put the payload
//
// The payload is read to the start of a page in every layout (-at 0), as
// into a large buffer of Go's own, or -at bytes into one; the copy's buffer
// starts at the start of a page.
//
// The layouts run interleaved, repeat times each, and the medians are
// printed. Pin the two processes apart for steady figures (taskset -c 0 for
// this one; the client follows -client-cpu when taskset is installed).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"
	"unsafe"
)

var layouts = []string{"writev-h10", "writev-h16", "copy", "in-place", "copy-256k", "copy-128k"}

func main() {
	size := flag.Int("size", 1<<20, "payload bytes per echo")
	echoes := flag.Int("echoes", 400, "echoes per layout and repeat")
	repeat := flag.Int("repeat", 5, "runs of every layout, interleaved")
	at := flag.Int("at", 0, "offset of the read payload from the start of a page (0-4095)")
	client := flag.String("client", "", "run as the client of the server at `ADDR` (internal)")
	clientCPU := flag.String("client-cpu", "1", "CPU list for the client process (taskset), empty for none")
	flag.Parse()
	if *client != "" {
		runClient(*client, *size)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	args := []string{"-client", ln.Addr().String(), "-size", fmt.Sprint(*size)}
	cmd := exec.Command(self, args...)
	if _, err := exec.LookPath("taskset"); err == nil && *clientCPU != "" {
		cmd = exec.Command("taskset", append([]string{"-c", *clientCPU, self}, args...)...)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	c, err := ln.Accept()
	if err != nil {
		fail(err)
	}
	s := newServer(c.(*net.TCPConn), *size, *at%4096)
	per := map[string][]float64{}
	for r := 0; r < *repeat; r++ {
		for _, l := range layouts {
			per[l] = append(per[l], s.run(l, *echoes))
		}
	}
	c.Close()
	cmd.Wait()
	fmt.Printf("# sendcopy: %d-byte echoes over loopback TCP, payload read %d bytes into a page, %d per run, %d runs of each layout, interleaved\n", *size, *at%4096, *echoes, *repeat)
	fmt.Printf("%-12s %18s   %s\n", "layout", "server µs/echo", "runs")
	for _, l := range layouts {
		v := per[l]
		m := slices.Clone(v)
		slices.Sort(m)
		fmt.Printf("%-12s %18.1f   %v\n", l, m[len(m)/2], round(v))
	}
}

type server struct {
	c    *net.TCPConn
	size int
	in   []byte // the read buffer: the payload at in[16:], at bytes into a page
	out  []byte // the copy's buffer, from the start of a page
	hdr  []byte
}

func newServer(c *net.TCPConn, size, at int) *server {
	return &server{c: c, size: size, in: pageAt(size+16, 16, at), out: pageAt(size+16, 0, 0), hdr: make([]byte, 16)}
}

// pageAt returns n bytes whose byte at off is at bytes into a page.
func pageAt(n, off, at int) []byte {
	const page = 4096
	b := make([]byte, n+2*page)
	skip := ((page-int(uintptr(unsafe.Pointer(&b[off]))%page))%page + at) % page
	return b[skip : skip+n]
}

// run does n echoes in layout l and returns the process's CPU time per echo
// in µs. The client sends the next message only after the whole echo came
// back: size+10 bytes in every layout (writev-h16 leaves out the last 6 of
// the payload).
func (s *server) run(l string, n int) float64 {
	msg := s.in[16:]
	t0 := cpuTime()
	for range n {
		if _, err := io.ReadFull(s.c, msg); err != nil {
			fail(err)
		}
		var err error
		switch l {
		case "writev-h10":
			b := net.Buffers{s.hdr[:10], msg}
			_, err = b.WriteTo(s.c)
		case "writev-h16":
			b := net.Buffers{s.hdr[:16], msg[:s.size-6]}
			_, err = b.WriteTo(s.c)
		case "copy":
			copy(s.out, s.hdr[:10])
			copy(s.out[10:], msg)
			_, err = s.c.Write(s.out[:s.size+10])
		case "in-place":
			copy(s.in[6:16], s.hdr[:10])
			_, err = s.c.Write(s.in[6:])
		case "copy-256k":
			err = s.staged(msg, 256<<10)
		case "copy-128k":
			err = s.staged(msg, 128<<10)
		}
		if err != nil {
			fail(err)
		}
	}
	return float64((cpuTime() - t0).Nanoseconds()) / 1e3 / float64(n)
}

// staged writes the header and then msg through s.out, chunk bytes of msg
// a write, as ws's writeStaged does.
func (s *server) staged(msg []byte, chunk int) error {
	b := append(s.out[:0], s.hdr[:10]...)
	for {
		n := min(len(msg), chunk)
		b = append(b, msg[:n]...)
		msg = msg[n:]
		if _, err := s.c.Write(b); err != nil || len(msg) == 0 {
			return err
		}
		b = s.out[:0]
	}
}

func runClient(addr string, size int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fail(err)
	}
	out := make([]byte, size)
	in := make([]byte, size+10)
	for {
		if _, err := c.Write(out); err != nil {
			return
		}
		if _, err := io.ReadFull(c, in); err != nil {
			return
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func round(v []float64) []string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return s
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sendcopy:", err)
	os.Exit(1)
}
