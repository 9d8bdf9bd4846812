package stats

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNotFound is returned by ListeningPID when no process is found.
var ErrNotFound = errors.New("stats: no process listens on that port")

// tcpListen is the st column of /proc/net/tcp for TCP_LISTEN.
const tcpListen = "0A"

// ListeningPID returns the pid of the process with a socket listening on TCP
// port port (any address, IPv4 or IPv6). It reads /proc/net/tcp and
// /proc/net/tcp6 for the listening socket's inode, then looks for a
// /proc/<pid>/fd/* link to "socket:[inode]". Other users' processes are only
// visible to root; those that cannot be read are skipped.
func ListeningPID(port int) (int, error) { return listeningPID("/proc", port) }

func listeningPID(proc string, port int) (int, error) {
	var inodes []uint64
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		f, err := os.Open(filepath.Join(proc, name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // no IPv6
			}
			return 0, err
		}
		in, err := ParseProcNetTCP(f, port)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		inodes = append(inodes, in...)
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("port %d: %w", port, ErrNotFound)
	}
	return pidOfSocket(proc, inodes)
}

// ParseProcNetTCP returns the inodes of the sockets in a /proc/net/tcp or
// /proc/net/tcp6 table that are in the LISTEN state on port.
func ParseProcNetTCP(r io.Reader, port int) ([]uint64, error) {
	sc := bufio.NewScanner(r)
	var inodes []uint64
	first := true
	for sc.Scan() {
		if first { // header: "sl local_address rem_address st ..."
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		if len(f) < 10 {
			continue
		}
		if f[3] != tcpListen {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			return nil, fmt.Errorf("malformed local address %q", f[1])
		}
		p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err != nil {
			return nil, fmt.Errorf("malformed local port %q: %w", f[1], err)
		}
		if int(p) != port {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed inode %q: %w", f[9], err)
		}
		if ino != 0 {
			inodes = append(inodes, ino)
		}
	}
	return inodes, sc.Err()
}

// pidOfSocket walks proc/<pid>/fd for a link to one of the socket inodes and
// returns the lowest such pid (the listener's parent when a socket is shared
// after fork).
func pidOfSocket(proc string, inodes []uint64) (int, error) {
	want := make(map[string]bool, len(inodes))
	for _, in := range inodes {
		want["socket:["+strconv.FormatUint(in, 10)+"]"] = true
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		dir := filepath.Join(proc, strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err == nil && want[l] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("socket inode %v: %w", inodes, ErrNotFound)
}
