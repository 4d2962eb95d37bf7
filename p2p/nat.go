package p2p

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	ma "github.com/multiformats/go-multiaddr"
)

// natOptions configure how the node is reached across NATs.
//
// Gossipsub refuses limited relay connections (relay v2's default limits:
// 2 minutes, 128 KiB each way, after which the relay resets the circuit),
// so a relay that limited would carry no wall traffic at all. Bootstrap
// nodes therefore relay without per-connection limits, for members of the
// mesh only (acl), and bound the service by reservations and circuits
// instead (relayResources). Nodes behind NAT reserve a slot on every
// bootstrap relay (autorelay with static relays), advertise the circuit
// addresses, and try to upgrade each relayed connection to a direct one by
// hole punching (DCUtR).
func (h *Host) natOptions(acl *memberACL) []libp2p.Option {
	opts := []libp2p.Option{
		// The circuit transport: dial and accept relayed connections.
		libp2p.EnableRelay(),
		// Direct connection upgrade through relay: both sides of a relayed
		// connection dial each other at once, which opens most NATs.
		libp2p.EnableHolePunching(),
	}
	switch h.cfg.Reachability {
	case ReachPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case ReachPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	if h.cfg.RelayService {
		opts = append(opts,
			libp2p.EnableRelayService(relayv2.WithResources(relayResources()), relayv2.WithACL(acl)),
			// Tell peers whether they are reachable (AutoNAT dial-backs).
			libp2p.EnableNATService(),
		)
	} else if relays := h.otherBootstrapPeers(); len(relays) > 0 {
		opts = append(opts, libp2p.EnableAutoRelayWithStaticRelays(relays))
	}
	return opts
}

// addRelayAddrs records, for peer p, a circuit address through each
// bootstrap relay. A node behind NAT holds a reservation on them, so this
// reaches it even when the addresses it advertises are unusable (relays
// on private addresses are left out of advertised circuit addresses).
// libp2p dials relayed addresses only after direct ones had their chance.
func (h *Host) addRelayAddrs(p peer.ID) {
	if p == h.h.ID() || h.IsBootstrap(p) || h.Connected(p) {
		return
	}
	for _, r := range h.otherBootstrapPeers() {
		a, err := ma.NewMultiaddr("/p2p/" + r.ID.String() + "/p2p-circuit")
		if err == nil {
			h.h.Peerstore().AddAddr(p, a, relayAddrTTL)
		}
	}
}

// relayAddrTTL is how long a guessed circuit address is kept.
const relayAddrTTL = 10 * time.Minute

// maxPeersPerIP is how many peers may share one public address (many
// nodes behind one NAT): the relay's reservations per IP, and, at two
// connections each (a peer may hold a TCP and a QUIC one), the resource
// manager's connections per IPv4 address (libp2p's default is 8).
const maxPeersPerIP = 64

// connLimitsPerSubnet are the resource manager's connection limits per
// address block, consistent with maxPeersPerIP. Loopback stays unlimited.
func connLimitsPerSubnet() (ipv4, ipv6 []rcmgr.ConnLimitPerSubnet) {
	per := 2 * maxPeersPerIP
	return []rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: per}},
		[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: per}, {PrefixLength: 48, ConnCount: 8 * per}}
}

// relayResources are the bootstrap relay's limits. Limit is nil: any
// limit, however generous, makes every relayed connection "limited", and
// gossipsub opens no stream on a limited connection, so a finite duration
// or data cap would carry no chat at all. What bounds the service instead:
// only members (memberACL), reservations (1,024; one per peer, 64 per IP,
// renewed hourly), circuits per peer (64), the per-circuit buffers, and the
// resource manager's stream, memory and per-address connection limits.
func relayResources() relayv2.Resources {
	rc := relayv2.DefaultResources()
	rc.Limit = nil
	rc.ReservationTTL = time.Hour
	rc.MaxReservations = 1024
	rc.MaxCircuits = 64 // open circuits per peer (a NATed node talks to many)
	rc.BufferSize = 16 << 10
	rc.MaxReservationsPerIP = maxPeersPerIP
	rc.MaxReservationsPerASN = 1024
	return rc
}

// identifyWait bounds how long the relay waits for a peer's identify
// exchange before deciding whether it is a member.
const identifyWait = 5 * time.Second

// memberACL admits to the relay only peers that are members of the mesh:
// peers whose identify exchange announces the mesh's protocol version
// (libp2p.ProtocolVersion in newLibp2p), both for reservations and as the
// source of a circuit (its destination holds a reservation, so it is a
// member too). That is what a relay can check when a reservation arrives:
// the peer's key and what it announced. It keeps the public libp2p
// network, scanners and other protocols off the relay; it is not
// authentication, since anyone may run a mesh node, and the limits above
// bound what one member can take.
type memberACL struct {
	host atomic.Pointer[host.Host] // set once the host exists
}

var _ relayv2.ACLFilter = (*memberACL)(nil)

func (a *memberACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool { return a.isMember(p) }

func (a *memberACL) AllowConnect(src peer.ID, _ ma.Multiaddr, _ peer.ID) bool {
	return a.isMember(src)
}

func (a *memberACL) isMember(p peer.ID) bool {
	hp := a.host.Load()
	if hp == nil {
		return false
	}
	h := *hp
	// The request may arrive before identify finished on this side.
	if ids, ok := h.(interface{ IDService() identify.IDService }); ok {
		timer := time.NewTimer(identifyWait)
		defer timer.Stop()
		for _, c := range h.Network().ConnsToPeer(p) {
			select {
			case <-ids.IDService().IdentifyWait(c):
			case <-timer.C:
				return false
			}
		}
	}
	v, err := h.Peerstore().Get(p, "ProtocolVersion")
	pv, _ := v.(string)
	return err == nil && strings.HasPrefix(pv, ProtocolPrefix+"/")
}
