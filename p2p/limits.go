package p2p

import (
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/agentmesh/mesh/internal/ratelimit"
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
	accept, excess *ratelimit.Keyed[peer.ID]
}

// maxLimited is how many peers' buckets a topic keeps, per role, before it
// forgets those of peers that have been quiet (full buckets).
const maxLimited = 10_000

// newPeerLimits returns the limits of r messages a second, burst at once,
// per peer; nil (no limit) when r is not positive.
func newPeerLimits(r float64, burst int) *peerLimits {
	if r <= 0 {
		return nil
	}
	return &peerLimits{ratelimit.NewKeyed[peer.ID](rate.Limit(r), burst, maxLimited),
		ratelimit.NewKeyed[peer.ID](rate.Limit(r), burst, maxLimited)}
}

// check judges one more message from p.
func (l *peerLimits) check(p peer.ID) pubsub.ValidationResult {
	if l == nil {
		return pubsub.ValidationAccept
	}
	now := time.Now()
	switch {
	case l.accept.Bucket(p, now).AllowN(now, 1):
		return pubsub.ValidationAccept
	case l.excess.Bucket(p, now).AllowN(now, 1):
		return pubsub.ValidationIgnore
	}
	return pubsub.ValidationReject
}
