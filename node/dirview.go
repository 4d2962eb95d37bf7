package node

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/quorum"
	"github.com/agentmesh/mesh/p2p"
)

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
	// moved is closed, and replaced, when the directory this node knows of
	// changes: a write on its way to the former one is sent again.
	moved chan struct{}
	asked time.Time // when the bootstrap nodes were last asked (refresh)
}

// follower keeps this node's copy of the directory log current: a
// cmdlog.Replica, or Raft on a member of a quorum.
type follower interface {
	WaitFor(ctx context.Context, seq uint64) error
	Sync(ctx context.Context) error
	Status() (head uint64, caughtUp bool, err error)
}

func newDirView(n *Node, boots, voters []peer.AddrInfo) *dirView {
	v := &dirView{n: n, boots: boots, voters: voters, members: map[peer.ID]bool{}, moved: make(chan struct{})}
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

// heardMembers reports whether this node can tell who runs the directory:
// a bootstrap node can; another once a bootstrap node named the members.
// Until then it trusts its first bootstrap peer alone, and cannot tell a
// member it was not configured with (the leader, when it joined through
// a follower) from a stranger.
func (v *dirView) heardMembers() bool {
	if v.n.role != RoleNode {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.members) > 0
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
				if t, id2 := peer.SplitAddr(a); t != nil && (id2 == "" || id2 == id) {
					ps.AddAddr(id, t, peerstore.AddressTTL)
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
	// heard of the last election yet (its leader may be the dead one).
	if v.told && q.Term < v.view.Term {
		return
	}
	if !v.told || leader != v.leader {
		v.moveLocked()
	}
	v.told, v.view, v.leader = true, q, leader
	for id := range members {
		v.members[id] = true
	}
}

// move signals that the directory this node knows of changed (a member
// learns it from Raft).
func (v *dirView) move() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.moveLocked()
}

func (v *dirView) moveLocked() {
	close(v.moved)
	v.moved = make(chan struct{})
}

// watch returns the node that orders writes and a channel closed once
// that changes.
func (v *dirView) watch() (peer.ID, <-chan struct{}) {
	v.mu.Lock()
	moved := v.moved
	v.mu.Unlock()
	return v.directory(), moved
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
	out.Members = slices.Clone(out.Members)
	if out.Members == nil { // no bootstrap node answered yet: still a list
		out.Members = []memberView{}
	}
	for i := range out.Members {
		out.Members[i].Leader = out.Members[i].PeerID == out.Leader
	}
	out.URL = v.n.URL()
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
	was := v.leader
	if !v.told && len(v.boots) > 0 {
		was = v.boots[0].ID
	}
	v.told = true
	if v.leader == p || v.leader == "" {
		v.leader = ""
		if h != p && v.members[h] {
			v.leader = h
		}
	}
	if v.leader != was {
		v.moveLocked()
	}
}

// directoryFor returns the node to send a write to (this node itself,
// when it leads), and a channel closed once that changes; it waits
// (within ctx, ForwardRetry between tries) while no leader is known but a
// node that runs the directory is reachable: an election is under way.
// Without any such node reachable, it fails at once: the client hears 503
// now rather than after the forward timeout.
func (v *dirView) directoryFor(ctx context.Context) (peer.ID, <-chan struct{}, error) {
	self := v.n.selfPeer()
	for {
		d, moved := v.watch()
		if d == self || (d != "" && v.n.host.Connected(d)) {
			return d, moved, nil
		}
		if v.n.quorum == nil && !v.refresh(ctx) {
			return "", nil, errNoDirectory
		}
		if d, moved := v.watch(); d != "" && v.n.host.Connected(d) {
			return d, moved, nil
		}
		if v.n.quorum != nil && !v.anyMemberConnected() {
			return "", nil, errNoDirectory
		}
		select {
		case <-ctx.Done():
			return "", nil, errNoDirectory.With("no leader of the directory's quorum was reachable; retry later").Because(context.Cause(ctx))
		case <-moved:
		case <-time.After(v.n.cfg.ForwardRetry):
		}
	}
}

// whileLeads is ctx, cancelled once the node that orders writes is no
// longer the one it was when moved was taken: a write on its way there is
// dropped, to be sent to the next. A member learns of an election from
// Raft; another node asks the bootstrap nodes while the write is on its
// way (refresh), since a leader that died may leave a connection that
// looks alive for a while (QUIC).
func (v *dirView) whileLeads(ctx context.Context, moved <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		tick := time.NewTicker(askEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-moved:
				cancel()
				return
			case <-tick.C:
				if v.n.quorum == nil {
					v.refresh(ctx)
				}
			}
		}
	}()
	return ctx, cancel
}

// several reports whether the directory is run by a quorum of several
// voters, where another member may take over a write the leader did not
// answer.
func (v *dirView) several() bool {
	if v.n.quorum != nil {
		return quorum.Voters(v.n.quorum.Members()) > 1
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	k := 0
	for _, m := range v.view.Members {
		if m.Voter {
			k++
		}
	}
	return k > 1
}

// askEvery is how often a node asks the bootstrap nodes who leads while a
// write is on its way to the leader it knows of.
const askEvery = 500 * time.Millisecond

func (v *dirView) anyMemberConnected() bool {
	for _, m := range v.n.quorum.Members() {
		if m.ID != v.n.selfPeer() && v.n.host.Connected(m.ID) {
			return true
		}
	}
	return false
}

// refresh asks the connected bootstrap nodes who leads (an ordinary node),
// all at once, at most every askEvery/2; it reports whether any answered.
// The answer of the latest term wins (heard).
func (v *dirView) refresh(ctx context.Context) bool {
	v.mu.Lock()
	if time.Since(v.asked) < askEvery/2 {
		told := v.told
		v.mu.Unlock()
		return told
	}
	v.asked = time.Now()
	v.mu.Unlock()
	var views []quorumView
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range v.candidates() {
		if !v.n.host.Connected(p) {
			continue
		}
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			raw, err := v.n.host.Request(rctx, p, quorumProto, []byte("{}"), maxQuorumRes)
			cancel()
			var q quorumView
			if err == nil && json.Unmarshal(raw, &q) == nil {
				mu.Lock()
				views = append(views, q)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// The latest term last, and in it a member that knows the leader.
	slices.SortFunc(views, func(a, b quorumView) int {
		return cmp.Or(cmp.Compare(a.Term, b.Term), cmp.Compare(len(a.Leader), len(b.Leader)))
	})
	for _, q := range views {
		v.heard(q)
	}
	if d := v.directory(); d != "" && !v.n.host.Connected(d) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v.n.host.Connect(cctx, peer.AddrInfo{ID: d})
		cancel()
	}
	return len(views) > 0
}
