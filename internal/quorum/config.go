package quorum

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentmesh/mesh/internal/cmdlog"
)

// Limits of the log.
const (
	// maxEntry bounds one proposal, encoded (a catalog import of 1 MiB,
	// the largest registry write, fits).
	maxEntry = 2 << 20
	// maxAppendEntries is how many entries one AppendEntries RPC carries
	// at most.
	maxAppendEntries = 32
)

// Config configures a quorum member.
type Config struct {
	// Host carries Raft's RPCs (RaftProtocol). Its peerstore must know the
	// members' addresses; the node keeps them connected.
	Host host.Host
	// Log is the command log that Raft's committed entries are appended to.
	Log *cmdlog.Log
	// Dir holds Raft's log (a Badger store) and its snapshots; ignored
	// when InMemory.
	Dir      string
	InMemory bool
	// SyncWrites fsyncs Raft's log on every write, as the directory's own
	// state does.
	SyncWrites bool
	// Voters are the initial voters, this member among them, the same on
	// every member: a member whose Raft log is empty bootstraps the quorum
	// with them. A member that has state ignores them. Empty: the member
	// waits to be added to a running quorum.
	Voters []peer.ID
	// Known are members of a running quorum that this member, waiting to
	// be added to it (no Voters), accepts RPCs from before it learns the
	// quorum's configuration. Once it knows one, only its members count.
	Known []peer.ID

	// HeartbeatTimeout is how long a follower waits for the leader before
	// it stands for election; ElectionTimeout how long a candidate waits
	// for votes. LeaderLeaseTimeout is how long a leader stays one without
	// hearing from a majority (at most HeartbeatTimeout). CommitTimeout
	// bounds the wait before the leader sends new entries, or, without
	// any, what committed (an AppendEntries every CommitTimeout or so to
	// each follower while idle). RPCTimeout
	// bounds one RPC between members (each frame of a snapshot).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	RPCTimeout         time.Duration

	// SnapshotInterval is how often a member checks whether to snapshot;
	// it does when SnapshotThreshold entries were committed since the
	// last one, and then keeps TrailingLogs entries of Raft's log behind
	// it (a follower less far behind catches up from the log, not from
	// the snapshot).
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64

	// OnApply, if set, sees every entry this member appends to Log, in
	// order, on Raft's FSM goroutine: it must not block.
	OnApply func(e cmdlog.Entry)
	// OnSnapshot, if set, learns the seq of each snapshot this member
	// persisted (to compact the change log behind it).
	OnSnapshot func(seq uint64)
	// OnLeader, if set, learns when this member becomes leader (true) and
	// when it stops being one (false).
	OnLeader func(leader bool)
	// OnLeaderChange, if set, learns the leader this member knows of each
	// time it changes (empty: none, an election is under way), on the
	// quorum's own goroutine: it must not block.
	OnLeaderChange func(leader peer.ID)

	Logger *slog.Logger
}

// DefaultConfig returns the timings of hashicorp/raft's defaults, which
// suit members on one continent, but for CommitTimeout: 10 ms rather than
// 50, since a follower learns that an entry committed only from the
// leader's next AppendEntries, which without new writes waits for it, and
// a write sent through a follower waits until the follower applied it.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      10 * time.Millisecond,
		RPCTimeout:         10 * time.Second,
		SnapshotInterval:   2 * time.Minute,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
	}
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Host == nil || c.Log == nil:
		return errors.New("quorum: Host and Log are required")
	case c.Dir == "" && !c.InMemory:
		return errors.New("quorum: Dir is required unless InMemory")
	case c.HeartbeatTimeout < 5*time.Millisecond || c.ElectionTimeout < 5*time.Millisecond:
		return errors.New("quorum: heartbeat and election timeouts must be at least 5ms")
	case c.LeaderLeaseTimeout <= 0 || c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("quorum: the leader lease (%s) must be positive and at most the heartbeat timeout (%s)", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.ElectionTimeout < c.HeartbeatTimeout:
		return fmt.Errorf("quorum: the election timeout (%s) must be at least the heartbeat timeout (%s)", c.ElectionTimeout, c.HeartbeatTimeout)
	case c.CommitTimeout <= 0 || c.RPCTimeout <= 0:
		return errors.New("quorum: commit and RPC timeouts must be positive")
	case c.SnapshotInterval <= 0 || c.SnapshotThreshold == 0:
		return errors.New("quorum: snapshot interval and threshold must be positive")
	}
	seen := map[peer.ID]bool{}
	for _, v := range c.Voters {
		if seen[v] {
			return fmt.Errorf("quorum: voter %s listed twice", v)
		}
		seen[v] = true
	}
	if len(c.Voters) > 0 && !seen[c.Host.ID()] {
		return fmt.Errorf("quorum: the initial voters must include this member (%s)", c.Host.ID())
	}
	return nil
}
