// Package p2p is the node's libp2p layer. It knows nothing of agents or
// clusters: DHT records and topic messages are opaque bytes, checked by
// validators that callers hand in. Peer input that fails its checks is
// dropped and counted.
//
// Its jobs, by file (each parameter is explained where it is set):
//
//   - config.go: Config, the protocol prefix that keeps the mesh a network
//     of its own, the defaults.
//   - host.go: the host's life (New, Start, Close), its libp2p options
//     (identity, TCP and QUIC, resource and connection managers) and the
//     DHT's construction.
//   - browser.go: web pages as peers: WebTransport and WebRTC-direct
//     beside QUIC, their addresses, and limits of their own.
//   - nat.go: reachability: the relay v2 service for members of the mesh,
//     autorelay on the bootstrap relays, hole punching.
//   - dht.go: the Kademlia DHT on the private prefix: values and routing;
//     values.go keeps the values compressed, in the store Config.Values
//     names (a node's DATA/dht) or in memory.
//   - pubsub.go: gossipsub (parameters, validators, peer scoring) and
//     limits.go its per-peer rates; outbound.go bounds in bytes what waits
//     for each peer.
//   - bootstrap.go: dialling the bootstrap peers, with backoff, for ever.
//   - rendezvous.go: who serves a namespace (a wall topic), on bootstrap
//     nodes.
//   - stream.go: the request/response stream protocols the product
//     speaks, and streamlimits.go the budget of each peer's streams.
//   - drops.go: the count of dropped input; keys.go: peer ids of keys.
package p2p
