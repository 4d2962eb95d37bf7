package clock

import (
	"testing"
	"time"
)

// fired reports whether c has fired, and when.
func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestManual(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewManual(t0)
	timer, stopped, tick := m.NewTimer(3*time.Second), m.NewTimer(2*time.Second), m.NewTicker(time.Second)
	if _, ok := fired(m.NewTimer(0).C()); !ok {
		t.Fatal("a timer of no duration did not fire at once")
	}
	stopped.Stop()
	m.Advance(2500 * time.Millisecond)
	if at, ok := fired(tick.C()); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("ticker: fired %v at %v, want the first tick, at 1s (the next, unread, is dropped)", ok, at)
	}
	if _, ok := fired(timer.C()); ok {
		t.Fatal("a timer fired early")
	}
	if _, ok := fired(stopped.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	m.Advance(500 * time.Millisecond)
	if at, ok := fired(timer.C()); !ok || !at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("timer: fired %v at %v, want at 3s", ok, at)
	}
	if !m.Now().Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("now %v", m.Now())
	}
}

func TestWithNow(t *testing.T) {
	at := time.Unix(42, 0)
	c := WithNow(func() time.Time { return at })
	if !c.Now().Equal(at) {
		t.Fatalf("now %v, want the given reading", c.Now())
	}
	if _, ok := <-c.NewTimer(0).C(); !ok {
		t.Fatal("the real timer did not fire")
	}
	// What its timers time is measured in real time; on another clock,
	// by its Now.
	if d := time.Since(TimerNow(c)); d < 0 || d > time.Minute {
		t.Fatalf("TimerNow of a clock made WithNow is %v from the real time", d)
	}
	m := NewManual(at)
	if !TimerNow(m).Equal(at) {
		t.Fatalf("TimerNow of a manual clock %v, want its Now", TimerNow(m))
	}
}
