package wall

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// peerLimits keeps a token bucket per peer and cluster.
type peerLimits struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[peerCluster]*rate.Limiter
}

type peerCluster struct {
	p  peer.ID
	id string
}

// maxPeerLimits is how many buckets peerLimits keeps before it forgets
// the full ones (their peers have been idle).
const maxPeerLimits = 10_000

func newPeerLimits(r float64, burst int) *peerLimits {
	return &peerLimits{rate: rate.Limit(r), burst: burst, m: map[peerCluster]*rate.Limiter{}}
}

// take takes up to n tokens from the bucket of p and cluster id and
// returns how many it got.
func (l *peerLimits) take(p peer.ID, id string, n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := peerCluster{p, id}
	b := l.m[k]
	if b == nil {
		if len(l.m) >= maxPeerLimits {
			for k, b := range l.m {
				if b.Tokens() >= float64(l.burst) {
					delete(l.m, k)
				}
			}
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.m[k] = b
	}
	for i := range n {
		if !b.Allow() {
			return i
		}
	}
	return n
}
