// Package gate counts work under way that a shutdown waits for, and turns
// new work away once the shutdown began: stream handlers, HTTP requests.
package gate

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Gate admits work until Close. The zero value is open. Entering and
// leaving cost one atomic addition each, no lock: every request of the
// bridge passes a gate, on every core at once.
type Gate struct {
	// n counts the work under way; Close adds closed to it, so that it
	// is negative from then on, and exactly closed once no work is left.
	n        atomic.Int64
	shut     atomic.Bool // Close was called
	initIdle sync.Once
	markIdle sync.Once
	idle     chan struct{} // closed once no work is left after Close
}

const closed = math.MinInt64 / 2

// Enter admits one piece of work, which calls Done when it ends; false
// once Close was called (the work must not start).
func (g *Gate) Enter() bool {
	if g.n.Add(1) > 0 {
		return true
	}
	g.Done() // turned away: undo the count
	return false
}

// Done ends a piece of work Enter admitted.
func (g *Gate) Done() {
	if g.n.Add(-1) == closed {
		g.markIdle.Do(func() { close(g.idleChan()) })
	}
}

func (g *Gate) idleChan() chan struct{} {
	g.initIdle.Do(func() { g.idle = make(chan struct{}) })
	return g.idle
}

// Close turns away all work from now on and waits for the work admitted.
// It is safe to call twice.
func (g *Gate) Close() {
	idle := g.idleChan()
	if g.shut.CompareAndSwap(false, true) && g.n.Add(closed) == closed {
		g.markIdle.Do(func() { close(idle) })
	}
	<-idle
}

// CloseWithin is Close that waits at most d: it reports whether the work
// admitted ended by then. Work that outlives it (a handler that ignores
// its context, say) must not hold up a shutdown for ever.
func (g *Gate) CloseWithin(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		g.Close()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
