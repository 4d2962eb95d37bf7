package p2p

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"
)

// The rendezvous: nodes that serve a namespace (an opaque string, such as
// a gossipsub topic) register it with the rendezvous nodes (bootstrap
// nodes) and learn who else did, then connect to them. Registrations are
// soft state: they lapse after RendezvousTTL unless renewed, so a node that
// dies drops out by itself. A rendezvous node answers in the order it
// receives requests, so a node that registered is seen by every later
// lookup, which provider records in the DHT do not promise.
const (
	rendezvousProto = ProtocolPrefix + "/rendezvous/1.0.0"
	// RendezvousTTL is how long a registration lasts; renew well before.
	RendezvousTTL = 90 * time.Second
	// servedGrace is how long after its registration ended (lapsed or
	// withdrawn) a node still counts as having served a namespace, for
	// what it reports on its way out (Served).
	servedGrace = RendezvousTTL
	// Bounds on what one rendezvous node keeps and returns: namespaces,
	// registrations in one namespace, registrations of one peer (a node
	// registers each cluster it has sockets in) and registrations in all,
	// each kept until its grace period ends. A registration past a bound
	// is not kept (the others are still returned).
	maxRendezvousNS      = 100_000
	maxRendezvousPeers   = 1000
	maxRendezvousPerPeer = 10_000
	maxRendezvousEntries = 200_000
	maxRendezvousReq     = 4 << 10
	maxRendezvousResp    = 1 << 20
	maxNSLen             = 256
	maxAddrsPerPeer      = 8
)

type rendezvousRequest struct {
	NS         string `json:"ns"`
	Register   bool   `json:"register,omitempty"`
	Unregister bool   `json:"unregister,omitempty"`
}

type rendezvousPeer struct {
	ID    string   `json:"id"`
	Addrs []string `json:"addrs"`
}

type rendezvousResponse struct {
	Peers []rendezvousPeer `json:"peers"`
}

// registry is a rendezvous node's state: namespace -> peer -> expiry. A
// registration that ended stays servedGrace past its expiry, not live.
type registry struct {
	mu      sync.Mutex
	reg     map[string]map[peer.ID]time.Time
	perPeer map[peer.ID]int // registrations kept, by peer
	total   int             // registrations kept
}

func newRegistry() *registry {
	return &registry{reg: map[string]map[peer.ID]time.Time{}, perPeer: map[peer.ID]int{}}
}

// room reports whether from may hold one more registration.
func (r *registry) room(from peer.ID) bool {
	return r.total < maxRendezvousEntries && r.perPeer[from] < maxRendezvousPerPeer
}

// drop forgets p's registration in peers.
func (r *registry) drop(peers map[peer.ID]time.Time, p peer.ID) {
	delete(peers, p)
	r.total--
	if r.perPeer[p]--; r.perPeer[p] <= 0 {
		delete(r.perPeer, p)
	}
}

// apply registers or unregisters from in q.NS and returns the other live
// registrants, and whether from registered anew (not a renewal).
func (r *registry) apply(from peer.ID, q rendezvousRequest, now time.Time) (others []peer.ID, fresh bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	peers := r.reg[q.NS]
	r.prune(peers, now)
	switch {
	case q.Unregister:
		if exp, ok := peers[from]; ok && now.Before(exp) {
			peers[from] = now
		}
	case q.Register && from != "":
		_, had := peers[from]
		if peers == nil && len(r.reg) < maxRendezvousNS {
			peers = map[peer.ID]time.Time{}
			r.reg[q.NS] = peers
		}
		if peers != nil && !had && len(peers) >= maxRendezvousPeers {
			r.dropEnded(peers, now) // a live registration goes before a grace period
		}
		if peers != nil && (had || len(peers) < maxRendezvousPeers && r.room(from)) {
			fresh = !now.Before(peers[from]) // none, or one that had ended
			peers[from] = now.Add(RendezvousTTL)
			if !had {
				r.total++
				r.perPeer[from]++
			}
		}
	}
	if len(peers) == 0 {
		delete(r.reg, q.NS)
	}
	others = make([]peer.ID, 0, len(peers))
	for p, exp := range peers {
		if p != from && now.Before(exp) {
			others = append(others, p)
		}
	}
	return others, fresh
}

// prune forgets the registrations in peers whose grace period is over.
func (r *registry) prune(peers map[peer.ID]time.Time, now time.Time) {
	for p, exp := range peers {
		if now.After(exp.Add(servedGrace)) {
			r.drop(peers, p)
		}
	}
}

// sweep prunes every namespace and drops the empty ones: a namespace
// nobody asks about again would otherwise stay, and count against
// maxRendezvousNS, for ever.
func (r *registry) sweep(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ns, peers := range r.reg {
		if r.prune(peers, now); len(peers) == 0 {
			delete(r.reg, ns)
		}
	}
}

// dropEnded forgets the registration in peers that ended first, if one
// has ended.
func (r *registry) dropEnded(peers map[peer.ID]time.Time, now time.Time) {
	var first peer.ID
	var end time.Time
	for p, exp := range peers {
		if !exp.After(now) && (first == "" || exp.Before(end)) {
			first, end = p, exp
		}
	}
	if first != "" {
		r.drop(peers, first)
	}
}

// served reports whether p is registered in ns, or was less than
// servedGrace ago.
func (r *registry) served(ns string, p peer.ID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	exp, ok := r.reg[ns][p]
	return ok && now.Before(exp.Add(servedGrace))
}

// serving reports whether any peer is registered in ns now.
func (r *registry) serving(ns string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, exp := range r.reg[ns] {
		if now.Before(exp) {
			return true
		}
	}
	return false
}

// serveRendezvous makes this node a rendezvous node.
func (h *Host) serveRendezvous() {
	h.rendezvous = newRegistry()
	h.HandleRequests(rendezvousProto, maxRendezvousReq, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		var q rendezvousRequest
		if err := json.Unmarshal(req, &q); err != nil || q.NS == "" || len(q.NS) > maxNSLen {
			return nil, errors.New("malformed rendezvous request")
		}
		return json.Marshal(rendezvousResponse{Peers: h.peerInfos(h.applyRendezvous(from, q))})
	})
	h.goroutine(func() {
		tick := time.NewTicker(servedGrace)
		defer tick.Stop()
		for {
			select {
			case <-h.ctx.Done():
				return
			case now := <-tick.C:
				h.rendezvous.sweep(now)
			}
		}
	})
}

// applyRendezvous applies q from peer from to this rendezvous node's
// registry, tells the OnRendezvousRegister hooks of a new registration,
// and returns the other live registrants.
func (h *Host) applyRendezvous(from peer.ID, q rendezvousRequest) []peer.ID {
	others, fresh := h.rendezvous.apply(from, q, time.Now())
	if fresh {
		h.mu.Lock()
		fns := slices.Clone(h.onRegister)
		h.mu.Unlock()
		for _, fn := range fns {
			fn(q.NS)
		}
	}
	return others
}

// peerInfos are the known addresses of ids, as the rendezvous returns them.
func (h *Host) peerInfos(ids []peer.ID) []rendezvousPeer {
	out := make([]rendezvousPeer, 0, len(ids))
	for _, id := range ids {
		rp := rendezvousPeer{ID: id.String(), Addrs: []string{}}
		for _, a := range mixAddrs(h.h.Peerstore().Addrs(id), maxAddrsPerPeer) {
			rp.Addrs = append(rp.Addrs, a.String())
		}
		out = append(out, rp)
	}
	return out
}

// mixAddrs picks at most n of addrs, taking each transport's in turn (TCP,
// QUIC, WebTransport, WebRTC-direct, others), so that a peer with many
// addresses is still reachable by every transport its asker may have (a
// browser has only the last two).
func mixAddrs(addrs []ma.Multiaddr, n int) []ma.Multiaddr {
	kind := func(a ma.Multiaddr) int {
		for _, code := range []int{ma.P_WEBTRANSPORT, ma.P_WEBRTC_DIRECT, ma.P_QUIC_V1, ma.P_TCP} {
			if _, err := a.ValueForProtocol(code); err == nil {
				return code
			}
		}
		return 0
	}
	byKind := map[int][]ma.Multiaddr{}
	for _, a := range addrs {
		byKind[kind(a)] = append(byKind[kind(a)], a)
	}
	order := []int{ma.P_TCP, ma.P_QUIC_V1, ma.P_WEBTRANSPORT, ma.P_WEBRTC_DIRECT, 0}
	var out []ma.Multiaddr
	for i := 0; len(out) < min(n, len(addrs)); i++ {
		for _, k := range order {
			if i < len(byKind[k]) && len(out) < n {
				out = append(out, byKind[k][i])
			}
		}
	}
	return out
}

// Rendezvous registers this node under ns with every rendezvous node (the
// bootstrap peers, and this node if it is one) when register is set, or
// only looks, and returns the other nodes registered there, their addresses
// put in the peerstore. It fails only when no rendezvous node answered.
func (h *Host) Rendezvous(ctx context.Context, ns string, register bool) ([]peer.AddrInfo, error) {
	return h.rendezvousCall(ctx, rendezvousRequest{NS: ns, Register: register})
}

// Served reports whether peer p is registered under ns at this rendezvous
// node, or was until recently (servedGrace); always false on a node that
// is not a rendezvous node. It tells a service whether p plausibly serves
// what ns names.
func (h *Host) Served(ns string, p peer.ID) bool {
	return h.rendezvous != nil && h.rendezvous.served(ns, p, time.Now())
}

// Serving reports whether some peer is registered under ns at this
// rendezvous node now; always false on a node that is not one.
func (h *Host) Serving(ns string) bool {
	return h.rendezvous != nil && h.rendezvous.serving(ns, time.Now())
}

// OnRendezvousRegister registers fn to learn (it must not block) of every
// new registration at this rendezvous node (not of renewals): the
// namespace some node now serves.
func (h *Host) OnRendezvousRegister(fn func(ns string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onRegister = append(h.onRegister, fn)
}

// OnRendezvousNode registers fn to learn (it must not block) of every
// rendezvous node that connects to this node and identifies, again after
// each reconnection. One that restarted has forgotten every registration:
// a service registers again at once, instead of at its next renewal, so
// that nodes asking the restarted one meanwhile find it.
func (h *Host) OnRendezvousNode(fn func(peer.ID)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onRendezvous = append(h.onRendezvous, fn)
}

func (h *Host) rendezvousNodeUp(p peer.ID) {
	h.mu.Lock()
	fns := slices.Clone(h.onRendezvous)
	h.mu.Unlock()
	for _, fn := range fns {
		fn(p)
	}
}

// Unregister withdraws this node's registration under ns.
func (h *Host) Unregister(ctx context.Context, ns string) {
	h.rendezvousCall(ctx, rendezvousRequest{NS: ns, Unregister: true})
}

func (h *Host) rendezvousCall(ctx context.Context, q rendezvousRequest) ([]peer.AddrInfo, error) {
	found := map[peer.ID]bool{}
	answered := false
	if h.rendezvous != nil {
		answered = true
		for _, p := range h.applyRendezvous(h.h.ID(), q) {
			found[p] = true
		}
	}
	req, _ := json.Marshal(q)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range h.otherBootstrapPeers() {
		if !h.Connected(b.ID) {
			continue
		}
		wg.Go(func() {
			raw, err := h.Request(ctx, b.ID, rendezvousProto, req, maxRendezvousResp)
			var resp rendezvousResponse
			if err != nil || json.Unmarshal(raw, &resp) != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			answered = true
			for _, rp := range resp.Peers {
				if id := h.learnPeer(rp); id != "" {
					found[id] = true
				}
			}
		})
	}
	wg.Wait()
	if !answered {
		return nil, ErrNoPeer
	}
	out := make([]peer.AddrInfo, 0, len(found))
	for id := range found {
		if id != h.h.ID() {
			out = append(out, peer.AddrInfo{ID: id, Addrs: h.h.Peerstore().Addrs(id)})
		}
	}
	return out, nil
}

// learnPeer puts a rendezvous answer's addresses in the peerstore.
func (h *Host) learnPeer(rp rendezvousPeer) peer.ID {
	id, err := peer.Decode(rp.ID)
	if err != nil {
		return ""
	}
	for _, s := range rp.Addrs {
		if a, err := ma.NewMultiaddr(s); err == nil {
			h.h.Peerstore().AddAddr(id, a, peerstore.TempAddrTTL)
		}
	}
	return id
}
