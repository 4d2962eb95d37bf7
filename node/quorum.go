package node

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/agentmesh/mesh/identity"
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
	// quorumProto tells who runs the directory: request {} → quorumState.
	quorumProto  = p2p.ProtocolPrefix + "/directory/quorum/1.0.0"
	maxQuorumReq = 1 << 10
	maxQuorumRes = 64 << 10
	// presencePoll is how often a member that does not lead copies the
	// leader's heartbeats, so that it has them when it takes over.
	presencePoll = time.Second
)

// quorumView is a node's view of who runs the directory, as it crosses
// the wire and /health shows it.
type quorumView struct {
	// Leader is the peer id of the node ordering writes: the leader of a
	// quorum, the directory node itself otherwise; empty while there is
	// none.
	Leader      string       `json:"leader"`
	Term        uint64       `json:"term"`
	CommitIndex uint64       `json:"commit_index"`
	Members     []memberView `json:"members"`
	// Seq is the answering node's last applied entry of the directory log.
	Seq uint64 `json:"seq"`
	// Origin names whose log it is (see cmdlog's origin).
	Origin string `json:"origin,omitempty"`
}

type memberView struct {
	PeerID string   `json:"peer_id"`
	Voter  bool     `json:"voter"`
	Addrs  []string `json:"addrs,omitempty"`
}

// healthQuorum is the quorum part of /health.
type healthQuorum struct {
	quorumView
	// Lag is how many entries this node has yet to apply: of the quorum's
	// committed log on a member, of the directory's head elsewhere.
	Lag   uint64 `json:"lag"`
	State string `json:"state,omitempty"` // a member's Raft state
	Error string `json:"error,omitempty"` // why writes cannot be served now
}

// quorumView is this node's view (bootstrap nodes: their own state).
func (n *Node) quorumView() quorumView {
	if n.quorum == nil && n.role == RoleBootstrap {
		self := n.host.ID().String()
		return quorumView{Leader: self, CommitIndex: n.clog.Seq(), Seq: n.clog.Seq(),
			Members: []memberView{{PeerID: self, Voter: true, Addrs: n.host.Addrs()}}}
	}
	if n.quorum == nil {
		return n.view.last()
	}
	st := n.quorum.Status()
	v := quorumView{Leader: st.Leader.String(), Term: st.Term, CommitIndex: st.CommitIndex, Seq: n.clog.Seq()}
	ps := n.host.Libp2p().Peerstore()
	for _, m := range st.Members {
		mv := memberView{PeerID: m.ID.String(), Voter: m.Voter}
		addrs := ps.Addrs(m.ID)
		if m.ID == n.host.ID() {
			addrs = n.host.Libp2p().Addrs()
		}
		for _, a := range addrs {
			mv.Addrs = append(mv.Addrs, a.String())
		}
		v.Members = append(v.Members, mv)
	}
	return v
}

func (n *Node) healthQuorum(head uint64) *healthQuorum {
	h := &healthQuorum{quorumView: n.quorumView()}
	if n.quorum != nil {
		st := n.quorum.Status()
		h.State = st.State
		if st.CommitIndex > st.Applied {
			h.Lag = st.CommitIndex - st.Applied
		}
		if st.Leader == "" {
			h.Error = fmt.Sprintf("no leader: this member is %s; writes answer 503 until a majority of the %d voters elect one", st.State, quorum.Voters(st.Members))
		}
		return h
	}
	if seq := n.clog.Seq(); head > seq {
		h.Lag = head - seq
	}
	if n.role == RoleNode && h.Leader == "" {
		h.Error = "no bootstrap node reachable knows a leader: writes answer 503"
	}
	return h
}

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
	var err error
	n.dirTopic, err = n.host.Join(directoryTopic, p2p.TopicConfig{
		MaxSize: maxCommandSize,
		Validate: func(origin peer.ID, _ []byte) (any, error) {
			if !n.view.isDirectoryPeer(origin) {
				return nil, errors.New("only members of the quorum publish directory changes")
			}
			return nil, nil
		},
	})
	if err != nil {
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
	qc.OnSnapshot = func(uint64) { // compact the change log behind it too
		if err := n.clog.Compact(n.cfg.ChangesKept); err != nil {
			n.log.Warn("compacting the change log failed", "err", err)
		}
	}
	qc.Logger = n.log.With("component", "quorum")
	if n.quorum, err = quorum.New(qc); err != nil {
		return err
	}
	if err := n.quorum.Start(); err != nil {
		return err
	}
	n.orderer = quorumProposer{n}
	n.proposer = memberProposer{n}
	n.replica = memberFollower{n}
	n.serveDirectory(ctx)
	n.goroutine(func() { n.followPresence(ctx) })
	n.goroutine(func() { n.syncSigners(ctx) })
	return nil
}

// quorumApplied is the quorum's OnApply hook: the leader publishes what
// the quorum commits, as a single directory does.
func (n *Node) quorumApplied(e cmdlog.Entry) {
	if n.quorum.IsLeader() {
		n.publisher.committed(e)
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
		return nil, errNoDirectory.With("the directory's quorum lost its leader while this write was on its way: it may or may not have been applied; retry")
	case errors.Is(err, quorum.ErrClosed):
		return nil, errStopping
	case errors.Is(err, quorum.ErrTooLarge):
		return nil, httpx.E(http.StatusRequestEntityTooLarge, "too_large", "the write is too large for the directory's log")
	}
	return nil, err
}

// memberProposer is the Proposer of a member: it proposes to the quorum
// while it leads it, and sends the proposal to the leader otherwise.
type memberProposer struct{ n *Node }

func (p memberProposer) Propose(ctx context.Context, kind string, at int64, op any) (any, error) {
	if p.n.quorum.IsLeader() {
		res, err := p.n.orderer.Propose(ctx, kind, at, op)
		if !errors.Is(err, errNotLeader) {
			return res, err
		}
	}
	return replicaProposer{p.n}.Propose(ctx, kind, at, op)
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

// dirView is what a node knows of who runs the directory. A bootstrap
// node knows it itself (alone, or from its quorum); another node starts
// with the first bootstrap peer and learns the quorum's members and
// leader from the bootstrap nodes' answers.
type dirView struct {
	n      *Node
	boots  []peer.AddrInfo
	voters []peer.AddrInfo

	mu      sync.Mutex
	told    bool // some bootstrap node told who runs the directory
	view    quorumView
	leader  peer.ID
	members map[peer.ID]bool // members heard of (their keys sign tokens and records)
}

// follower keeps this node's copy of the directory log current: a
// cmdlog.Replica, or Raft on a member of a quorum.
type follower interface {
	WaitFor(ctx context.Context, seq uint64) error
	Sync(ctx context.Context) error
	Status() (head uint64, caughtUp bool, err error)
}

func newDirView(n *Node, boots, voters []peer.AddrInfo) *dirView {
	v := &dirView{n: n, boots: boots, voters: voters, members: map[peer.ID]bool{}}
	for _, m := range voters {
		v.members[m.ID] = true
	}
	return v
}

// directory is the peer that orders writes: this node, alone; the leader
// of its quorum, for a member (empty while there is none); for other
// nodes, the leader last heard of (the first bootstrap peer until a
// bootstrap node told).
func (v *dirView) directory() peer.ID {
	switch {
	case v.n.role == RoleBootstrap && v.n.quorum == nil:
		return v.n.selfPeer()
	case v.n.quorum != nil:
		return v.n.quorum.Leader()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.told && len(v.boots) > 0 {
		return v.boots[0].ID
	}
	return v.leader
}

// isDirectory reports whether this node orders the directory's writes.
func (v *dirView) isDirectory() bool { return v.directory() == v.n.selfPeer() }

// isDirectoryPeer reports whether p runs the directory: a member of the
// quorum (or the single directory node).
func (v *dirView) isDirectoryPeer(p peer.ID) bool {
	switch {
	case v.n.role == RoleBootstrap && v.n.quorum == nil && len(v.n.cfg.Quorum) == 0:
		return p == v.n.selfPeer()
	case v.n.quorum != nil && v.n.quorum.IsMember(p):
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.told && v.n.role == RoleNode {
		return len(v.boots) > 0 && p == v.boots[0].ID
	}
	return v.members[p]
}

// trusted reports whether did names a directory whose tokens and DHT
// records this node accepts: a node that runs (or ran, since this node
// started) the directory.
func (v *dirView) trusted(did string) bool {
	pub, err := identity.PublicKeyFromDID(did)
	if err != nil {
		return false
	}
	p, err := p2p.PeerID(ed25519.PublicKey(pub))
	return err == nil && v.isDirectoryPeer(p)
}

// trustedAt reports whether did signed, at the given time, for the
// directory (tokens, DHT attestations, catalog imports): a member of the
// quorum then, as the log names them (Signers), so that a member's
// signatures outlive its removal until they expire, and nothing it signs
// after counts; the log's origin (a lone directory, or a quorum before
// its first leader named the members); or, while this node's copy of the
// log is not there yet, a member the bootstrap nodes name.
func (v *dirView) trustedAt(did string, at time.Time) bool {
	s := v.n.signers
	switch {
	case s.Trusted(did, at):
		return true
	case s.Removed(did):
		return false
	}
	if origin, err := v.n.clog.Origin(); err == nil && origin == did {
		return true
	}
	return v.trusted(did)
}

// isAdmin reports whether a catalog import signed by pub now comes from
// the directory: a member's key (any member's, whichever leads).
func (n *Node) isAdmin(pub ed25519.PublicKey) bool {
	return n.view.trustedAt(identity.DIDFromPublicKey(pub), n.cfg.Now())
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
				_, err := n.orderer.Propose(pctx, quorum.MembersKind, n.cfg.Now().UnixNano(), quorum.SignersOp{Members: voters})
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

// keepers are the nodes that keep cluster histories: every member of the
// quorum (a lone directory: itself; before a node heard of the members:
// none, the directory then takes them).
func (v *dirView) keepers() []peer.ID {
	if v.n.quorum != nil {
		var out []peer.ID
		for _, m := range v.n.quorum.Members() {
			out = append(out, m.ID)
		}
		return out
	}
	if v.n.role == RoleBootstrap {
		return []peer.ID{v.n.selfPeer()}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.told {
		return nil
	}
	var out []peer.ID
	for _, m := range v.view.Members {
		if id, err := peer.Decode(m.PeerID); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// source is the bootstrap node to copy the log from: the leader when
// connected, else any connected member; empty when none is.
func (v *dirView) source() peer.ID {
	h := v.n.host
	if d := v.directory(); d != "" && h.Connected(d) {
		return d
	}
	for _, p := range v.candidates() {
		if h.Connected(p) {
			return p
		}
	}
	return ""
}

// candidates are the nodes that may run the directory: the members heard
// of, then the configured bootstrap peers.
func (v *dirView) candidates() []peer.ID {
	v.mu.Lock()
	var out []peer.ID
	for p := range v.members {
		out = append(out, p)
	}
	v.mu.Unlock()
	slices.Sort(out)
	for _, b := range v.boots {
		if !slices.Contains(out, b.ID) {
			out = append(out, b.ID)
		}
	}
	return out
}

// heard records what a bootstrap node said of the directory. Members'
// addresses go to the peerstore, so that this node reaches a leader it
// was not configured with.
func (v *dirView) heard(q quorumView) {
	if v.n.quorum != nil || v.n.role == RoleBootstrap {
		return
	}
	members := map[peer.ID]bool{}
	ps := v.n.host.Libp2p().Peerstore()
	for _, m := range q.Members {
		id, err := peer.Decode(m.PeerID)
		if err != nil {
			continue
		}
		members[id] = true
		for _, s := range m.Addrs {
			if a, err := ma.NewMultiaddr(s); err == nil {
				if _, id2 := peer.SplitAddr(a); id2 == "" || id2 == id {
					ps.AddAddr(id, a, peerstore.AddressTTL)
				}
			}
		}
	}
	if len(members) == 0 {
		return
	}
	leader, _ := peer.Decode(q.Leader)
	v.mu.Lock()
	defer v.mu.Unlock()
	// A term older than the one already heard is a member that has not
	// heard of the last election yet.
	if v.told && q.Term < v.view.Term && v.leader != "" {
		return
	}
	v.told, v.view, v.leader = true, q, leader
	for id := range members {
		v.members[id] = true
	}
}

// last is the view last heard (ordinary nodes), naming the leader this
// node forwards to.
func (v *dirView) last() quorumView {
	v.mu.Lock()
	out := v.view
	v.mu.Unlock()
	out.Leader = v.directory().String()
	if v.directory() == "" {
		out.Leader = ""
	}
	return out
}

// notLeader records that p answered it does not lead (hint: the leader it
// knows, possibly empty).
func (v *dirView) notLeader(p peer.ID, hint string) {
	if v.n.quorum != nil {
		return // Raft tells a member
	}
	h, _ := peer.Decode(hint)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.told = true
	if v.leader == p || v.leader == "" {
		v.leader = ""
		if h != p && v.members[h] {
			v.leader = h
		}
	}
}

// directoryFor returns the peer to send a write to, waiting (within ctx,
// ForwardRetry between tries) while no leader is known but a node that
// runs the directory is reachable: an election is under way. Without any
// such node reachable, it fails at once: the client hears 503 now rather
// than after the forward timeout.
func (v *dirView) directoryFor(ctx context.Context) (peer.ID, error) {
	self := v.n.selfPeer()
	for {
		d := v.directory()
		if d != "" && d != self && v.n.host.Connected(d) {
			return d, nil
		}
		if d == self {
			return "", errNotLeader // became leader meanwhile: the client retries here
		}
		if v.n.quorum == nil && !v.refresh(ctx) {
			return "", errNoDirectory
		}
		if d := v.directory(); d != "" && d != self && v.n.host.Connected(d) {
			return d, nil
		}
		if v.n.quorum != nil && !v.anyMemberConnected() {
			return "", errNoDirectory
		}
		select {
		case <-ctx.Done():
			return "", errNoDirectory.With("no leader of the directory's quorum was reachable: %v", context.Cause(ctx))
		case <-time.After(v.n.cfg.ForwardRetry):
		}
	}
}

func (v *dirView) anyMemberConnected() bool {
	for _, m := range v.n.quorum.Members() {
		if m.ID != v.n.selfPeer() && v.n.host.Connected(m.ID) {
			return true
		}
	}
	return false
}

// refresh asks the connected bootstrap nodes who leads (an ordinary node);
// it reports whether any answered.
func (v *dirView) refresh(ctx context.Context) bool {
	answered := false
	for _, p := range v.candidates() {
		if !v.n.host.Connected(p) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		raw, err := v.n.host.Request(rctx, p, quorumProto, []byte("{}"), maxQuorumRes)
		cancel()
		var q quorumView
		if err != nil || json.Unmarshal(raw, &q) != nil {
			continue
		}
		answered = true
		v.heard(q)
		if q.Leader != "" {
			if id, err := peer.Decode(q.Leader); err == nil && v.n.host.Connected(id) {
				return true
			} else if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				v.n.host.Connect(cctx, peer.AddrInfo{ID: id})
				cancel()
				return true
			}
		}
	}
	return answered
}
