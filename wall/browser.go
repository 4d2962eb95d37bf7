package wall

import (
	"maps"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Browser peers (docs/wire.md, Browser peers): a web page that joins a
// cluster as a libp2p peer of its own, over WebTransport or WebRTC-direct
// (p2p/browser.go). To the wall it is one more node of the cluster, with
// a room of one member: it exchanges rosters, beats, publishes and sends
// receipts as a node does, and becomes known the same way. Two things set
// it apart, both for the node it is connected to:
//
//   - Nobody can dial it: it reaches the cluster through the nodes it
//     dials. A node that does not serve a public cluster, asked by a
//     browser peer connected to it to exchange rosters for that cluster,
//     starts serving it (a room held for the peer, with no socket of its
//     own), so that the page's messages and the cluster's reach each
//     other through it, whoever else serves the cluster. The room is
//     held until the peer's last browser connection closes, for at most
//     maxHolds clusters per peer.
//   - Its connection closing is its goodbye: a page that stops (its tab
//     closed) takes its members offline on every node it was connected
//     to once its messages are delivered, as on a goodbye that came
//     first, not PresenceTimeout later.

// maxHolds bounds the public clusters one browser peer may have a node
// serve for it: a page joins one, a few tabs sharing a key several.
const maxHolds = 4

// hold has this node serve public cluster id for browser peer p, and
// returns its room; nil when the cluster is not a public one of the
// catalog (the directory is not asked: the page came from this node, which
// knew the cluster), p holds maxHolds rooms already, or the room could not
// start.
func (s *Service) hold(id string, p peer.ID) *room {
	cl, err := s.cfg.Catalog.Lookup(id)
	if err != nil || cl.ID != id || s.holdsOf(p, id) >= maxHolds { // an id, not a slug
		return nil
	}
	r, err := s.openRoom(cl, "", nil, func(r *room) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			return errRoomClosed
		}
		r.holds[p] = true
		return nil
	})
	if err != nil {
		return nil
	}
	return r
}

// holdsOf counts the rooms held for p, but cluster id's.
func (s *Service) holdsOf(p peer.ID, id string) int {
	n := 0
	for _, r := range s.allRooms() {
		r.mu.Lock()
		if r.holds[p] && r.cl.ID != id {
			n++
		}
		r.mu.Unlock()
	}
	return n
}

func (s *Service) allRooms() []*room {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.rooms))
}

// browserGone acts on the close of browser peer p's last connection: in
// every room, p's members go offline once its messages are delivered, and
// a room held for p alone closes.
func (s *Service) browserGone(p peer.ID) {
	s.goroutine(func() {
		for _, r := range s.allRooms() {
			select {
			case <-r.ready:
			case <-s.ctx.Done():
				return
			}
			if r.browserGone(p) {
				s.retire(r, func() { r.shutdown(true) })
			}
		}
	})
}

// browserGone takes browser peer p out of the room: its view goes as on a
// goodbye, and its hold. It reports whether that leaves the room vacant:
// the room is then closed, for the caller to retire.
func (r *room) browserGone(p peer.ID) (last bool) {
	r.change(nil, func(touch func(string)) {
		switch n := r.remote[p]; {
		case n == nil:
		case n.epoch == 0:
			r.dropLocked(p, n, touch) // a stranger's view, of no roster
		case n.bye == nil:
			n.bye = &wireMsg{T: wireBye, Epoch: n.epoch, Seq: maxCount}
			r.settleLocked(p, n, touch)
		}
		if r.holds[p] {
			delete(r.holds, p)
			last = r.vacantLocked() && !r.closed
			r.closed = r.closed || last
		}
	})
	return last
}

// vacantLocked reports whether the room has neither a socket nor a
// browser peer holding it.
func (r *room) vacantLocked() bool { return len(r.sockets) == 0 && len(r.holds) == 0 }

// PeerAddrs are what a page needs to join a cluster as a browser peer.
type PeerAddrs struct {
	// Home are this node's addresses a browser can dial (current
	// certificate hashes included); empty when it does not listen for
	// browsers.
	Home []string
	// Rendezvous are the rendezvous nodes' (this node's among them when
	// it is one), where a page registers the cluster's topic.
	Rendezvous []string
}

// PeerAddrs returns the addresses a page dials to join a cluster.
func (s *Service) PeerAddrs() PeerAddrs {
	h := s.cfg.Host
	return PeerAddrs{Home: h.BrowserAddrs(), Rendezvous: h.RendezvousBrowserAddrs()}
}
