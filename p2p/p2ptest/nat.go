// Package p2ptest has helpers for tests that run libp2p hosts in one
// process: a connection gater that puts nodes behind simulated NATs.
package p2ptest

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// NAT is a connection gater standing for a NAT between its host and a set
// of peers: direct connections with them, dialled or accepted, are refused;
// relayed ones (through a circuit relay) pass. Give each side of a pair its
// own NAT naming the other, and neither can reach the other directly, hole
// punching included.
type NAT struct {
	mu      sync.Mutex
	blocked map[peer.ID]bool
}

var _ connmgr.ConnectionGater = (*NAT)(nil)

// NewNAT returns a gater that blocks direct connections with peers.
func NewNAT(peers ...peer.ID) *NAT {
	n := &NAT{blocked: map[peer.ID]bool{}}
	for _, p := range peers {
		n.blocked[p] = true
	}
	return n
}

// Block adds p to the peers that cannot be reached directly.
func (n *NAT) Block(p peer.ID) {
	n.mu.Lock()
	n.blocked[p] = true
	n.mu.Unlock()
}

func (n *NAT) refuses(p peer.ID, a ma.Multiaddr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.blocked[p] && !IsRelayed(a)
}

// IsRelayed reports whether a is a circuit relay address.
func IsRelayed(a ma.Multiaddr) bool {
	if a == nil {
		return false
	}
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

func (n *NAT) InterceptPeerDial(peer.ID) bool { return true }
func (n *NAT) InterceptAddrDial(p peer.ID, a ma.Multiaddr) bool {
	return !n.refuses(p, a)
}
func (n *NAT) InterceptAccept(network.ConnMultiaddrs) bool { return true }
func (n *NAT) InterceptSecured(_ network.Direction, p peer.ID, c network.ConnMultiaddrs) bool {
	return !n.refuses(p, c.RemoteMultiaddr())
}
func (n *NAT) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
