// Package gate counts work under way that a shutdown waits for, and turns
// new work away once the shutdown began: stream handlers, HTTP requests.
package gate

import (
	"sync"
	"time"
)

// Gate admits work until Close. The zero value is open.
type Gate struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Enter admits one piece of work, which calls Done when it ends; false
// once Close was called (the work must not start).
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// Done ends a piece of work Enter admitted.
func (g *Gate) Done() { g.wg.Done() }

// Close turns away all work from now on and waits for the work admitted.
// It is safe to call twice.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
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
