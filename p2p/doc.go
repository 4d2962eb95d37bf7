// Package p2p is the node's libp2p layer: the host (persistent Ed25519
// identity, TCP and QUIC, resource and connection managers), the Kademlia
// DHT on the product's private protocol prefix, gossipsub with validators and
// peer scoring, bootstrap dialing with backoff, the relay service for members
// of the mesh, the rendezvous, and small helpers for the product's
// request/response stream protocols. Peer input that fails its checks is
// dropped and counted (drops.go).
//
// All of the libp2p set-up lives in host.go, with every parameter explained.
//
// It knows nothing of agents or clusters: DHT records and topic messages are
// opaque bytes, checked by validators that callers hand in.
package p2p
