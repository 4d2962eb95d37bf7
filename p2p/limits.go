package p2p

import (
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// peerLimits bounds the messages a topic takes from each peer of one
// role: the origin (the node that signed a message, whoever forwards it)
// or the forwarder (the connected peer it came from, whatever its origin).
// A token bucket per peer; past it, a second bucket of the same size tells
// a burst a little too fast (ignored: an honest burst may arrive relayed a
// little faster than it was sent) from a flood (rejected, which costs the
// forwarder gossipsub score; an honest relay never forwards a flood, as it
// applies the same limits).
type peerLimits struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[peer.ID]*peerBuckets
}

type peerBuckets struct{ accept, excess *rate.Limiter }

// maxLimited is how many peers' buckets a topic keeps, per role, before it
// forgets those of peers that have been quiet (full buckets).
const maxLimited = 10_000

// newPeerLimits returns the limits of r messages a second, burst at once,
// per peer; nil (no limit) when r is not positive.
func newPeerLimits(r float64, burst int) *peerLimits {
	if r <= 0 {
		return nil
	}
	return &peerLimits{rate: rate.Limit(r), burst: max(burst, 1), m: map[peer.ID]*peerBuckets{}}
}

// check judges one more message from p.
func (l *peerLimits) check(p peer.ID) pubsub.ValidationResult {
	if l == nil {
		return pubsub.ValidationAccept
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[p]
	if b == nil {
		if len(l.m) >= maxLimited {
			for q, b := range l.m {
				if b.accept.Tokens() >= float64(l.burst) {
					delete(l.m, q)
				}
			}
		}
		b = &peerBuckets{rate.NewLimiter(l.rate, l.burst), rate.NewLimiter(l.rate, l.burst)}
		l.m[p] = b
	}
	switch {
	case b.accept.Allow():
		return pubsub.ValidationAccept
	case b.excess.Allow():
		return pubsub.ValidationIgnore
	}
	return pubsub.ValidationReject
}
