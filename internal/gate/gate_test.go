package gate

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestCloseWaitsAndTurnsAway: Close returns once the admitted work is
// done, and nothing is admitted after it began.
func TestCloseWaitsAndTurnsAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		if !g.Enter() {
			t.Fatal("an open gate turned work away")
		}
		closed := make(chan struct{})
		go func() { g.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while work was under way")
		default:
		}
		if g.Enter() {
			t.Fatal("work admitted after Close began")
		}
		time.Sleep(time.Second)
		g.Done()
		<-closed
		g.Close() // twice is fine
	})
}
