package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

// progressDelay is how long a backend may take before the progress line appears, and
// progressTick how often it is redrawn; a process under a test's pseudo-terminal shortens them.
var progressDelay, progressTick = time.Second, time.Second

// terminal tells whether w is a terminal: the progress line is for a person watching, never for
// a file, a pipe or a CI log (where its carriage returns would pile up). A character device is
// not enough: /dev/null is one.
var terminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressClock is the progress line's clock: the start time and a ticker (its channel and its
// stop); tests drive it by hand.
type progressClock struct {
	now       func() time.Time
	newTicker func(time.Duration) (<-chan time.Time, func())
}

var realClock = progressClock{
	now: time.Now,
	newTicker: func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTicker(d)
		return t.C, t.Stop
	},
}

// progress is one updating line on stderr while a backend answers: nothing during the first
// progressDelay, then "querying jaeger at URL… 3 s", rewritten in place (\r) every tick, and
// erased when the answer came. It is also the writer of what the command says meanwhile (-v's
// lines, warnings): the line is erased before, so a message never ends up after it, and drawn
// again at the next tick.
type progress struct {
	w      io.Writer
	label  string
	on     bool
	mu     sync.Mutex
	shown  int // the width of the line on the terminal, 0 when none is
	done   chan struct{}
	exited chan struct{}
}

// startProgress starts the line on w, when on; otherwise the progress only passes writes to w.
func startProgress(w io.Writer, label string, on bool, clk progressClock) *progress {
	p := &progress{w: w, label: trail.Escape(label), on: on}
	if !on {
		return p
	}
	p.done, p.exited = make(chan struct{}), make(chan struct{})
	start := clk.now()
	ticks, stopTicker := clk.newTicker(progressTick)
	go func() {
		defer close(p.exited)
		defer stopTicker()
		for {
			select {
			case <-p.done:
				return
			case t := <-ticks:
				if elapsed := t.Sub(start); elapsed >= progressDelay {
					p.draw(fmt.Sprintf("%s… %d s", p.label, int(elapsed/time.Second)))
				}
			}
		}
	}()
	return p
}

// progressLabel says what is being waited for, from --source.
func progressLabel(source string) string {
	if url, ok := strings.CutPrefix(source, "jaeger="); ok {
		return "querying jaeger at " + strings.TrimRight(url, "/")
	}
	return "reading " + source
}

func (p *progress) draw(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := utf8.RuneCountInString(line)
	pad := ""
	if p.shown > n { // a shorter line must not leave the end of the longer one
		pad = strings.Repeat(" ", p.shown-n) + strings.Repeat("\b", p.shown-n)
	}
	_, _ = io.WriteString(p.w, "\r"+line+pad)
	p.shown = n
}

// clear erases the line; p.mu is held.
func (p *progress) clear() {
	if p.shown > 0 {
		_, _ = io.WriteString(p.w, "\r"+strings.Repeat(" ", p.shown)+"\r")
		p.shown = 0
	}
}

// Write writes b below nothing: the line, when shown, is erased first.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	return p.w.Write(b)
}

// stop ends the line and erases it; the terminal is as it was before.
func (p *progress) stop() {
	if !p.on {
		return
	}
	close(p.done)
	<-p.exited
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}
