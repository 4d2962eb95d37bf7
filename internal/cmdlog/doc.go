// Package cmdlog is the canonical command log of the mesh: the ordered list
// of writes that the directory node sequences and every other node replays.
//
// A write is an Entry: a sequence number, the proposer's clock reading, a
// kind naming the state machine that applies it, and an opaque operation.
// Each surface with canonical state (the agent registry, the cluster
// catalog) registers a Machine for its kind. Log.Commit applies an entry
// and appends it to the change log in one store transaction, so state and
// log never disagree, and a refused entry changes nothing and takes no
// sequence number.
//
// Machines must be deterministic: they read only the entry and the current
// state. Then any node that commits the same entries in the same order holds
// the same state, whether the order comes from the local single writer
// (Local) or from a consensus engine; a Replica keeps a node's copy current
// from the directory's published entries and its change feed.
//
// It knows nothing of HTTP, libp2p, agents or clusters.
package cmdlog
