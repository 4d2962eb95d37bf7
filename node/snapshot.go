package node

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/p2p"
)

// Snapshots of the directory for the change feed: a node whose changes were
// compacted (a late joiner, or one that was away long) installs the
// directory's state instead of replaying the log from 1. They are the
// snapshots a quorum's Raft persists and installs (cmdlog's format), made
// when asked from a consistent image of the bootstrap node's store, so
// never older than its log.
const (
	// snapshotProto streams a snapshot: request {} → the snapshot, raw.
	snapshotProto = p2p.ProtocolPrefix + "/directory/snapshot/1.0.0"
	// maxSnapshotBytes bounds a snapshot downloaded (compressed).
	maxSnapshotBytes = 64 << 30
	// snapshotsServed bounds the snapshots a bootstrap node writes at once;
	// a node refused asks again at its next catch-up.
	snapshotsServed = 2
	// compactEvery is how often a node compacts its change log.
	compactEvery = time.Minute
	// DefaultChangesKept is how many entries a change log keeps.
	DefaultChangesKept = 100_000
)

var errSnapshotsBusy = errors.New("too many snapshots being served")

func (n *Node) serveSnapshot(_ context.Context, from peer.ID, _ []byte, w io.Writer) error {
	select {
	case n.snapshots <- struct{}{}:
		defer func() { <-n.snapshots }()
	default:
		return errSnapshotsBusy
	}
	s, err := n.clog.Snapshot()
	if err != nil {
		return err
	}
	defer s.Close()
	size, err := s.WriteTo(w)
	n.log.Info("served a snapshot of the directory", "to", from, "seq", s.Header.Seq, "bytes", size, "err", err)
	return err
}

// installSnapshot replaces this node's copy of the directory with a
// snapshot from the bootstrap node it follows.
func (n *Node) installSnapshot(ctx context.Context) error {
	src := n.view.source()
	if src == "" {
		return errors.New("not connected to any node that runs the directory")
	}
	start := time.Now()
	return n.host.Download(ctx, src, snapshotProto, []byte("{}"), maxSnapshotBytes, func(r io.Reader) error {
		h, err := n.clog.Restore(r)
		if err == nil {
			n.log.Info("installed a snapshot of the directory", "from", src, "seq", h.Seq, "took", time.Since(start).Round(time.Millisecond))
		}
		return err
	})
}

// compactLog keeps the last ChangesKept entries of the change log.
func (n *Node) compactLog(ctx context.Context) {
	every(ctx, compactEvery, func() {
		if err := n.clog.Compact(n.cfg.ChangesKept); err != nil {
			n.log.Warn("compacting the change log failed", "err", err)
		}
	})
}
