package quorum

import (
	"errors"

	"github.com/libp2p/go-libp2p/core/peer"
)

var (
	// ErrNotLeader: this member does not lead the quorum, so it cannot
	// order a write; the proposal was not appended and may be sent to the
	// leader (see NotLeaderError).
	ErrNotLeader = errors.New("quorum: not the leader")
	// ErrUnknownOutcome: leadership was lost, or the caller gave up, while
	// a proposal was on its way; it may or may not have been committed.
	ErrUnknownOutcome = errors.New("quorum: outcome unknown")
	// ErrChangeInProgress: a change of the members waits for the one
	// before to commit.
	ErrChangeInProgress = errors.New("quorum: a change of the members is in progress")
	// ErrTooLarge: a proposal is larger than one log entry may be.
	ErrTooLarge = errors.New("quorum: proposal too large")
	// ErrClosed: the quorum member has shut down.
	ErrClosed = errors.New("quorum: closed")
	// ErrMigrate: the store holds a directory that Raft's log does not
	// know of; it can seed a quorum of one only (see docs/operations.md).
	ErrMigrate = errors.New("quorum: the store holds a directory of its own")
)

// NotLeaderError is ErrNotLeader with the leader this member knows of
// (empty while there is none).
type NotLeaderError struct{ Leader peer.ID }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "quorum: not the leader, and no leader is known"
	}
	return "quorum: not the leader; the leader is " + e.Leader.String()
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }
