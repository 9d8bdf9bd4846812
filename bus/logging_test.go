package bus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	log := slog.New(NewLogHandler(&buf, lv)).With("logger", "bus")
	log.Info("Message bus service started!", "url", "ws://127.0.0.1:8181/core")
	log.Warn("Closing slow consumer", "remote", "127.0.0.1:5", "lag_messages", 7, "error", errors.New("two words"))
	log.Debug("hidden")
	lv.Set(slog.LevelDebug)
	log.Debug("type source: []\nSESSION: None")
	log.Log(context.Background(), LevelCritical, "bad")
	want := []string{
		`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} - bus - INFO - Message bus service started! url=ws://127.0.0.1:8181/core$`,
		`^.* - bus - WARNING - Closing slow consumer remote=127.0.0.1:5 lag_messages=7 error="two words"$`,
		`^.* - bus - DEBUG - type source: \[\]$`,
		`^SESSION: None$`,
		`^.* - bus - CRITICAL - bad$`,
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d: %q does not match %s", i, lines[i], re)
		}
	}
}

func TestRotatingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state", "bus.log")
	r, err := OpenRotatingFile(p, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	line := []byte(strings.Repeat("x", 39) + "\n") // 40 bytes: two lines per file
	for range 9 {
		if _, err := r.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(r.Files()); got != 3 {
		t.Fatalf("files %v, want the log and 2 backups", r.Files())
	}
	for _, f := range r.Files() {
		st, err := os.Stat(f)
		if err != nil || st.Size() > 100 {
			t.Fatalf("%s: %v, %d bytes", f, err, st.Size())
		}
	}
	if _, err := os.Stat(p + ".3"); err == nil {
		t.Fatal("more backups than asked for")
	}
	// The log, and every file rotation started, may not be read by other users.
	if runtime.GOOS != "windows" {
		for _, f := range r.Files() {
			if st, err := os.Stat(f); err != nil || st.Mode().Perm()&0o137 != 0 {
				t.Errorf("%s: mode %v (%v), want 0640 or less", f, st.Mode().Perm(), err)
			}
		}
	}
}

// countingHandler records the messages it is given.
type countingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "warning" {
			line += " (" + a.Value.String() + ")"
		}
		return true
	})
	h.msgs = append(h.msgs, line)
	return nil
}

// count returns how many messages are msg (or, with prefix, begin with it).
func (h *countingHandler) count(msg string, prefix bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if m == msg || prefix && strings.HasPrefix(m, msg) {
			n++
		}
	}
	return n
}

func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestWarningsRateLimited: a flood of one warning writes warnLimit lines per
// window and then one summary; other kinds and other levels are not held
// back.
func TestWarningsRateLimited(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := &countingHandler{}
	rl := newRateLimited(out, func() time.Time { return now })
	log := slog.New(rl).With("logger", "bus")
	for range 1000 {
		log.Warn("Refused connection", "remote", "x")
	}
	log.Warn("Dropped message")
	for range 100 {
		log.Info("Client connected")
	}
	count := func(msg string) int { return out.count(msg, false) }
	if n := count("Refused connection"); n != warnLimit {
		t.Fatalf("%d refused lines in the first window, want %d", n, warnLimit)
	}
	if count("Dropped message") != 1 || count("Client connected") != 100 {
		t.Fatalf("other kinds or levels held back: %q", out.msgs[warnLimit:warnLimit+3])
	}
	now = now.Add(warnWindow)
	log.Warn("Refused connection")
	if n := count("suppressed 990 similar warnings (Refused connection)"); n != 1 {
		t.Fatalf("no summary of the 990 left out: %q", out.msgs[len(out.msgs)-3:])
	}
	if n := count("Refused connection"); n != warnLimit+1 {
		t.Fatalf("the new window does not write: %d", n)
	}
	for range 5 {
		log.Warn("Refused connection")
	}
	rl.flush() // Shutdown's: the last window's count is not lost
	if n := count("Refused connection"); n != warnLimit+1+5 {
		t.Fatalf("%d lines", n)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	for _, m := range out.msgs {
		if strings.HasPrefix(m, "suppressed 0") {
			t.Fatalf("an empty summary: %q", m)
		}
	}
}

// TestRefusedConnectionsDoNotFloodTheLog: 200 refused attempts write at most
// warnLimit WARNING lines; the metric counts all of them.
func TestRefusedConnectionsDoNotFloodTheLog(t *testing.T) {
	out := &countingHandler{}
	s, err := New(Options{Logger: slog.New(out), Auth: Auth{Required: true, Tokens: map[string]Permissions{"secret": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		w := &recorder{h: http.Header{}, body: &bytes.Buffer{}}
		s.ServeHTTP(w, httpGet(t, "/core?token=wrong"))
	}
	out.mu.Lock()
	n := len(out.msgs)
	out.mu.Unlock()
	if n > warnLimit {
		t.Fatalf("%d log lines for 200 refused attempts", n)
	}
	if m := scrape(t, s); !strings.Contains(m, `ovbus_rejected_total{reason="auth"} 200`) {
		t.Fatalf("refusals not all counted:\n%s", grep(m, "rejected"))
	}
}

// TestLimitedRecordsAndTimedSummary: records logged with a limitedAs context
// are held back like warnings whatever their level, each kind on its own,
// and once the window is over the summary is written without waiting for
// another record (a storm that stops still says how much it left out).
func TestLimitedRecordsAndTimedSummary(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	out := &countingHandler{}
	rl := newRateLimited(out, func() time.Time { return time.Unix(0, clock.Load()) })
	rl.l.window = 20 * time.Millisecond // the timer's real wait; the window's end is the fake clock's
	log := slog.New(rl)
	proto := limitedAs("close protocol_error", "more closes", slog.String("reason", "protocol_error"))
	oversize := limitedAs("close oversize", "more closes", slog.String("reason", "oversize"))
	for range 100 {
		log.Log(proto, slog.LevelInfo, "Closing client")
	}
	log.Log(oversize, slog.LevelInfo, "Closing client")
	for range 20 {
		log.Info("Client connected")
	}
	count := func(prefix string) int { return out.count(prefix, true) }
	if n := count("Closing client"); n != warnLimit+1 {
		t.Fatalf("%d close lines, want %d of one kind and 1 of the other", n, warnLimit+1)
	}
	if n := count("Client connected"); n != 20 {
		t.Fatalf("unmarked INFO lines held back: %d of 20", n)
	}
	clock.Add(int64(time.Minute)) // the window is over: the timer writes the summary
	waitFor(t, "the summary", 10*time.Second, func() bool { return count("suppressed 90 more closes") == 1 })
	if n := count("suppressed"); n != 1 {
		t.Fatalf("%d summaries, want 1", n)
	}
}
