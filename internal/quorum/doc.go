// Package quorum runs the canonical command log (internal/cmdlog) as the
// replicated state machine of a Raft quorum of bootstrap nodes, on
// github.com/hashicorp/raft.
//
// The cmdlog Log is Raft's FSM: a committed Raft entry is a proposal
// {at, kind, op}, which every member appends to its Log with the next
// sequence number, so every member holds the same log and state, and
// entries refused by a machine are refused everywhere alike. The Log
// records the Raft index of each entry it commits in the same store
// transaction, so a restarted member skips what it had applied.
//
// It owns Raft's transport over libp2p streams (RaftProtocol, served to
// quorum members only, with bounded frames and streams per member), Raft's
// log and stable store on Badger, and the FSM's snapshots.
//
// It knows nothing of HTTP, agents or clusters.
package quorum
