package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What this command reads from /proc, written apart from ovbus's bench/stats
// so that the cross-check shares no code with the client it checks.

// listeningPID returns the process listening on rawURL's TCP port, or 0.
func listeningPID(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"ws": "80", "wss": "443"}[u.Scheme]
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	want := fmt.Sprintf(":%04X", p)
	inodes := map[string]bool{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(name)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// local_address rem_address st ... inode is field 9; st 0A is LISTEN.
			if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && inodes[l] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}

// serverCPU is the CPU time of every thread of pid, from schedstat (ns).
func serverCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		ns, err := strconv.ParseInt(string(bytes.Fields(b)[0]), 10, 64)
		if err == nil {
			sum += ns
		}
	}
	return time.Duration(sum), len(files) > 0
}

// sleep sleeps for d in nanosleep(2): a Go timer fires when the idle
// runtime's epoll_wait returns, on the millisecond (golang/go#53824), which
// would turn an even schedule into bursts.
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// selfCPU is this process's user + system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss returns the resident set of pid in bytes (VmRSS of /proc/PID/status).
func rss(pid int) (int64, error) {
	m, err := readMemory(pid, "")
	if err != nil {
		return 0, err
	}
	r, ok := m.kinds["VmRSS"]
	if !ok {
		return 0, fmt.Errorf("pid %d: no VmRSS", pid)
	}
	return r, nil
}

// raiseFileLimit sets RLIMIT_NOFILE's soft limit to its hard limit and
// returns the new soft limit.
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}
