// Package clock is the time source of the coordination daemon: the real
// clock in production, a manual one in tests, so that schedules of seconds
// and hours (polls, heartbeats, cron ticks, run timeouts) are tested without
// sleeping.
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
	// After fires once, d from now.
	After(d time.Duration) <-chan time.Time
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
type Real struct{}

var _ Clock = Real{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (Real) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

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

// After fires once Advance has passed d.
func (m *Manual) After(d time.Duration) <-chan time.Time {
	return m.add(d, 0).c
}

// NewTicker fires every d of advanced time.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	return manualTicker{m, m.add(d, d)}
}

func (m *Manual) add(d, period time.Duration) *waiter {
	m.mu.Lock()
	w := &waiter{at: m.now.Add(d), period: period, c: make(chan time.Time, 1)}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()
	return w
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

type manualTicker struct {
	m *Manual
	w *waiter
}

func (t manualTicker) C() <-chan time.Time { return t.w.c }
func (t manualTicker) Stop()               { t.m.remove(t.w) }
