package gate

import (
	"runtime"
	"sync"
	"sync/atomic"
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

// TestCloseWithinGivesUp: CloseWithin returns once the work is done, or
// false after d when it is not, still turning new work away.
func TestCloseWithinGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		g.Enter()
		start := time.Now()
		if g.CloseWithin(5 * time.Second) {
			t.Fatal("CloseWithin said the work ended while it ran")
		}
		if time.Since(start) != 5*time.Second || g.Enter() {
			t.Fatalf("gave up after %v; admits work: %v", time.Since(start), !g.Enter())
		}
		g.Done()
		synctest.Wait() // the waiting goroutine ends with the work

		var h Gate
		h.Enter()
		go func() { time.Sleep(time.Second); h.Done() }()
		if !h.CloseWithin(5*time.Second) || time.Since(start) != 6*time.Second {
			t.Fatalf("CloseWithin did not return when the work ended (at %v)", time.Since(start))
		}
	})
}

// TestCloseUnderLoad: while many goroutines enter and leave, Close returns
// only once every piece of work it admitted is done, and admits nothing
// after it returned.
func TestCloseUnderLoad(t *testing.T) {
	var g Gate
	var active atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if g.Enter() {
					active.Add(1)
					runtime.Gosched()
					active.Add(-1)
					g.Done()
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	g.Close()
	if n := active.Load(); n != 0 {
		t.Fatalf("Close returned with %d pieces of work under way", n)
	}
	if g.Enter() {
		t.Fatal("work admitted after Close")
	}
	close(stop)
	wg.Wait()
}
