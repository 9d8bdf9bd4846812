package stats

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const procNetTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1FF5 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1FF5 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:D2F0 0100007F:1FF5 01 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:1FF6 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0
`

const procNetTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1FF5 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 666 1 0000000000000000 100 0 0 10 0
`

func TestParseProcNetTCP(t *testing.T) {
	tests := []struct {
		name    string
		table   string
		port    int
		want    []uint64
		wantErr bool
	}{
		{name: "v4 listener, established ignored", table: procNetTCP, port: 8181, want: []uint64{111}},
		{name: "v4 other port", table: procNetTCP, port: 22, want: []uint64{222}},
		{name: "client side of a connection is not a listener", table: procNetTCP, port: 0xD2F0, want: nil},
		{name: "inode 0 skipped", table: procNetTCP, port: 8182, want: nil},
		{name: "v6", table: procNetTCP6, port: 8181, want: []uint64{555}},
		{name: "v6 port 80", table: procNetTCP6, port: 80, want: []uint64{666}},
		{name: "nothing", table: procNetTCP, port: 9999, want: nil},
		{name: "header only", table: "  sl  local_address\n", port: 1, want: nil},
		{name: "bad port", table: "hdr\n 0: 0100007F:ZZZZ 00000000:0000 0A 0 0 0 0 0 1\n", port: 1, wantErr: true},
		{name: "bad inode", table: "hdr\n 0: 0100007F:0001 00000000:0000 0A 0 0 0 0 0 x\n", port: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcNetTCP(strings.NewReader(tt.table), tt.port)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// fakeProc lays out a /proc-like tree: net/tcp, net/tcp6 and, per pid, fd
// symlinks to the given targets.
func fakeProc(t *testing.T, tcp, tcp6 string, fds map[string][]string) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "net"), 0o755))
	must(os.WriteFile(filepath.Join(root, "net", "tcp"), []byte(tcp), 0o644))
	if tcp6 != "" {
		must(os.WriteFile(filepath.Join(root, "net", "tcp6"), []byte(tcp6), 0o644))
	}
	for pid, targets := range fds {
		dir := filepath.Join(root, pid, "fd")
		must(os.MkdirAll(dir, 0o755))
		for i, tgt := range targets {
			must(os.Symlink(tgt, filepath.Join(dir, string(rune('0'+i)))))
		}
	}
	must(os.MkdirAll(filepath.Join(root, "self"), 0o755)) // not a pid: skipped
	return root
}

func TestListeningPIDFake(t *testing.T) {
	fds := map[string][]string{
		"1":   {"/dev/null", "socket:[999]"},
		"77":  {"/dev/null", "pipe:[12]", "socket:[111]"},
		"120": {"socket:[555]"},
		"300": {"socket:[111]"}, // a forked child sharing the listener
		"400": {"socket:[666]"},
	}
	tests := []struct {
		name    string
		tcp6    string
		port    int
		want    int
		wantErr error
	}{
		{name: "v4 listener, lowest pid of those sharing it", port: 8181, want: 77},
		{name: "no such listener", port: 9999, wantErr: ErrNotFound},
		{name: "listener whose socket no process shows", port: 22, wantErr: ErrNotFound},
		{name: "v6 listener", tcp6: procNetTCP6, port: 80, want: 400},
		{name: "no tcp6 file is fine", port: 8181, want: 77},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeProc(t, procNetTCP, tt.tcp6, fds)
			got, err := listeningPID(root, tt.port)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("pid = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestListeningPIDLive(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp")
	}
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			port := reservePort(t, network)
			pid, err := ListeningPID(port)
			if err != nil {
				t.Fatal(err)
			}
			if pid != os.Getpid() {
				t.Errorf("ListeningPID(%d) = %d, want %d", port, pid, os.Getpid())
			}
		})
	}
}

// reservePort listens on a free port on the loopback address of network and
// also on the same port of the other family, so that no other process (test
// packages run in parallel) can listen on that port number anywhere:
// ListeningPID matches by port alone. The listeners close with the test.
func reservePort(t *testing.T, network string) int {
	t.Helper()
	primary, other := "127.0.0.1", "[::1]"
	if network == "tcp6" {
		primary, other = "[::1]", "127.0.0.1"
	}
	for range 50 {
		ln, err := net.Listen(network, primary+":0")
		if err != nil {
			t.Skip(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln2, err := net.Listen("tcp", net.JoinHostPort(strings.Trim(other, "[]"), strconv.Itoa(port)))
		if err != nil {
			ln.Close()
			if errors.Is(err, syscall.EADDRINUSE) {
				continue // another process holds the port on the other family
			}
			// No such family here (e.g. no IPv6): nobody else can hold it either.
			t.Cleanup(func() { ln.Close() })
			return port
		}
		t.Cleanup(func() { ln.Close(); ln2.Close() })
		return port
	}
	t.Fatal("no port free on both loopback addresses")
	return 0
}
