package cli

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/evoq/evoq/controller"
)

// liveLine redraws one status line on a terminal.
type liveLine struct {
	mu sync.Mutex
	w  io.Writer
}

// show redraws the line with p.
func (l *liveLine) show(p controller.Progress) {
	best := "-"
	if p.Best != nil {
		best = fmt.Sprintf("%.4f", *p.Best)
	}
	eta := "-"
	if p.ETA > 0 {
		eta = p.ETA.Round(time.Second).String()
	}
	stopped := ""
	if p.EarlyStop {
		stopped = fmt.Sprintf(" (%d stopped early)", p.Stopped)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "\r\033[K%d/%d evaluations%s  %d/%d slots busy  best %s  %.1f/s  ETA %s",
		p.Evaluations, p.Budget, stopped, p.Busy, p.Slots, best, p.Rate, eta)
}

// done ends the line.
func (l *liveLine) done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprint(l.w, "\r\033[K")
}
