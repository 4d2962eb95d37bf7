// Package nonces remembers the nonces of signed requests for as long as
// their signatures verify, so that a request seen on the way cannot be
// made again, holding at most a fixed number at once.
package nonces

import (
	"errors"
	"sync"
	"time"
)

var (
	// ErrReused: the nonce was claimed before, within the window.
	ErrReused = errors.New("nonces: nonce already used")
	// ErrFull: the memory holds its maximum of nonces, none old enough to
	// forget; the request must wait, since forgetting one would let it be
	// replayed.
	ErrFull = errors.New("nonces: too many recent signed requests")
)

// Memory remembers claimed nonces for a window, at most max at once.
type Memory struct {
	window time.Duration
	max    int

	mu    sync.Mutex
	seen  map[string]time.Time
	order []claimed // in claim order, so the oldest are forgotten first
}

type claimed struct {
	key string
	at  time.Time
}

// New returns a Memory that remembers a nonce for window, holding at most
// max nonces.
func New(window time.Duration, max int) *Memory {
	return &Memory{window: window, max: max, seen: map[string]time.Time{}}
}

// Claim remembers nonce for signer (a public key's bytes) as of now. It
// fails with ErrReused if the signer used it within the window, with ErrFull
// if the memory is full.
func (m *Memory) Claim(signer []byte, nonce string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(now)
	k := string(signer) + "\x00" + nonce
	if _, ok := m.seen[k]; ok {
		return ErrReused
	}
	if len(m.seen) >= m.max {
		return ErrFull
	}
	m.seen[k] = now
	m.order = append(m.order, claimed{k, now})
	return nil
}

// forgetLocked drops the nonces claimed more than the window before now.
func (m *Memory) forgetLocked(now time.Time) {
	n := 0
	for n < len(m.order) && now.Sub(m.order[n].at) > m.window {
		delete(m.seen, m.order[n].key)
		n++
	}
	if n > 0 {
		m.order = append(m.order[:0:0], m.order[n:]...)
	}
}

// Len is the number of nonces remembered.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}
