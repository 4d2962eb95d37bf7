package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/admission"
	"github.com/agentmesh/mesh/internal/cmdlog"
	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/quorum"
	"github.com/agentmesh/mesh/p2p"
)

// A quorum of bootstrap nodes runs the directory on Raft (internal/quorum):
// the leader orders writes, every member applies the committed log. Other
// nodes, and members that do not lead, forward writes to the leader; they
// learn who leads from the bootstrap nodes (quorumProto, and the quorum's
// state riding on every answer of the change feed).
const (
	// quorumProto tells who runs the directory: request {} → quorumView.
	quorumProto  = p2p.ProtocolPrefix + "/directory/quorum/1.0.0"
	maxQuorumReq = 1 << 10
	maxQuorumRes = 64 << 10
	// presencePoll is how often a member that does not lead copies the
	// leader's heartbeats, so that it has them when it takes over.
	presencePoll = time.Second
)

func (n *Node) serveQuorum(context.Context, peer.ID, []byte) ([]byte, error) {
	v := n.quorumView()
	v.Origin, _ = n.clog.Origin()
	return json.Marshal(v)
}

// adoptQuorumOrigin has a member that joins a running quorum take the
// quorum's origin from the members it knows, unless its state came with
// one (a snapshot carries it).
func (n *Node) adoptQuorumOrigin(ctx context.Context, known []peer.ID) {
	for ctx.Err() == nil {
		if o, err := n.clog.Origin(); err == nil && o != "" {
			return
		}
		for _, p := range known {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			raw, err := n.host.Request(rctx, p, quorumProto, []byte("{}"), maxQuorumRes)
			cancel()
			var v quorumView
			if err == nil && json.Unmarshal(raw, &v) == nil && v.Origin != "" {
				if err := n.clog.AdoptOrigin(v.Origin); err != nil {
					n.log.Error("the quorum this node joins keeps another directory than its store", "err", err)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// bindQuorumOrigin names whose log a new quorum keeps: the did of the
// initial voter with the lowest peer id, the same on every member
// whatever order the operator listed them in. A store that holds a log
// keeps its origin (a directory moved into a quorum of one keeps its
// own); a member joining a running quorum takes the quorum's with its
// state.
func (n *Node) bindQuorumOrigin(voters []peer.AddrInfo) error {
	ids := make([]peer.ID, len(voters))
	for i, v := range voters {
		ids[i] = v.ID
	}
	if !slices.Contains(ids, n.selfPeer()) {
		return nil
	}
	if cur, err := n.clog.Origin(); err != nil || (cur != "" && n.clog.Seq() > 0) {
		return err
	}
	slices.Sort(ids)
	pub, err := p2p.PublicKey(ids[0])
	if err != nil {
		return fmt.Errorf("node: quorum member %s: %w", ids[0], err)
	}
	return n.clog.BindOrigin(identity.DIDFromPublicKey(pub))
}

// startQuorum makes this node a member of the directory's quorum.
func (n *Node) startQuorum(ctx context.Context) error {
	voters, _ := p2p.ParseAddrs(n.cfg.Quorum)
	var ids []peer.ID
	for _, v := range voters {
		ids = append(ids, v.ID)
	}
	if err := n.joinDirectory(n.view.isDirectoryPeer, nil); err != nil {
		return err
	}
	t := n.cfg.Raft
	t.defaults()
	qc := quorum.DefaultConfig()
	qc.Host, qc.Log = n.host.Libp2p(), n.clog
	qc.Dir, qc.InMemory, qc.SyncWrites = filepath.Join(n.cfg.DataDir, "raft"), n.cfg.InMemory, n.cfg.SyncWrites
	if slices.Contains(ids, n.host.ID()) {
		qc.Voters = ids
	} else {
		qc.Known = ids
		n.goroutine(func() { n.adoptQuorumOrigin(ctx, ids) })
	}
	qc.HeartbeatTimeout, qc.ElectionTimeout, qc.LeaderLeaseTimeout = t.HeartbeatTimeout, t.ElectionTimeout, t.LeaderLease
	qc.CommitTimeout, qc.RPCTimeout = t.CommitTimeout, t.RPCTimeout
	qc.SnapshotInterval, qc.SnapshotThreshold, qc.TrailingLogs = t.SnapshotInterval, t.SnapshotThreshold, t.TrailingLogs
	qc.OnApply = n.quorumApplied
	qc.OnLeader = n.leadershipChanged
	qc.OnLeaderChange = func(peer.ID) { n.view.move() }
	qc.OnSnapshot = func(uint64) { // compact the change log behind it too
		if err := n.clog.Compact(n.cfg.ChangesKept); err != nil {
			n.log.Warn("compacting the change log failed", "err", err)
		}
	}
	qc.Logger = n.log.With("component", "quorum")
	var err error
	if n.quorum, err = quorum.New(qc); err != nil {
		return err
	}
	if err := n.quorum.Start(); err != nil {
		return err
	}
	n.orderer = metered(n, quorumProposer{n})
	n.proposer = memberProposer{n}
	n.replica = memberFollower{n}
	n.serveDirectory(ctx)
	n.goroutine(func() { n.followPresence(ctx) })
	n.goroutine(func() { n.syncSigners(ctx) })
	n.goroutine(func() { n.probeMembers(ctx) })
	return nil
}

// quorumApplied is the quorum's OnApply hook: the leader publishes what
// the quorum commits, as a single directory does.
func (n *Node) quorumApplied(e cmdlog.Entry) {
	if n.quorum.IsLeader() {
		n.ordered(e)
	}
}

// leadershipChanged is the quorum's OnLeader hook.
func (n *Node) leadershipChanged(leader bool) {
	if !leader {
		return
	}
	// The beats this member copied from the former leader are its own
	// now; so are the DHT records, which it publishes anew.
	n.dir.TakeOverPresence()
	signal(n.publisher.resync)
	signal(n.signersDue)
}

// followPresence copies the leader's heartbeats on a member that does not
// lead, so that it holds them when it takes over.
func (n *Node) followPresence(ctx context.Context) {
	every(ctx, presencePoll, func() {
		if err := n.fetchPresence(ctx); err != nil {
			n.log.Debug("copying the leader's heartbeats failed", "err", err)
		}
	})
}

// quorumProposer proposes to the quorum, on its leader, with the quorum's
// errors as the HTTP errors a client or a forwarding node acts on.
type quorumProposer struct{ n *Node }

func (p quorumProposer) Propose(ctx context.Context, kind string, at int64, op any) (any, error) {
	res, err := p.n.quorum.Propose(ctx, kind, at, op)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, quorum.ErrNotLeader):
		return nil, errNotLeader
	case errors.Is(err, quorum.ErrUnknownOutcome):
		if _, ok := cmdlog.WriteOf(ctx); ok {
			// Applied once at most, whoever takes it next: the node that
			// sent it sends it on to the next leader.
			return nil, errLeaderLost
		}
		return nil, errNoDirectory.With("the directory's quorum lost its leader while this write was on its way: it may or may not have been applied; retry")
	case errors.Is(err, quorum.ErrClosed):
		return nil, errStopping
	case errors.Is(err, quorum.ErrTooLarge):
		return nil, httpx.E(http.StatusRequestEntityTooLarge, "too_large", "the write is too large for the directory's log")
	}
	return nil, err
}

// errLeaderLost answers a write whose leader lost the lead before it
// committed: it may commit yet, and a try of it sent to the next leader is
// applied at most once (cmdlog.Write), so it counts as errNotLeader.
var errLeaderLost = errNotLeader.With("this bootstrap node lost the lead of the directory's quorum while the write was on its way; send it again to the leader (it is applied once)")

// memberProposer is the Proposer of a member: proposals other nodes may
// make go to whichever member leads (replicaProposer, through this
// member's own orderer while it leads); others only the leader orders,
// and a member that does not lead answers errNotLeader, which the node
// that forwarded the write acts on (forward.go).
type memberProposer struct{ n *Node }

func (p memberProposer) Propose(ctx context.Context, kind string, at int64, op any) (any, error) {
	if remoteKinds[kind] {
		return replicaProposer{p.n}.Propose(ctx, kind, at, op)
	}
	if !p.n.quorum.IsLeader() {
		return nil, errNotLeader
	}
	return p.n.orderer.Propose(ctx, kind, at, op)
}

// memberFollower is the follower of a member: Raft keeps its log current.
type memberFollower struct{ n *Node }

func (f memberFollower) WaitFor(ctx context.Context, seq uint64) error {
	return f.n.clog.Wait(ctx, seq)
}

// Sync brings the member up to the leader's log as of now, and copies its
// heartbeats.
func (f memberFollower) Sync(ctx context.Context) error {
	n := f.n
	leader := n.quorum.Leader()
	switch {
	case leader == n.host.ID():
		return nil
	case leader == "":
		return errors.New("the quorum has no leader")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := n.host.Request(ctx, leader, quorumProto, []byte("{}"), maxQuorumRes)
	if err != nil {
		return err
	}
	var v quorumView
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("quorum state: %w", err)
	}
	if err := n.fetchPresence(ctx); err != nil {
		n.log.Debug("copying heartbeats failed", "err", err)
	}
	return n.clog.Wait(ctx, v.Seq)
}

func (f memberFollower) Status() (uint64, bool, error) {
	st := f.n.quorum.Status()
	seq := f.n.clog.Seq()
	if st.Leader == "" {
		return seq, false, errors.New("the quorum has no leader")
	}
	return seq, st.Applied >= st.CommitIndex, nil
}

// syncSigners has the leader name the quorum's voters in the log whenever
// they differ from the signers it names (at its election, after a
// membership change), so that every node trusts the keys of the members.
func (n *Node) syncSigners(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if n.quorum.IsLeader() {
			var voters []string
			for _, m := range n.quorum.Members() {
				if m.Voter {
					voters = append(voters, m.ID.String())
				}
			}
			slices.Sort(voters)
			if len(voters) > 0 && !slices.Equal(voters, n.signers.Current()) {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := n.orderer.Propose(admission.Unmetered(pctx), quorum.MembersKind, n.cfg.Now().UnixNano(), quorum.SignersOp{Members: voters})
				cancel()
				if err != nil {
					n.log.Debug("naming the quorum's members in the log failed", "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.signersDue:
		}
	}
}
