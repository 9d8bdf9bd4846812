package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Where a server's idle connections' memory goes: the resident pages split
// by kind (/proc/PID/status), and, for a Go server that exports them, the
// Go runtime's own memory classes (runtime/metrics /memory/classes/...,
// exported by the Prometheus Go collector as go_memory_classes_*). The
// classes count memory the runtime has mapped for each use, not all of it
// resident; the kinds count resident pages.

// memKinds are the resident kinds read from /proc/PID/status, in print order.
var memKinds = []struct{ key, name string }{
	{"RssAnon", "anonymous"},
	{"RssFile", "file-backed"},
	{"RssShmem", "shared"},
}

// goClasses groups the Go runtime's memory classes, in print order.
var goClasses = []struct {
	name    string
	metrics []string
}{
	{"heap objects", []string{"heap_objects"}},
	{"heap free and unused", []string{"heap_free", "heap_unused"}},
	{"stacks", []string{"heap_stacks", "os_stacks"}},
	{"runtime metadata", []string{"metadata_mcache_free", "metadata_mcache_inuse", "metadata_mspan_free",
		"metadata_mspan_inuse", "metadata_other"}},
	{"profiling", []string{"profiling_buckets"}},
	{"other", []string{"other"}},
}

// memSnapshot is one reading: the resident kinds, and the Go classes when
// a metrics URL was given.
type memSnapshot struct {
	kinds   map[string]int64
	classes map[string]int64 // nil: no URL; empty: the server exports none
}

// readMemory reads pid's resident kinds and, if metricsURL is not empty,
// the Go memory classes it exports.
func readMemory(pid int, metricsURL string) (memSnapshot, error) {
	s := memSnapshot{kinds: map[string]int64{}}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
			s.kinds[k] = kb << 10
		}
	}
	if metricsURL == "" {
		return s, sc.Err()
	}
	s.classes, err = goMemoryClasses(metricsURL)
	return s, err
}

// goMemoryClasses fetches a Prometheus text page and returns its
// go_memory_classes_*_bytes values by class name (heap_objects, ...): none
// from a server that does not export them (an older build).
func goMemoryClasses(url string) (map[string]int64, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		class, isClass := strings.CutPrefix(name, "go_memory_classes_")
		if !ok || !isClass {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", url, name, err)
		}
		out[strings.TrimSuffix(class, "_bytes")] = int64(v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// memBreakdown formats what changed from before to after, per connection
// of n: the resident kinds, then the Go classes when both readings have them.
func memBreakdown(before, after memSnapshot, n int) string {
	per := func(d int64) string { return fmt.Sprintf("%.0f B", float64(d)/float64(n)) }
	var b strings.Builder
	b.WriteString("  resident per connection:")
	for i, k := range memKinds {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %s", k.name, per(after.kinds[k.key]-before.kinds[k.key]))
	}
	switch {
	case before.classes == nil || after.classes == nil:
	case len(before.classes) == 0 || len(after.classes) == 0:
		b.WriteString("\n  Go runtime: the server exports no go_memory_classes_*")
	default:
		b.WriteString("\n  Go runtime, mapped per connection:")
		for i, c := range goClasses {
			var d int64
			for _, m := range c.metrics {
				d += after.classes[m] - before.classes[m]
			}
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %s %s", c.name, per(d))
		}
	}
	return b.String()
}
