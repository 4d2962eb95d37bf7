// Package gate counts work under way that a shutdown waits for, and turns
// new work away once the shutdown began: stream handlers, HTTP requests.
package gate

import "sync"

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
