//go:build linux

package main

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ovbus/ovbus/bench"
)

// The floor runs start this program again as their clients: the test binary
// plays that part when it is started so.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-steady-reader" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needUring skips where the kernel or the architecture has no io_uring
// (io_uring_disabled, seccomp, an old kernel, mips).
func needUring(t *testing.T) {
	if err := uringAvailable(); err != nil {
		if !errors.Is(err, errUringUnavailable) {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// tcpPair returns a connected pair of loopback sockets, the first
// non-blocking as the writer's are.
func tcpPair(t *testing.T) (writer, reader int) {
	lfd, port := listen()
	defer syscall.Close(lfd)
	reader, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Connect(reader, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != nil {
		t.Fatal(err)
	}
	writer, _, err = syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(writer); syscall.Close(reader) })
	return writer, reader
}

// The structures are the kernel's, byte for byte.
func TestUringLayout(t *testing.T) {
	if n := unsafe.Sizeof(uringParams{}); n != 120 {
		t.Errorf("io_uring_params: %d bytes, want 120", n)
	}
	if n := unsafe.Sizeof(uringSQE{}); n != sqeSize {
		t.Errorf("io_uring_sqe: %d bytes, want %d", n, sqeSize)
	}
	if n := unsafe.Sizeof(uringCQE{}); n != cqeSize {
		t.Errorf("io_uring_cqe: %d bytes, want %d", n, cqeSize)
	}
}

// A send through the ring behaves as write(2) on a non-blocking socket: all
// of it while the socket has room, then what fits (a short count), then
// -EAGAIN, at once and never waiting for room, which the writer's queue
// relies on; and the peer gets exactly the bytes the results count.
func TestUringSendLikeWrite(t *testing.T) {
	needUring(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w1, r1 := tcpPair(t)
	w2, r2 := tcpPair(t)
	r, err := newUring(2, []int{w1, w2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	small := []byte("hello")
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i)
	}
	results := map[int][]int{}
	reap := func(i, res int) { results[i] = append(results[i], res) }
	r.send(0, small, reap)
	r.send(1, small, reap)
	r.submit(reap)
	if len(results[0]) != 1 || results[0][0] != len(small) || len(results[1]) != 1 || results[1][0] != len(small) {
		t.Fatalf("two sends of %d bytes: results %v", len(small), results)
	}
	if r.enters != 1 || r.submitted != 2 {
		t.Errorf("%d io_uring_enter calls for %d sends; want 1 for 2", r.enters, r.submitted)
	}
	// Nobody reads socket 0: it fills.
	sent, short := len(small), false
	for k := 0; k < 64; k++ {
		results[0] = nil
		r.send(0, big, reap)
		r.submit(reap)
		res := results[0][0]
		if res == -int(syscall.EAGAIN) {
			if !short {
				t.Fatal("-EAGAIN before any short send")
			}
			break
		}
		if res <= 0 || res > len(big) {
			t.Fatalf("send %d: result %d", k, res)
		}
		short = short || res < len(big)
		sent += res
		if k == 63 {
			t.Fatalf("64 MiB went into a socket nobody reads")
		}
	}
	if got := sendResult(-int(syscall.EAGAIN)); got != 0 {
		t.Errorf("sendResult(-EAGAIN) = %d, want 0", got)
	}
	syscall.Shutdown(w1, syscall.SHUT_WR)
	buf := make([]byte, 1<<20)
	got := 0
	for {
		n, err := syscall.Read(r1, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		got += n
	}
	if got != sent {
		t.Errorf("the peer read %d bytes; the sends' results add up to %d", got, sent)
	}
	if n, err := syscall.Read(r2, buf); err != nil || string(buf[:n]) != string(small) {
		t.Errorf("the other socket read %q (%v)", buf[:n], err)
	}
}

// Every mode relays every frame of a run to every client, large binary
// frames included, through send buffers small enough that those fill them,
// so the queues and the sends that drain them run too: the run ends only
// when each client has every byte.
func TestSteadyFloorModes(t *testing.T) {
	sc := bench.SteadyScenario{Clients: 3, Rate: 100, BinaryShare: 0.05}
	for _, mode := range steadyModes {
		t.Run(mode, func(t *testing.T) {
			if mode == "steady-uring" {
				needUring(t)
			}
			f := steadyFloorRun(sc, time.Second, mode, steadyOptions{sndbuf: 16 << 10})
			if f.frames != 100 || f.perDelivery <= 0 {
				t.Fatalf("%d frames, %.3f µs per delivery", f.frames, f.perDelivery)
			}
			if f.full == 0 {
				t.Error("no send found its socket full")
			}
			if f.sends < 0.1 || f.syscalls <= 0 {
				t.Errorf("%.3f sends and %.3f system calls per delivery", f.sends, f.syscalls)
			}
			if uring := mode == "steady-uring"; uring != (f.enters > 0) || uring && f.enters > f.sends {
				t.Errorf("%.3f io_uring_enter calls for %.3f sends per delivery", f.enters, f.sends)
			}
		})
	}
}
