// Package clock is a time source that tests can move: the real clock in
// production, a manual one in tests, so that schedules of seconds and
// hours (the coordination daemon's polls, heartbeats, cron ticks and run
// timeouts; the wall's beats, presence, acks and ordering window) are
// tested without sleeping. WithNow is the real clock's timers with
// another reading of the time (a node's, which its tests hold still).
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes tickers and timers.
type Clock interface {
	Now() time.Time
	// NewTicker fires every d, dropping ticks a slow reader misses, like
	// time.Ticker.
	NewTicker(d time.Duration) Ticker
	// NewTimer fires once, d from now (at once if d is not positive),
	// unless stopped first, like time.Timer.
	NewTimer(d time.Duration) Timer
	// After fires once, d from now; it cannot be stopped.
	After(d time.Duration) <-chan time.Time
}

// Timer is a time.Timer of a Clock: C fires, Stop stops it.
type Timer interface {
	C() <-chan time.Time
	Stop()
}

// Ticker is a time.Ticker of a Clock.
type Ticker = Timer

// Real is the system clock.
type Real struct{}

var _ Clock = Real{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (Real) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }
func (Real) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop()               { r.t.Stop() }

// WithNow is the real clock's tickers and timers, with now telling the
// time: a node hands its wall the node's clock this way, so that what the
// wall stamps and checks follows the node's clock (which tests move by
// hours), while its beats and timeouts run in real time.
func WithNow(now func() time.Time) Clock { return withNow{now: now} }

type withNow struct {
	Real
	now func() time.Time
}

func (w withNow) Now() time.Time { return w.now() }

// TimerNow is the time c's timers and tickers run on, to measure what
// they time (how long something has waited): c's Now, but the real time
// for a clock made WithNow, whose Now may stand still while its timers
// run.
func TimerNow(c Clock) time.Time {
	if _, ok := c.(withNow); ok {
		return time.Now()
	}
	return c.Now()
}

// Manual is a clock that moves only when Advance is called. Tickers and
// timers due during an advance fire in time order, each with its own time.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
}

var _ Clock = (*Manual)(nil)

type waiter struct {
	at     time.Time
	period time.Duration // 0: a timer
	c      chan time.Time
}

// NewManual returns a manual clock set to start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start}
}

// Now is the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// After fires once Advance has passed d (at once if d is not positive).
func (m *Manual) After(d time.Duration) <-chan time.Time {
	return m.add(d, 0).c
}

// NewTimer is After that can be stopped.
func (m *Manual) NewTimer(d time.Duration) Timer {
	return manualTimer{m, m.add(d, 0)}
}

// NewTicker fires every d of advanced time.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	return manualTimer{m, m.add(d, d)}
}

func (m *Manual) add(d, period time.Duration) *waiter {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &waiter{at: m.now.Add(d), period: period, c: make(chan time.Time, 1)}
	if d <= 0 && period == 0 {
		w.c <- m.now
		return w
	}
	m.waiters = append(m.waiters, w)
	return w
}

// Waiting is how many tickers and timers wait for an advance: a test
// moves the clock once the code under test waits on it.
func (m *Manual) Waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// Advance moves the clock d forward, firing what falls due on the way.
// A send to a reader that has not taken the previous tick is dropped.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end := m.now.Add(d)
	for {
		sort.SliceStable(m.waiters, func(i, j int) bool { return m.waiters[i].at.Before(m.waiters[j].at) })
		if len(m.waiters) == 0 || m.waiters[0].at.After(end) {
			break
		}
		w := m.waiters[0]
		m.now = w.at
		select {
		case w.c <- w.at:
		default:
		}
		if w.period > 0 {
			w.at = w.at.Add(w.period)
		} else {
			m.waiters = m.waiters[1:]
		}
	}
	m.now = end
}

func (m *Manual) remove(w *waiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, x := range m.waiters {
		if x == w {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			return
		}
	}
}

type manualTimer struct {
	m *Manual
	w *waiter
}

func (t manualTimer) C() <-chan time.Time { return t.w.c }
func (t manualTimer) Stop()               { t.m.remove(t.w) }
