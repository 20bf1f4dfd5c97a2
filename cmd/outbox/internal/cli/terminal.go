package cli

import (
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress shows a running count and rate on one line of a terminal. On
// anything else it prints nothing, so logs and pipes stay clean.
type progress struct {
	w       io.Writer
	verb    string // "purged", "retried"
	total   int64  // events expected, 0 when unknown: with it, the line shows an ETA
	start   time.Time
	last    time.Time
	printed bool
}

// newProgress returns a progress line on w, or an inert one when w is not
// a terminal.
func newProgress(w io.Writer, verb string) *progress {
	if !isTerminal(w) {
		return &progress{}
	}
	now := time.Now()
	return &progress{w: w, verb: verb, start: now}
}

// setTotal says how many events the operation expects, so the line shows
// how many are left and when it should end.
func (p *progress) setTotal(n int64) { p.total = n }

// update shows the total so far; it redraws at most ten times a second.
func (p *progress) update(done int64) {
	if p.w == nil {
		return
	}
	now := time.Now()
	if p.printed && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.printed = now, true
	rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-3)
	if p.total > 0 && done <= p.total && rate > 0 {
		eta := time.Duration(float64(p.total-done) / rate * float64(time.Second)).Round(time.Second)
		notef(p.w, "\r\033[K%s %d of %d events (%.0f/s, ETA %s)", p.verb, done, p.total, rate, eta)
		return
	}
	notef(p.w, "\r\033[K%s %d events (%.0f/s)", p.verb, done, rate)
}

// done clears the progress line.
func (p *progress) done() {
	if p.w != nil && p.printed {
		notef(p.w, "\r\033[K")
	}
}
