package wall

import (
	"context"
	"errors"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// Who becomes a known node. A known node costs a room: acks wait for its
// receipt (up to AckWindow), its view holds up to maxPending deltas and
// its sequencer maxHeld messages, and a room keeps up to maxNodes of them.
// A roster exchange proves a node serves a private cluster (the roster is
// sealed with the wire key), but in a public cluster anyone can make one
// up. So there a node becomes known only if it is registered at the
// rendezvous for the cluster's topic, as every node serving the cluster is
// (a room registers before it asks, sync), and at the cost the rendezvous
// bounds (1,000 registrations a namespace): the rendezvous vouches for it.
// The nodes a room asks come from the rendezvous; a node that asks
// (serveRoster), or a stranger whose roster is fetched (fetchRoster), is
// checked there.
//
// A rendezvous node checks its own registry (Host.Served, which still
// counts a registration that ended in the last 90 s). Another node cannot
// see the registrations: it remembers who its room's lookups found (at its start, every renewal) and
// looks again for a node they did not find. A lookup that began after the
// node asked finds it if it registered first (a rendezvous node answers in
// request order). Asks waiting for a lookup share it: one at a time per
// room, at most lookupRate a second in bursts of lookupBurst (a flood of
// asks costs the rendezvous a few lookups a second, while the nodes of a
// cluster joining at once wait for none), each bounded by half the
// SyncTimeout the asker gives the exchange. With no rendezvous reachable,
// nobody is vouched for: the nodes that registered meanwhile are fetched
// when the room renews, or when a rendezvous node connects (again).

// lookupRate and lookupBurst pace the lookups a room makes for the nodes
// asking it.
const (
	lookupRate  = 5
	lookupBurst = 4
)

// errUnvouched: the node is not registered at the rendezvous for the
// cluster, so it does not become a known node.
var errUnvouched = errors.New("wall: the node is not registered at the rendezvous for the cluster")

// registrants is what a room's lookups found at the rendezvous.
type registrants struct {
	mu    sync.Mutex
	peers map[peer.ID]bool // found by the latest lookup that got an answer
	// looked numbers the latest lookup that ended (answered or not):
	// Service.lookups counts the lookups begun on the node.
	looked uint64
	// lookups paces the lookups made for asks (lookupForAsks).
	lookups *rate.Limiter
	// next is closed when the lookup that asks wait for ends; nil when none
	// runs.
	next chan struct{}
}

// note records what lookup number n found (peers), or that no rendezvous
// node answered it (err).
func (g *registrants) note(n uint64, peers []peer.AddrInfo, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n < g.looked {
		return // a later lookup ended first
	}
	g.looked = n
	if err != nil {
		return // those found before were registered then
	}
	g.peers = make(map[peer.ID]bool, len(peers))
	for _, p := range peers {
		g.peers[p.ID] = true
	}
}

// check reports whether p was found (found), and whether that is settled:
// found, or not found by a lookup begun after the first since lookups
// (asked). When it is not, it returns the channel that closes when the
// next lookup ends, and with start the caller is to run that lookup.
func (g *registrants) check(p peer.ID, since uint64) (found, settled bool, next <-chan struct{}, start bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.peers[p] || g.looked > since {
		return g.peers[p], true, nil, false
	}
	if g.next == nil {
		g.next = make(chan struct{})
		start = true
	}
	return false, false, g.next, start
}

// rendezvous registers the room at the rendezvous (register) or only
// looks, and returns the other nodes registered there, which the room
// remembers as vouched for.
func (r *room) rendezvous(ctx context.Context, register bool) ([]peer.AddrInfo, error) {
	n := r.svc.lookups.Add(1)
	peers, err := r.svc.cfg.Host.Rendezvous(ctx, topicOf(r.cl), register)
	r.regs.note(n, peers, err)
	return peers, err
}

// asked marks when a node asks, or is heard: the lookups begun so far, of
// which only later ones may settle whether it is registered (vouched).
func (s *Service) asked() uint64 { return s.lookups.Load() }

// vouched reports whether node p, which asked (or was heard) once the
// node had begun since lookups (asked), may be a known node: it is known already, the cluster is private, or the
// rendezvous has p registered for the cluster (a rendezvous node checks
// its own registry; another asks, see above). It gives up when ctx ends.
func (r *room) vouched(ctx context.Context, p peer.ID, since uint64) bool {
	if !r.cl.Public() || r.known(p) || r.svc.cfg.Host.Served(topicName(r.cl.ID), p) {
		return true
	}
	for {
		found, settled, next, start := r.regs.check(p, since)
		if settled {
			return found
		}
		if start {
			r.goroutine(r.lookupForAsks)
		}
		select {
		case <-next:
		case <-ctx.Done():
			return false
		case <-r.ctx.Done():
			return false
		}
	}
}

// lookupForAsks looks at the rendezvous for the nodes waiting in vouched,
// as soon as the pace of such lookups allows.
func (r *room) lookupForAsks() {
	g := &r.regs
	defer func() {
		g.mu.Lock()
		close(g.next)
		g.next = nil
		g.mu.Unlock()
	}()
	if g.lookups.Wait(r.ctx) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.SyncTimeout/2)
	defer cancel()
	r.rendezvous(ctx, false)
}

// known reports whether node p is a known node of the room.
func (r *room) known(p peer.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.remote[p]
	return n != nil && n.known
}
