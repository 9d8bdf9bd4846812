package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// IsTerminal reports whether w is a character device (a terminal), the
// condition for drawing a progress line on it.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Progress draws one self-overwriting status line on a terminal: which run
// of how many, what it is, and how far it got. A nil *Progress draws
// nothing, so callers need not check.
type Progress struct {
	w     io.Writer
	mu    sync.Mutex
	total int
	start time.Time
	label string
	step  int
	width int
}

// NewProgress returns a Progress for total runs on w, or nil when w is not
// a terminal.
func NewProgress(w io.Writer, total int) *Progress {
	if !IsTerminal(w) {
		return nil
	}
	return &Progress{w: w, total: total, start: time.Now()}
}

// Begin starts run step (0-based) described by label.
func (p *Progress) Begin(step int, label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.step, p.label = step, label
	p.mu.Unlock()
	p.Update(0, 0)
}

// Update shows done of expected units of the current run (expected 0: an
// open-ended run).
func (p *Progress) Update(done, expected int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("[%d/%d %s] %s", p.step+1, p.total, time.Since(p.start).Round(time.Second), p.label)
	if expected > 0 {
		frac := float64(done) / float64(expected)
		const bar = 20
		n := int(frac * bar)
		n = min(max(n, 0), bar)
		line += fmt.Sprintf(" [%s%s] %3.0f%%", strings.Repeat("#", n), strings.Repeat(".", bar-n), 100*frac)
	} else if done > 0 {
		line += fmt.Sprintf(" %d", done)
	}
	n := utf8.RuneCountInString(line)
	pad := ""
	if n < p.width {
		pad = strings.Repeat(" ", p.width-n)
	}
	p.width = n
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
}

// Done erases the line.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	p.width = 0
}
