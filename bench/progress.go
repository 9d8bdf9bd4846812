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

// Progress shows which run of how many is going, what it is, and how far it
// got: on a terminal as one self-overwriting status line; elsewhere (a log
// file, a pipe, CI) as whole lines, one every LineEvery at most. A nil
// *Progress shows nothing, so callers need not check.
type Progress struct {
	w     io.Writer
	mu    sync.Mutex
	total int
	start time.Time
	label string
	step  int
	width int
	lines bool      // not a terminal: whole lines
	last  time.Time // when the last line was written (lines mode)
}

// LineEvery is the least time between two progress lines on a writer that is not a terminal.
const LineEvery = 5 * time.Second

// NewProgress returns a Progress for total runs on w.
func NewProgress(w io.Writer, total int) *Progress {
	return &Progress{w: w, total: total, start: time.Now(), lines: !IsTerminal(w)}
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
	if p.lines {
		if now := time.Now(); p.last.IsZero() || now.Sub(p.last) >= LineEvery {
			p.last = now
			fmt.Fprintln(p.w, line)
		}
		return
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
	if p.lines {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	p.width = 0
}
