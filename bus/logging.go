package bus

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// LevelCritical is Python's CRITICAL level as a slog level.
const LevelCritical = slog.LevelError + 4

// NewLogHandler returns a slog.Handler that writes lines the way OVOS
// services log (ovos_utils.log):
//
//	2025-01-02 15:04:05.123 - bus - INFO - Message bus service started! url=ws://127.0.0.1:8181/core
//
// The logger's name is the "logger" attribute (default "bus"); levels are
// Python's names; other attributes follow the message as key=value. The
// handler is safe for concurrent use.
func NewLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &logHandler{out: &lockedWriter{w: w}, level: level, name: "bus"}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

type logHandler struct {
	out    *lockedWriter
	level  slog.Leveler
	name   string
	attrs  string // preformatted " k=v" pairs
	prefix string // group prefix for keys, "g."
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	buf := make([]byte, 0, 128+len(r.Message))
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	buf = t.AppendFormat(buf, "2006-01-02 15:04:05.000")
	buf = append(buf, " - "...)
	buf = append(buf, h.name...)
	buf = append(buf, " - "...)
	buf = append(buf, levelName(r.Level)...)
	buf = append(buf, " - "...)
	buf = append(buf, r.Message...)
	buf = append(buf, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		buf = appendAttr(buf, h.prefix, a)
		return true
	})
	buf = append(buf, '\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := h.out.w.Write(buf)
	return err
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	var b []byte
	for _, a := range as {
		if a.Key == "logger" && h.prefix == "" {
			n.name = a.Value.String()
			continue
		}
		b = appendAttr(b, h.prefix, a)
	}
	n.attrs += string(b)
	return &n
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix += name + "."
	return &n
}

func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "DEBUG"
	case l < slog.LevelWarn:
		return "INFO"
	case l < slog.LevelError:
		return "WARNING"
	case l < LevelCritical:
		return "ERROR"
	}
	return "CRITICAL"
}

func appendAttr(b []byte, prefix string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			b = appendAttr(b, prefix+a.Key+".", g)
		}
		return b
	}
	b = append(b, ' ')
	b = append(b, prefix...)
	b = append(b, a.Key...)
	b = append(b, '=')
	var s string
	switch a.Value.Kind() {
	case slog.KindString:
		s = a.Value.String()
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			s = err.Error()
		} else {
			s = fmt.Sprint(a.Value.Any())
		}
	default:
		s = a.Value.String()
	}
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return r == '"' || r == '=' || !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// RotatingFile is an io.Writer to a log file that is rotated by size, like
// Python's RotatingFileHandler: when a write would take the file past
// MaxBytes, path.N is renamed path.N+1 (the oldest, path.Backups, removed),
// path becomes path.1 and a new path is started. It is safe for concurrent
// use.
type RotatingFile struct {
	path     string
	maxBytes int64
	backups  int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenRotatingFile opens (appending) or creates the log file at path (mode
// 0640, and so are the files rotation starts) and the directories above it.
// maxBytes <= 0 never rotates.
func OpenRotatingFile(path string, maxBytes int64, backups int) (*RotatingFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	r := &RotatingFile{path: path, maxBytes: maxBytes, backups: backups}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// logFileMode is the mode a new log file is created with: the log names
// clients, message types and, with filter, where messages go, so other users
// of the machine may not read it; the owner's group may (log readers).
const logFileMode = 0o640

func (r *RotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, logFileMode)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

// Write writes p, rotating first when p would not fit.
func (r *RotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, os.ErrClosed
	}
	if r.maxBytes > 0 && r.size > 0 && r.size+int64(len(p)) > r.maxBytes {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *RotatingFile) rotate() error {
	r.f.Close()
	r.f = nil
	if r.backups > 0 {
		os.Remove(r.path + "." + strconv.Itoa(r.backups))
		for i := r.backups - 1; i >= 1; i-- {
			os.Rename(r.path+"."+strconv.Itoa(i), r.path+"."+strconv.Itoa(i+1))
		}
		if err := os.Rename(r.path, r.path+".1"); err != nil {
			return err
		}
	} else if err := os.Truncate(r.path, 0); err != nil {
		return err
	}
	return r.open()
}

// Close closes the file.
func (r *RotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Files returns the log file and its existing backups, newest first.
func (r *RotatingFile) Files() []string {
	out := []string{r.path}
	for i := 1; i <= r.backups; i++ {
		p := r.path + "." + strconv.Itoa(i)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return slices.Clip(out)
}

// Repeated warnings are rate-limited per kind (the record's message), and so
// are the lines of other records marked with limitedAs (the INFO line of
// each close a client causes): the first warnLimit of a kind in each
// warnWindow are written, the rest are counted, and when the window is over
// one line says how many were left out. A flood of refused connections,
// dropped frames or hostile clients then costs a few lines per window
// instead of one per attempt, which matters where the log is an SD card;
// the counters in /metrics still count every one.
const (
	warnLimit  = 10
	warnWindow = 10 * time.Second
)

// warnLimiter is the state rate-limited handlers share (a logger and every
// logger derived from it with With). While some kind has left records out,
// a timer writes its summary to out when its window is over, whether or
// not anything is logged after it.
type warnLimiter struct {
	now    func() time.Time
	limit  int           // records of a kind written per window
	window time.Duration // the length of a window
	out    slog.Handler
	mu     sync.Mutex
	kinds  map[string]*warnKind
	timer  *time.Timer // armed while some kind has left records out
}

type warnKind struct {
	start      time.Time // of the current window
	written    int
	suppressed int
	level      slog.Level
	limit      *limitKind // nil: a warning, its kind the message
}

// limitKind is the kind of records below WARNING that are rate-limited all
// the same: key is the kind, what and attr say what the summary counts.
type limitKind struct {
	key, what string
	attr      slog.Attr
}

type limitKey struct{}

// limitedAs returns a context whose records (logged with Logger.Log(ctx,
// …)) are rate-limited as one kind whatever their level; the summary says
// "suppressed N <what>", with attr.
func limitedAs(key, what string, attr slog.Attr) context.Context {
	return context.WithValue(context.Background(), limitKey{}, &limitKind{key, what, attr})
}

// rateLimited is a slog.Handler that rate-limits the records at WARNING and
// above of next, and those logged with a limitedAs context.
type rateLimited struct {
	next slog.Handler
	l    *warnLimiter
}

// newRateLimited wraps h with the bus's bounds; now nil is time.Now.
func newRateLimited(h slog.Handler, now func() time.Time) *rateLimited {
	return newLimited(h, now, warnLimit, warnWindow)
}

// newLimited wraps h: limit records of a kind per window.
func newLimited(h slog.Handler, now func() time.Time, limit int, window time.Duration) *rateLimited {
	if now == nil {
		now = time.Now
	}
	return &rateLimited{next: h, l: &warnLimiter{now: now, limit: limit, window: window, out: h, kinds: map[string]*warnKind{}}}
}

// RateLimitWarnings returns h with its warnings and errors rate-limited as
// the bus's own are: the first limit records of a kind (the same message)
// in each window are written, the rest counted, and once the window is
// over one line says how many were left out. limit 0 means the bus's own
// bounds (10 per 10 s). flush writes the summaries still pending: call it
// when the component stops. A component that logs beside the bus (the
// cluster, and the NATS server it embeds) uses it, so that a fault that
// repeats costs a few lines rather than one per attempt.
func RateLimitWarnings(h slog.Handler, limit int, window time.Duration) (limited slog.Handler, flush func()) {
	if limit <= 0 {
		limit, window = warnLimit, warnWindow
	}
	rl := newLimited(h, nil, limit, window)
	return rl, rl.flush
}

func (h *rateLimited) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *rateLimited) Handle(ctx context.Context, r slog.Record) error {
	lk, _ := ctx.Value(limitKey{}).(*limitKind)
	if r.Level < slog.LevelWarn && lk == nil {
		return h.next.Handle(ctx, r)
	}
	key := r.Message
	if lk != nil {
		key = lk.key
	}
	now := h.l.now()
	summaries, write := h.l.admit(key, lk, r.Level, now)
	for _, s := range summaries {
		h.next.Handle(ctx, s)
	}
	if !write {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// admit counts a record of kind key at now and reports whether to write it,
// with the summary records of the kinds whose window is over.
func (l *warnLimiter) admit(key string, lk *limitKind, level slog.Level, now time.Time) (summaries []slog.Record, write bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	summaries = l.rollLocked(now)
	k := l.kinds[key]
	if k == nil {
		k = &warnKind{start: now, level: level, limit: lk}
		l.kinds[key] = k
	}
	if k.written < l.limit {
		k.written++
		return summaries, true
	}
	k.suppressed++
	if l.timer == nil {
		l.timer = time.AfterFunc(k.start.Add(l.window).Sub(now), l.tick)
	}
	return summaries, false
}

// tick is the timer's: it writes the summaries of the windows that are
// over, and is armed again for the next one that leaves records out.
func (l *warnLimiter) tick() {
	l.mu.Lock()
	now := l.now()
	out := l.rollLocked(now)
	l.timer = nil
	var next time.Time
	for _, k := range l.kinds {
		if end := k.start.Add(l.window); k.suppressed > 0 && (next.IsZero() || end.Before(next)) {
			next = end
		}
	}
	if !next.IsZero() {
		l.timer = time.AfterFunc(max(next.Sub(now), time.Millisecond), l.tick)
	}
	l.mu.Unlock()
	for _, r := range out {
		l.out.Handle(context.Background(), r)
	}
}

// rollLocked ends the windows that are over and returns a summary record
// for each that left records out; a kind with nothing left out is
// forgotten.
func (l *warnLimiter) rollLocked(now time.Time) []slog.Record {
	var out []slog.Record
	for _, key := range slices.Sorted(maps.Keys(l.kinds)) {
		k := l.kinds[key]
		if now.Sub(k.start) < l.window {
			continue
		}
		if k.suppressed > 0 {
			var r slog.Record
			if lk := k.limit; lk != nil {
				r = slog.NewRecord(now, k.level, fmt.Sprintf("suppressed %d %s", k.suppressed, lk.what), 0)
				r.AddAttrs(lk.attr)
			} else {
				r = slog.NewRecord(now, k.level, fmt.Sprintf("suppressed %d similar warnings", k.suppressed), 0)
				r.AddAttrs(slog.String("warning", key))
			}
			r.AddAttrs(slog.Duration("window", l.window))
			out = append(out, r)
		}
		delete(l.kinds, key)
	}
	return out
}

// flush writes the summaries of every kind that left records out, as if
// their windows were over (at Shutdown), and stops the timer.
func (h *rateLimited) flush() {
	h.l.mu.Lock()
	out := h.l.rollLocked(h.l.now().Add(h.l.window + 1))
	if h.l.timer != nil {
		h.l.timer.Stop()
		h.l.timer = nil
	}
	h.l.mu.Unlock()
	for _, r := range out {
		h.next.Handle(context.Background(), r)
	}
}

func (h *rateLimited) WithAttrs(as []slog.Attr) slog.Handler {
	return &rateLimited{next: h.next.WithAttrs(as), l: h.l}
}

func (h *rateLimited) WithGroup(name string) slog.Handler {
	return &rateLimited{next: h.next.WithGroup(name), l: h.l}
}
