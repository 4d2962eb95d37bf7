// Package node wires a mesh node together: the store and canonical log, the
// libp2p host (DHT, gossip, relays), the registry, the cluster walls and,
// when Config.Agent is set, an embedded agent with its payments; all behind
// one HTTP bridge, started and stopped as one. New(cfg), Start(ctx) and
// Close() are the one way to run a node, for the mesh command, for tests
// and for agents that embed a node.
//
// It holds no business logic: it owns the directory's protocols between
// nodes (change feed and snapshots, write forwarding, proposals, who leads
// a quorum of bootstrap nodes and the quorum's admin API), /health and
// /metrics, and hands each surface what it needs; the surfaces live in
// their own packages (the quorum's Raft in internal/quorum).
package node
