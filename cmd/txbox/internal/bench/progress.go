package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress is the bar on stderr: the step of the plan being run and, for
// a drain, how far the backlog has gone. On a terminal it redraws one
// line; otherwise it prints a line when the step changes and every 10 s.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time

	mu        sync.Mutex
	step, of  int
	label     string
	done, tot int64
	lastPlain time.Time
}

func newProgress(w io.Writer, tty bool, steps int) *progress {
	return &progress{w: w, tty: tty, start: time.Now(), of: steps}
}

// begin starts the next step of the plan.
func (p *progress) begin(label string) {
	p.mu.Lock()
	p.step++
	p.label, p.done, p.tot = label, 0, 0
	p.mu.Unlock()
	p.draw(true)
}

// addSteps grows the plan (a scenario that learns its size late).
func (p *progress) addSteps(n int) {
	p.mu.Lock()
	p.of += n
	p.mu.Unlock()
}

// count reports done of total units of the current step.
func (p *progress) count(done, total int64) {
	p.mu.Lock()
	p.done, p.tot = done, total
	p.mu.Unlock()
	p.draw(false)
}

func (p *progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	const width = 24
	frac := 0.0
	if p.of > 0 {
		frac = float64(p.step-1) / float64(p.of)
		if p.tot > 0 {
			frac += float64(p.done) / float64(p.tot) / float64(p.of)
		}
	}
	frac = min(max(frac, 0), 1)
	n := int(frac * width)
	bar := strings.Repeat("#", n) + strings.Repeat(".", width-n)
	s := fmt.Sprintf("[%s] %3.0f%% %d/%d %s", bar, frac*100, p.step, p.of, p.label)
	if p.tot > 0 {
		s += fmt.Sprintf(" %d/%d", p.done, p.tot)
	}
	s += fmt.Sprintf(" (%s)", time.Since(p.start).Round(time.Second))
	return s
}

func (p *progress) draw(newStep bool) {
	l := p.line()
	if p.tty {
		if len(l) > 110 {
			l = l[:110]
		}
		fmt.Fprintf(p.w, "\r\033[K%s", l)
		return
	}
	p.mu.Lock()
	due := newStep || time.Since(p.lastPlain) >= 10*time.Second
	if due {
		p.lastPlain = time.Now()
	}
	p.mu.Unlock()
	if due {
		fmt.Fprintln(p.w, l)
	}
}

// note prints a line of its own (a result or a warning) without breaking
// the bar.
func (p *progress) note(format string, args ...any) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
	if p.tty {
		p.draw(false)
	}
}

func (p *progress) finish() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
