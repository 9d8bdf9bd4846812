package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func idleMain(args []string) error {
	fs := flag.NewFlagSet("client idle", flag.ExitOnError)
	levels := fs.String("n", "5000,19000", "connection counts, ascending, comma-separated (cumulative)")
	settle := fs.Duration("settle", 5*time.Second, "wait before each RSS reading")
	noGreeting := fs.Bool("no-greeting", false, "do not wait for a greeting (echo servers)")
	concurrency := fs.Int("concurrency", 32, "connections being opened at once")
	metrics := fs.String("metrics", "", "the server's Prometheus /metrics `URL` (one target only): also print the Go runtime's memory classes per connection")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: client idle [flags] NAME=URL[@PID] ...")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	targets, err := parseTargets(fs)
	if err != nil {
		return err
	}
	if *metrics != "" && len(targets) != 1 {
		return errors.New("-metrics: name exactly one target")
	}
	var ns []int
	for _, f := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(ns) > 0 && n <= ns[len(ns)-1]) {
			return fmt.Errorf("-n %q: want ascending positive counts", *levels)
		}
		ns = append(ns, n)
	}
	limit, err := raiseFileLimit()
	if err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if want := uint64(ns[len(ns)-1]) + 64; limit < want {
		return fmt.Errorf("RLIMIT_NOFILE hard limit %d: %d connections need about %d", limit, ns[len(ns)-1], want)
	}
	fmt.Printf("%-10s  %7s  %14s  %14s  %11s  %15s  %s\n", "target", "conns", "RSS before", "RSS after", "RSS/conn",
		"since last level", "open after settle")
	for _, t := range targets {
		if t.pid <= 0 {
			return fmt.Errorf("%s: no server pid (give NAME=URL@PID)", t.name)
		}
		if err := idleRun(t, ns, *settle, !*noGreeting, *concurrency, *metrics); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return nil
}

// idleRun opens the connections of every level in turn and prints the RSS
// per connection at each level: over all connections, and over those added
// since the previous level (which leaves out a step the first ones cause,
// such as a runtime growing its heap), then where it went since before the
// first connection (memBreakdown; the Go classes from metricsURL if not
// empty). It closes them all at the end.
func idleRun(t target, levels []int, settle time.Duration, greeting bool, concurrency int, metricsURL string) error {
	time.Sleep(settle)
	before, err := rss(t.pid)
	if err != nil {
		return err
	}
	memBefore, err := readMemory(t.pid, metricsURL)
	if err != nil {
		return err
	}
	var conns []net.Conn
	prev, prevN := before, 0
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		time.Sleep(time.Second) // let the server see them go before the next target
	}()
	for _, n := range levels {
		more, err := openIdle(t.url, n-len(conns), greeting, concurrency)
		conns = append(conns, more...)
		if err != nil {
			return fmt.Errorf("after %d connections: %w", len(conns), err)
		}
		time.Sleep(settle)
		after, err := rss(t.pid)
		if err != nil {
			return err
		}
		memAfter, err := readMemory(t.pid, metricsURL)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s  %7d  %14d  %14d  %9.0f B  %13.0f B  %d\n", t.name, n, before, after,
			float64(after-before)/float64(n), float64(after-prev)/float64(n-prevN), countOpen(conns))
		fmt.Println(memBreakdown(memBefore, memAfter, n))
		prev, prevN = after, n
	}
	return nil
}

// openIdle opens n connections, each through its handshake (and greeting),
// and returns them; the server sends nothing more to an idle client, and the
// client neither reads nor writes again.
func openIdle(url string, n int, greeting bool, concurrency int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn, br, err := dial(context.Background(), url, 512)
			if err == nil && greeting {
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _, err = readFrame(br, nil)
				conn.SetReadDeadline(time.Time{})
			}
			if err != nil {
				if conn != nil {
					conn.Close()
				}
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return
			}
			conns[i] = conn
		}()
	}
	wg.Wait()
	out := conns[:0]
	for _, c := range conns {
		if c != nil {
			out = append(out, c)
		}
	}
	return out, first
}

// countOpen counts the connections the server has not closed, by peeking
// at each socket without blocking: nothing to read means open, end of file
// or an error means closed, and data (a ping the server sent) means open.
func countOpen(conns []net.Conn) int {
	open := 0
	var b [1]byte
	for _, c := range conns {
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			continue
		}
		alive := false
		rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			alive = n > 0 || errors.Is(err, syscall.EAGAIN)
			return true
		})
		if alive {
			open++
		}
	}
	return open
}
