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
	// ErrScopeFull: the claim's scope (a client address) holds its share
	// of the memory (LimitScope); that client must wait, others need not.
	ErrScopeFull = errors.New("nonces: too many recent signed requests from one client")
)

// Memory remembers claimed nonces for a window, at most max at once, and
// at most perScope of one scope.
type Memory struct {
	window   time.Duration
	max      int
	perScope int

	mu     sync.Mutex
	seen   map[string]time.Time
	scopes map[string]int // claims held by scope
	order  []claimed      // in claim order, so the oldest are forgotten first
	head   int            // order[:head] are forgotten
}

type claimed struct {
	key, scope string
	at         time.Time
}

// New returns a Memory that remembers a nonce for window, holding at most
// max nonces.
func New(window time.Duration, max int) *Memory {
	return &Memory{window: window, max: max, perScope: max, seen: map[string]time.Time{}, scopes: map[string]int{}}
}

// LimitScope bounds the nonces one scope of ClaimIn may hold at once to
// n, so that one client cannot fill the memory for everyone. It returns m.
func (m *Memory) LimitScope(n int) *Memory {
	m.perScope = n
	return m
}

// Claim remembers nonce for signer (a public key's bytes) as of now. It
// fails with ErrReused if the signer used it within the window, with ErrFull
// if the memory is full.
func (m *Memory) Claim(signer []byte, nonce string, now time.Time) error {
	return m.ClaimIn("", signer, nonce, now)
}

// ClaimIn is Claim on behalf of scope (a client address), which fails
// with ErrScopeFull when scope holds its share (LimitScope).
func (m *Memory) ClaimIn(scope string, signer []byte, nonce string, now time.Time) error {
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
	if m.scopes[scope] >= m.perScope {
		return ErrScopeFull
	}
	m.seen[k] = now
	m.scopes[scope]++
	m.order = append(m.order, claimed{k, scope, now})
	return nil
}

// ScopeFull reports whether scope holds its share as of now (ClaimIn
// would fail with ErrScopeFull), so that a caller can refuse a request
// before the work of checking its signature.
func (m *Memory) ScopeFull(scope string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(now)
	return m.scopes[scope] >= m.perScope
}

// forgetLocked drops the nonces claimed more than the window before now;
// the order's forgotten head is cut once it is half of it, so that a claim
// costs the same however many are held.
func (m *Memory) forgetLocked(now time.Time) {
	for m.head < len(m.order) && now.Sub(m.order[m.head].at) > m.window {
		c := m.order[m.head]
		delete(m.seen, c.key)
		if m.scopes[c.scope]--; m.scopes[c.scope] <= 0 {
			delete(m.scopes, c.scope)
		}
		m.order[m.head] = claimed{}
		m.head++
	}
	if m.head > len(m.order)/2 {
		m.order = append(m.order[:0], m.order[m.head:]...)
		m.head = 0
	}
}

// Len is the number of nonces remembered.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}
