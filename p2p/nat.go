package p2p

import (
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
)

// natOptions configure how the node is reached across NATs.
//
// Gossipsub refuses limited relay connections (relay v2's default limits:
// 2 minutes, 128 KiB each way, after which the relay resets the circuit),
// so a relay that limited would carry no wall traffic at all. Bootstrap
// nodes therefore relay without per-connection limits and bound the service
// by reservations and circuits instead (relayResources). Nodes behind NAT
// reserve a slot on every bootstrap relay (autorelay with static relays),
// advertise the circuit addresses, and try to upgrade each relayed
// connection to a direct one by hole punching (DCUtR).
func (h *Host) natOptions() []libp2p.Option {
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
			libp2p.EnableRelayService(relayv2.WithResources(relayResources())),
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

// relayResources are the bootstrap relay's limits. Limit is nil: relayed
// connections are unlimited, hence usable by gossipsub. What bounds the
// service instead: reservations (one per peer, renewed hourly), circuits
// per peer, and the resource manager's stream and memory limits.
func relayResources() relayv2.Resources {
	rc := relayv2.DefaultResources()
	rc.Limit = nil
	rc.ReservationTTL = time.Hour
	rc.MaxReservations = 1024
	rc.MaxCircuits = 64 // open circuits per peer (a NATed node talks to many)
	rc.BufferSize = 16 << 10
	rc.MaxReservationsPerIP = 64 // many nodes share an address behind one NAT
	rc.MaxReservationsPerASN = 1024
	return rc
}
