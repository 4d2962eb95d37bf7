package node

import (
	"context"
	"time"

	"github.com/agentmesh/mesh/internal/admission"
)

// The directory drops what was written and never used: registrations
// whose agent never took a token within Config.AgentActivationWindow, and
// public clusters nobody joined within Config.ClusterJoinWindow. Each
// expiry is a log entry that every node applies alike (see
// registryapi.ExpireOp and wall's expiry.go); this is only its clock.
const (
	// sweepInterval is how often the directory looks for expiries due.
	sweepInterval = time.Minute
	// sweepRounds bounds the batches of one sweep, so that a backlog
	// (say a flood's registrations, a day later) drains over a few
	// minutes without holding the log for long at once.
	sweepRounds = 10
)

// sweepExpired runs the directory's expiry sweeps until ctx ends.
func (n *Node) sweepExpired(ctx context.Context) {
	every(ctx, sweepInterval, func() { n.sweepOnce(ctx) })
}

// sweepOnce logs the expiries due at the node's clock, on the node that
// orders the log (the single directory, or the quorum's leader). They are
// the directory's own housekeeping: no write budget holds them back.
func (n *Node) sweepOnce(ctx context.Context) {
	if !n.view.isDirectory() {
		return
	}
	ctx = admission.Unmetered(ctx)
	agents, clusters, posts := 0, 0, 0
	for range sweepRounds {
		a, err := n.dir.SweepExpired(ctx, n.orderer, n.cfg.Now())
		if err != nil {
			n.log.Warn("expiring unused registrations failed", "err", err)
		}
		c, err := n.wall.SweepExpired(ctx)
		if err != nil {
			n.log.Warn("expiring unjoined public clusters failed", "err", err)
		}
		p, err := n.wall.SweepBoards(ctx)
		if err != nil {
			n.log.Warn("expiring posts failed", "err", err)
		}
		agents, clusters, posts = agents+a, clusters+c, posts+p
		if a == 0 && c == 0 && p == 0 {
			break
		}
	}
	if agents > 0 || clusters > 0 || posts > 0 {
		n.log.Info("expired what was never used or outlived its ttl", "registrations", agents, "public_clusters", clusters, "posts", posts)
	}
}
