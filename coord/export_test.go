package coord

import "net/http"

// HandleForTest adds a route to a daemon's table, for tests of what every
// route shares (errors, panics).
func (d *Daemon) HandleForTest(pattern string, h http.Handler) { d.mux.Handle(pattern, h) }

// RoutesForTest lists the patterns of the daemon's route table.
func (d *Daemon) RoutesForTest() []string { return d.mux.Patterns() }
