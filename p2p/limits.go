package p2p

import (
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// originLimits bounds the messages a topic takes from each origin (the
// node that signed them, whoever forwards them): a token bucket per
// origin. Past it, a second bucket of the same size tells a burst a little
// too fast (ignored: an honest burst may arrive relayed a little faster
// than it was sent) from a flood (rejected, which costs the forwarder
// gossipsub score; an honest relay never forwards a flood, as it applies
// the same limit).
type originLimits struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[peer.ID]*originBuckets
}

type originBuckets struct{ accept, excess *rate.Limiter }

// maxOrigins is how many origins' buckets a topic keeps before it forgets
// those of origins that have been quiet (full buckets).
const maxOrigins = 10_000

// newOriginLimits returns the limits of r messages a second, burst at
// once, per origin; nil (no limit) when r is not positive.
func newOriginLimits(r float64, burst int) *originLimits {
	if r <= 0 {
		return nil
	}
	return &originLimits{rate: rate.Limit(r), burst: max(burst, 1), m: map[peer.ID]*originBuckets{}}
}

// check judges one more message from origin.
func (l *originLimits) check(origin peer.ID) pubsub.ValidationResult {
	if l == nil {
		return pubsub.ValidationAccept
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[origin]
	if b == nil {
		if len(l.m) >= maxOrigins {
			for p, b := range l.m {
				if b.accept.Tokens() >= float64(l.burst) {
					delete(l.m, p)
				}
			}
		}
		b = &originBuckets{rate.NewLimiter(l.rate, l.burst), rate.NewLimiter(l.rate, l.burst)}
		l.m[origin] = b
	}
	switch {
	case b.accept.Allow():
		return pubsub.ValidationAccept
	case b.excess.Allow():
		return pubsub.ValidationIgnore
	}
	return pubsub.ValidationReject
}
