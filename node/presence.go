package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// Heartbeats are soft state outside the log (registryapi.Presence): the
// directory node records them and flushes them to its store; replicas copy
// them each time they catch up with the log.
const (
	// presenceProto serves the directory's heartbeats: request
	// {"epoch": n, "ver": n} (the replica's cursor), response
	// registryapi.PresenceChanges.
	presenceProto = p2p.ProtocolPrefix + "/directory/presence/1.0.0"

	maxPresenceReq = 1 << 10
	// maxPresenceResp bounds a full copy: about 80 bytes a beat and 40
	// more with a probe's liveness, so some 500,000 probed agents.
	maxPresenceResp = 64 << 20
	// presenceFlush is how often the directory writes new beats to its
	// store; a crash loses at most this much of who was online.
	presenceFlush = 5 * time.Second
)

type presenceRequest struct {
	Epoch uint64 `json:"epoch"`
	Ver   uint64 `json:"ver"`
}

func (n *Node) servePresence(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
	var q presenceRequest
	if err := json.Unmarshal(req, &q); err != nil {
		return nil, err
	}
	return n.dir.PresenceSince(q.Epoch, q.Ver)
}

// fetchPresence copies the directory's new heartbeats.
func (n *Node) fetchPresence(ctx context.Context) error {
	// Only the node that orders writes records heartbeats.
	dir := n.view.directory()
	if dir == "" || dir == n.host.ID() || !n.host.Connected(dir) {
		return nil
	}
	epoch, ver := n.dir.PresenceCursor()
	req, _ := json.Marshal(presenceRequest{Epoch: epoch, Ver: ver})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	raw, err := n.host.Request(ctx, dir, presenceProto, req, maxPresenceResp)
	if err != nil {
		return err
	}
	var c registryapi.PresenceChanges
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("presence response: %w", err)
	}
	n.dir.MergePresence(c)
	return nil
}

// awaitPresence waits (within ctx) until this replica holds the heartbeat
// a forwarded answer names in cursor, so that its client reads its write.
// It stops when a catch-up fails, or shows the directory restarted since
// (another epoch numbers its beats), and pauses between rounds.
func (n *Node) awaitPresence(ctx context.Context, cursor string) {
	epoch, ver, ok := registryapi.ParsePresenceCursor(cursor)
	for ok {
		if e, v := n.dir.PresenceCursor(); e == epoch && v >= ver {
			return
		}
		if n.replica.Sync(ctx) != nil {
			return
		}
		if e, _ := n.dir.PresenceCursor(); e != epoch {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(awaitPresencePause):
		}
	}
}

// awaitPresencePause spaces the catch-up rounds of awaitPresence.
const awaitPresencePause = 20 * time.Millisecond

// flushPresence writes the directory's heartbeats to its store every
// presenceFlush, and once more when the node stops: Close ends ctx once
// no request can record a beat any more (Node.gated).
func (n *Node) flushPresence(ctx context.Context) {
	t := time.NewTicker(presenceFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := n.dir.FlushPresence(); err != nil {
				n.log.Warn("writing heartbeats", "err", err)
			}
			return
		case <-t.C:
			if err := n.dir.FlushPresence(); err != nil {
				n.log.Warn("writing heartbeats; retrying", "err", err)
			}
		}
	}
}
