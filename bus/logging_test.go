package bus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
}
