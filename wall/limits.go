package wall

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/internal/ratelimit"
)

// peerLimits keeps a token bucket per peer and cluster.
type peerLimits struct {
	buckets *ratelimit.Keyed[peerCluster]
}

type peerCluster struct {
	p  peer.ID
	id string
}

// maxPeerLimits is how many buckets peerLimits keeps before it forgets
// the full ones (their peers have been idle).
const maxPeerLimits = 10_000

func newPeerLimits(r float64, burst int) *peerLimits {
	return &peerLimits{ratelimit.NewKeyed[peerCluster](rate.Limit(r), burst, maxPeerLimits)}
}

// take takes up to n tokens from the bucket of p and cluster id and
// returns how many it got.
func (l *peerLimits) take(p peer.ID, id string, n int) int {
	now := time.Now() // rates fill in real time (doc.go, One clock)
	b := l.buckets.Bucket(peerCluster{p, id}, now)
	for i := range n {
		if !b.AllowN(now, 1) {
			return i
		}
	}
	return n
}

// sendLimiter bounds a sender to perSec messages a second in bursts of
// burst; perSec 0 lets everything through.
func sendLimiter(perSec float64, burst int) *rate.Limiter {
	if perSec == 0 {
		return rate.NewLimiter(rate.Inf, 0)
	}
	return rate.NewLimiter(rate.Limit(perSec), max(1, burst))
}

// burstOf is the default burst of a rate: twice the rate (capped so that
// a huge rate converts to an int).
func burstOf(perSec float64) int { return int(min(2*perSec, 1<<30)) }

// socketBurst is the burst of the socket rate: Tuning.SocketBurst, or
// twice the rate.
func (c *Config) socketBurst() int {
	if c.SocketBurst > 0 {
		return c.SocketBurst
	}
	return burstOf(c.SocketRate)
}
