// Package ratelimit keeps a token bucket per key (a peer, an address, a
// peer and cluster) in bounded memory.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Keyed is a set of token buckets of the same rate and burst, one per key.
// It keeps at most max buckets: a new key past that first forgets the full
// buckets (an idle key's, the same as a new one) and then, while fewer
// than an eighth of max are free, arbitrary ones (a caller with that many
// keys busy at once escapes a per-key limit anyway). So a scan of the
// buckets is paid for by max/8 new keys at least.
type Keyed[K comparable] struct {
	rate  rate.Limit
	burst int
	max   int

	mu sync.Mutex
	m  map[K]*rate.Limiter
}

// NewKeyed returns buckets of r tokens a second holding burst tokens (at
// least 1), at most max of them.
func NewKeyed[K comparable](r rate.Limit, burst, max int) *Keyed[K] {
	return &Keyed[K]{rate: r, burst: burst, max: max, m: map[K]*rate.Limiter{}}
}

// Bucket returns k's bucket at now, making it when k has none.
func (l *Keyed[K]) Bucket(k K, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.m[k]; b != nil {
		return b
	}
	if len(l.m) >= l.max {
		l.forget(now)
	}
	b := rate.NewLimiter(l.rate, max(l.burst, 1))
	l.m[k] = b
	return b
}

// forget drops the full buckets, then arbitrary ones (in the map's random
// order) until an eighth of max, at least one, is free.
func (l *Keyed[K]) forget(now time.Time) {
	for k, b := range l.m {
		if b.TokensAt(now) >= float64(b.Burst()) {
			delete(l.m, k)
		}
	}
	keep := l.max - max(l.max/8, 1)
	for k := range l.m {
		if len(l.m) <= keep {
			break
		}
		delete(l.m, k)
	}
}

// Len is how many buckets l keeps.
func (l *Keyed[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
