package main

// The pacing and the progress line of the long dlq commands (replay, purge).

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
)

// pacer spaces actions at least every apart (0: no spacing).
type pacer struct {
	every time.Duration
	next  time.Time
}

func (p *pacer) wait(ctx context.Context) error {
	if p.every <= 0 {
		return nil
	}
	now := time.Now()
	if p.next.IsZero() || p.next.Before(now) {
		p.next = now
	}
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	p.next = p.next.Add(p.every)
	return nil
}

// progressEvery is how often the progress line is rewritten.
const progressEvery = 500 * time.Millisecond

// progress writes "read n/total dead letters (rate/s), verb m" to w every
// progressEvery, from the first tick on (a run shorter than that prints
// nothing): rewritten in place with a carriage return on a terminal, a line
// every 10 ticks otherwise. n counts the letters the scan read of the total
// it will read (every letter, before the --error filter: the progress of
// the run), m those the command acted on; a dry run (verb "") shows n only.
type progress struct {
	w          io.Writer
	verb       string
	every      time.Duration
	n, total   atomic.Int64 // letters read, of the scan's total
	acted      atomic.Int64 // letters acted on
	start      time.Time
	tty        bool
	quit, done chan struct{}
	stopped    atomic.Bool
	printed    bool
}

// newProgress starts the progress line of a command that verb (replayed,
// purged) its letters; a dry run acts on none, and its line counts reads.
func newProgress(w io.Writer, verb string, dry bool) *progress {
	if dry {
		verb = ""
	}
	return startProgress(w, verb, progressEvery)
}

func startProgress(w io.Writer, verb string, every time.Duration) *progress {
	p := &progress{w: w, verb: verb, every: every, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	go p.run()
	return p
}

func (p *progress) setTotal(n uint64) { p.total.Store(int64(n)) }
func (p *progress) read()             { p.n.Add(1) }
func (p *progress) add(n int)         { p.acted.Add(int64(n)) }

func (p *progress) line() string {
	n, el := p.n.Load(), time.Since(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(n) / el
	}
	s := fmt.Sprintf("read %d/%d dead letters (%.0f/s)", n, p.total.Load(), rate)
	if p.verb != "" {
		s += fmt.Sprintf(", %s %d", p.verb, p.acted.Load())
	}
	return s
}

func (p *progress) run() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-p.quit:
			if p.printed {
				if p.tty {
					fmt.Fprintf(p.w, "\r%s\033[K\n", p.line())
				} else {
					fmt.Fprintln(p.w, p.line())
				}
			}
			return
		case <-t.C:
			switch {
			case p.tty:
				fmt.Fprintf(p.w, "\r%s\033[K", p.line())
				p.printed = true
			case i%10 == 0:
				fmt.Fprintln(p.w, p.line())
				p.printed = true
			}
		}
	}
}

// stop ends the progress line; later calls do nothing.
func (p *progress) stop() {
	if p.stopped.CompareAndSwap(false, true) {
		close(p.quit)
		<-p.done
	}
}
