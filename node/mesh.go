package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/p2p"
	"github.com/agentmesh/mesh/registryapi"
)

// Protocols and topics of the registry on the mesh.
const (
	// changesProto serves the directory's change log: request
	// {"since": n, "limit": n}, response {"head": n, "entries": [...]}.
	changesProto = p2p.ProtocolPrefix + "/directory/changes/1.0.0"
	// forwardProto carries an HTTP/1.1 request to the directory node and
	// its HTTP/1.1 response back, byte for byte.
	forwardProto = ForwardProtocol
	// forwardSessionProto carries the same, many requests on one stream
	// (p2p.HandleSessions): a node sends its writes on it to a directory
	// that serves it, on forwardProto to one of a release before.
	forwardSessionProto = p2p.ProtocolPrefix + "/directory/forward/2.0.0"
	maxChangesReq       = 1 << 10
	maxChangesResp      = 8 << 20
	changesBatch        = 1000
	changesMaxBytes     = 4 << 20
	maxCommandSize      = 256 << 10
)

// ForwardProtocol is the protocol id of the forward stream (forward.go),
// for tools that speak it as any peer may (`mesh bench flood`).
const ForwardProtocol = p2p.ProtocolPrefix + "/directory/forward/1.0.0"

// startP2P starts the libp2p host and settles who the directory is.
func (n *Node) startP2P(ctx context.Context) error {
	boots, err := p2p.ParseAddrs(n.cfg.Bootstrap)
	if err != nil {
		return err
	}
	voters, err := p2p.ParseAddrs(n.cfg.Quorum)
	if err != nil {
		return err
	}
	n.role = n.cfg.role()
	n.view = newDirView(n, boots, voters)
	switch {
	case n.role == RoleBootstrap && len(voters) == 0:
		if err := n.clog.BindOrigin(n.DID()); err != nil {
			return err
		}
	case n.role == RoleBootstrap:
		if err := n.bindQuorumOrigin(voters); err != nil {
			return err
		}
	}
	// Ordinary nodes learn whose log they follow from the directory (see
	// fetchChanges).
	var key ed25519.PrivateKey
	if n.role == RoleBootstrap {
		key = n.key
	}
	n.tokens = registryapi.NewTokensTrusting(key, n.view.trustedAt)
	n.validator = registryapi.NewRecordValidatorAt(n.view.trustedAt)
	var onDHTServer func(peer.ID)
	if n.role == RoleBootstrap {
		n.publisher = newPublisher(n)
		if n.cfg.Cards.Refresh > 0 {
			n.prober = newCardProber(n)
		}
		onDHTServer = n.publisher.dhtServerConnected
	}
	cfg := p2p.Config{
		Key: n.key,
		// The members of a quorum keep each other connected, as they keep
		// the other bootstrap nodes.
		Bootstrap: append(voters, boots...),
		DHTServer: n.role == RoleBootstrap || n.cfg.DHTServer,
		// Bootstrap nodes relay for nodes behind NAT and are the rendezvous
		// of wall topics.
		RelayService: n.role == RoleBootstrap,
		Rendezvous:   n.role == RoleBootstrap,
		Reachability: n.reachability(),
		Gater:        n.cfg.Gater,
		Validators:   map[string]record.Validator{registryapi.RecordNS: n.validator, registryapi.IDIndexNS: n.validator},
		OnDHTServer:  onDHTServer,
		Values:       n.dhtValues(),
		Registerer:   n.metrics,
		Logger:       n.log.With("component", "p2p"),

		GossipQueueBytes: n.cfg.GossipQueueBytes,
		FlushTimeout:     n.grace(),
		Browsers:         n.cfg.Browsers,
		BrowserLimits:    n.cfg.BrowserLimits,
	}
	return n.startHost(ctx, cfg)
}

// reachability is the configured one; a bootstrap node is public unless
// told otherwise, since others must reach it.
func (n *Node) reachability() string {
	if n.cfg.Reachability == "" && n.role == RoleBootstrap {
		return p2p.ReachPublic
	}
	return n.cfg.Reachability
}

// selfPeer is the node's peer ID, derived from its key.
func (n *Node) selfPeer() peer.ID { return n.self }

// startRegistry wires the directory for the node's role.
func (n *Node) startRegistry(ctx context.Context) error {
	switch {
	case n.role == RoleBootstrap && len(n.cfg.Quorum) > 0:
		return n.startQuorum(ctx)
	case n.role == RoleBootstrap:
		return n.startDirectory(ctx)
	}
	return n.startReplica(ctx)
}

// startDirectory makes this node the canonical directory: it sequences
// writes, publishes each committed command and serves the change log
// (acceptWrites serves the writes of other nodes, once the bridge is
// built).
func (n *Node) startDirectory(ctx context.Context) error {
	if err := n.joinDirectory(func(origin peer.ID) bool { return origin == n.selfPeer() }, nil); err != nil {
		return err
	}
	local := cmdlog.NewLocal(n.clog)
	local.OnCommit = n.ordered
	n.orderer = metered(n, local)
	n.proposer = n.orderer
	n.serveDirectory(ctx)
	return nil
}

// metered is the log's orderer on this node, behind the directory's write
// budget (admission.Proposer): the one place the directory meters the
// log, whichever orders it (the single writer, or the quorum's leader).
func metered(n *Node, orderer cmdlog.Proposer) cmdlog.Proposer {
	return admission.Proposer{Next: orderer, Admitter: n.admission}
}

// serveDirectory serves what a bootstrap node serves other nodes: the
// change log, heartbeats, and the quorum's state (acceptWrites serves
// forwarded writes and proposals, once the bridge is built); and
// publishes what the directory commits. Its own clients' writes take a
// node's share of the log, as another node's do.
func (n *Node) serveDirectory(ctx context.Context) {
	n.admission.SetDirectory(n.selfPeer().String())
	n.host.HandleRequests(changesProto, maxChangesReq, n.serveChanges)
	n.host.HandleRequests(presenceProto, maxPresenceReq, n.servePresence)
	n.host.HandleRequests(quorumProto, maxQuorumReq, n.serveQuorum)
	n.host.HandleDownloads(snapshotProto, maxQuorumReq, n.serveSnapshot)
	// Set before the goroutine starts: gossip reads them (a test calls it
	// at once; set in run, -race saw that read race the write).
	n.publisher.topics = n.dirTopics
	n.goroutine(func() { n.publisher.run(ctx) })
	n.goroutine(func() { n.flushPresence(ctx) })
}

// acceptWrites serves, on the directory, the requests other nodes forward
// and the operations they propose: through the bridge, which must be built.
func (n *Node) acceptWrites() {
	n.host.HandleRequests(forwardProto, maxForwardReq, n.serveForward)
	n.host.HandleSessions(forwardSessionProto, maxForwardReq, n.serveForward)
	n.host.HandleRequests(proposeProto, maxProposal, n.serveProposal)
}

type changesRequest struct {
	Since uint64 `json:"since"`
	Limit int    `json:"limit"`
}

type changesResponse struct {
	Head    uint64            `json:"head"`
	Entries []json.RawMessage `json:"entries"`
	// Snapshot: the changes asked for were compacted; install a snapshot
	// (snapshotProto) and ask again from its seq.
	Snapshot bool `json:"snapshot,omitempty"`
	// Origin names whose log this is (cmdlog's origin); Quorum is the
	// answering node's view of who runs the directory.
	Origin string      `json:"origin,omitempty"`
	Quorum *quorumView `json:"quorum,omitempty"`
}

func (n *Node) serveChanges(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
	var q changesRequest
	if err := json.Unmarshal(req, &q); err != nil {
		return nil, err
	}
	if q.Limit <= 0 || q.Limit > changesBatch {
		q.Limit = changesBatch
	}
	head := n.clog.Seq()
	cmds, err := n.clog.Changes(q.Since, q.Limit, changesMaxBytes)
	compacted := errors.Is(err, cmdlog.ErrCompacted)
	if err != nil && !compacted {
		return nil, err
	}
	origin, err := n.clog.Origin()
	if err != nil {
		return nil, err
	}
	view := n.quorumView()
	return json.Marshal(changesResponse{Head: head, Entries: cmds, Snapshot: compacted, Origin: origin, Quorum: &view})
}

// startReplica makes this node a copy of the directory: commands arrive by
// gossip and are fetched from the directory whenever the replica is
// behind; writes are forwarded (see forward.go).
func (n *Node) startReplica(ctx context.Context) error {
	n.proposer = replicaProposer{n}
	rep := cmdlog.NewReplica(n.clog, n.fetchChanges, n.log.With("component", "replica"))
	rep.Install = n.installSnapshot
	n.replica = rep
	if err := n.joinDirectory(n.view.isDirectoryPeer, rep); err != nil {
		return err
	}
	// Catch up as soon as a bootstrap node is (re)connected, and tell the
	// operator when the directory comes and goes.
	var linked atomic.Bool
	n.host.Libp2p().Network().Notify(&network.NotifyBundle{
		ConnectedF: func(_ network.Network, c network.Conn) {
			if p := c.RemotePeer(); n.view.isDirectoryPeer(p) {
				rep.Kick()
				if !linked.Swap(true) {
					n.log.Info("connected to the directory", "peer", p)
				}
			}
		},
		DisconnectedF: func(_ network.Network, c network.Conn) {
			if p := c.RemotePeer(); n.view.isDirectoryPeer(p) && !n.host.Connected(p) && n.view.source() == "" && linked.Swap(false) {
				n.log.Warn("lost the directory: reads are served from this node's copy, writes answer 503 until it is back", "peer", p)
			}
		},
	})
	n.goroutine(func() { rep.Run(ctx) })
	return nil
}

// fetchChanges asks a bootstrap node that runs the directory for the
// changes after since: the leader when one is known and reachable, any
// member otherwise (a member's log is the leader's, committed so far).
func (n *Node) fetchChanges(ctx context.Context, since uint64) ([]cmdlog.Entry, uint64, error) {
	src := n.view.source()
	if src == "" {
		return nil, 0, errors.New("not connected to any node that runs the directory")
	}
	req, _ := json.Marshal(changesRequest{Since: since, Limit: changesBatch})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	raw, err := n.host.Request(ctx, src, changesProto, req, maxChangesResp)
	if err != nil {
		return nil, 0, err
	}
	var resp changesResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, 0, fmt.Errorf("changes response: %w", err)
	}
	if resp.Origin != "" {
		if err := n.clog.AdoptOrigin(resp.Origin); err != nil {
			n.log.Error("the bootstrap nodes run another directory than the one this node's store holds", "peer", src, "err", err)
			return nil, 0, err
		}
	}
	if resp.Quorum != nil {
		n.view.heard(*resp.Quorum)
	}
	if resp.Snapshot {
		return nil, resp.Head, cmdlog.ErrCompacted
	}
	entries := make([]cmdlog.Entry, len(resp.Entries))
	for i, c := range resp.Entries {
		if err := json.Unmarshal(c, &entries[i]); err != nil {
			return nil, 0, fmt.Errorf("changes response: %w", err)
		}
	}
	// Heartbeats ride along; missing them costs freshness, not the log.
	if err := n.fetchPresence(ctx); err != nil {
		n.log.Debug("copying heartbeats failed", "err", err)
	}
	return entries, resp.Head, nil
}
