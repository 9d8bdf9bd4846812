package main

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// notifySocket is a fake systemd notification socket ($NOTIFY_SOCKET of a Type=notify unit).
type notifySocket struct {
	t    *testing.T
	conn *net.UnixConn
}

func listenNotify(t *testing.T, name string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &notifySocket{t: t, conn: conn}
}

// next returns the next datagram, failing the test after 10 s.
func (n *notifySocket) next() string {
	n.t.Helper()
	n.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 256)
	k, err := n.conn.Read(b)
	if err != nil {
		n.t.Fatalf("no notification: %v", err)
	}
	return string(b[:k])
}

// The notify protocol of a Type=notify unit: READY=1 once the port accepts connections,
// RELOADING=1 and READY=1 around a SIGHUP, STOPPING=1 when the shutdown begins.
func TestServeNotifiesSystemd(t *testing.T) {
	dir := isolateConfig(t)
	writeUserConfig(t, dir, `{"websocket": {"port": 0}}`)
	sigs := make(chan os.Signal, 1)
	serveSignals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	t.Cleanup(func() { serveSignals = defaultServeSignals })
	name := filepath.Join(dir, "notify")
	notify := listenNotify(t, name)
	t.Setenv("NOTIFY_SOCKET", name)

	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() { code <- runServe(nil, &stdout, &stderr) }()

	if got := notify.next(); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	// READY=1 comes after the bind: the logged address accepts a connection now.
	addr := waitFor(t, &stdout, `Message bus service started! url=ws://(\S+?)/core`)[1]
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("READY=1 sent, but %s refuses connections: %v", addr, err)
	}
	c.Close()

	sigs <- syscall.SIGHUP
	if got := notify.next(); got != "RELOADING=1" {
		t.Errorf("on SIGHUP %q, want RELOADING=1", got)
	}
	if got := notify.next(); got != "READY=1" {
		t.Errorf("after the reload %q, want READY=1", got)
	}

	sigs <- syscall.SIGTERM
	if got := notify.next(); got != "STOPPING=1" {
		t.Errorf("on SIGTERM %q, want STOPPING=1", got)
	}
	select {
	case got := <-code:
		if got != 0 {
			t.Errorf("exit %d, stderr %s", got, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// An abstract socket ("@name", as systemd may pass) and no socket at all.
func TestSdNotifyAbstractAndUnset(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract sockets are Linux's")
	}
	name := "@ovbus-test-" + filepath.Base(t.TempDir())
	notify := listenNotify(t, "\x00"+name[1:])
	t.Setenv("NOTIFY_SOCKET", name)
	sdNotify("READY=1")
	if got := notify.next(); got != "READY=1" {
		t.Errorf("abstract socket got %q", got)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	sdNotify("READY=1") // nothing to do, and no panic
}
