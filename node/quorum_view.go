package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/quorum"
)

// quorumView is a node's view of who runs the directory, as it crosses
// the wire, /health and `mesh quorum list` show it.
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
	// URL is the HTTP API of the node whose view it is.
	URL string `json:"url,omitempty"`
}

// memberView is a member of the quorum as a member sees it (an ordinary
// node shows what a member told it last).
type memberView struct {
	PeerID string `json:"peer_id"`
	Voter  bool   `json:"voter"`
	Leader bool   `json:"leader"`
	// Addrs are its full multiaddrs (…/p2p/<peer id>), as it names them.
	Addrs []string `json:"addrs,omitempty"`
	// URL is its HTTP API, once it answered a probe.
	URL string `json:"url,omitempty"`
	// Reachable: it answered the last probe (every probeEvery), or, not
	// probed yet, is connected; LastContact is when it last answered.
	Reachable   bool       `json:"reachable"`
	LastContact *time.Time `json:"last_contact,omitempty"`
}

// healthQuorum is the quorum part of /health.
type healthQuorum struct {
	quorumView
	// Lag is how many entries this node has yet to apply: of the quorum's
	// committed log on a member, of the directory's head elsewhere.
	Lag   uint64 `json:"lag"`
	State string `json:"state,omitempty"` // a member's Raft state
	Error string `json:"error,omitempty"` // why writes cannot be served now
	// Unreachable are the members that did not answer their last probe.
	Unreachable []string `json:"unreachable,omitempty"`
}

// quorumView is this node's view (bootstrap nodes: their own state).
func (n *Node) quorumView() quorumView {
	self := n.host.ID()
	if n.quorum == nil && n.role == RoleBootstrap {
		v := quorumView{Leader: self.String(), CommitIndex: n.clog.Seq(), Seq: n.clog.Seq(), URL: n.URL()}
		v.Members = []memberView{n.contacts.view(n, quorum.Member{ID: self, Voter: true})}
		v.Members[0].Leader = true
		return v
	}
	if n.quorum == nil {
		return n.view.last()
	}
	st := n.quorum.Status()
	v := quorumView{Leader: st.Leader.String(), Term: st.Term, CommitIndex: st.CommitIndex, Seq: n.clog.Seq(), URL: n.URL()}
	for _, m := range st.Members {
		mv := n.contacts.view(n, m)
		mv.Leader = m.ID == st.Leader
		v.Members = append(v.Members, mv)
	}
	return v
}

func (n *Node) healthQuorum(head uint64) *healthQuorum {
	h := &healthQuorum{quorumView: n.quorumView()}
	for _, m := range h.Members {
		if !m.Reachable {
			h.Unreachable = append(h.Unreachable, m.PeerID)
		}
	}
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

// Liveness: a member asks each other member who leads (quorumProto)
// every probeEvery; whether it answered, when it last did, and its URL
// and addresses as it names them go into the member's view, which other
// nodes copy with each answer of a member.
const (
	probeEvery   = time.Second
	probeTimeout = time.Second
)

// contact is what a member's probes learnt of another.
type contact struct {
	url      string
	addrs    []string
	last     time.Time // its last answer
	answered bool      // to the last probe
}

// contacts are a member's contacts with the others.
type contacts struct {
	mu   sync.Mutex
	seen map[peer.ID]contact
}

// view is member m as this node sees it.
func (c *contacts) view(n *Node, m quorum.Member) memberView {
	mv := memberView{PeerID: m.ID.String(), Voter: m.Voter}
	if m.ID == n.host.ID() {
		now := n.cfg.Now().UTC()
		mv.Addrs, mv.URL, mv.Reachable, mv.LastContact = n.host.Addrs(), n.URL(), true, &now
		return mv
	}
	c.mu.Lock()
	ct, probed := c.seen[m.ID]
	c.mu.Unlock()
	mv.URL, mv.Addrs, mv.Reachable = ct.url, ct.addrs, ct.answered
	if !probed {
		mv.Reachable = n.host.Connected(m.ID)
	}
	if !ct.last.IsZero() {
		last := ct.last.UTC()
		mv.LastContact = &last
	}
	if len(mv.Addrs) == 0 { // not heard from: what the peerstore holds
		for _, a := range n.host.Libp2p().Peerstore().Addrs(m.ID) {
			mv.Addrs = append(mv.Addrs, a.String()+"/p2p/"+m.ID.String())
		}
	}
	return mv
}

// probeMembers keeps a member's contacts with the others.
func (n *Node) probeMembers(ctx context.Context) {
	probe := func() {
		members := n.quorum.Members()
		var wg sync.WaitGroup
		for _, m := range members {
			if m.ID != n.host.ID() {
				wg.Go(func() { n.contacts.probe(ctx, n, m.ID) })
			}
		}
		wg.Wait()
		n.contacts.forget(members)
	}
	probe()
	every(ctx, probeEvery, probe)
}

func (c *contacts) probe(ctx context.Context, n *Node, p peer.ID) {
	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	raw, err := n.host.Request(rctx, p, quorumProto, []byte("{}"), maxQuorumRes)
	cancel()
	var v quorumView
	if err == nil {
		err = json.Unmarshal(raw, &v)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[peer.ID]contact{}
	}
	ct := c.seen[p]
	ct.answered = err == nil
	if err == nil {
		ct.last, ct.url = n.cfg.Now(), v.URL
		if i := slices.IndexFunc(v.Members, func(m memberView) bool { return m.PeerID == p.String() }); i >= 0 {
			ct.addrs = v.Members[i].Addrs
		}
	}
	c.seen[p] = ct
}

// forget drops what is known of former members.
func (c *contacts) forget(members []quorum.Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.seen {
		if !slices.ContainsFunc(members, func(m quorum.Member) bool { return m.ID == p }) {
			delete(c.seen, p)
		}
	}
}
