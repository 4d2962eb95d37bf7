package quorum

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/agentmesh/mesh/internal/cmdlog"
)

// proposal is the data of a Raft entry: a cmdlog entry without its seq,
// which each member gives it as it appends it, and the client write it
// is an attempt of (cmdlog.Write's ID), if any.
type proposal struct {
	At    int64           `json:"at"`
	Kind  string          `json:"kind"`
	Op    json.RawMessage `json:"op"`
	Write string          `json:"write,omitempty"`
}

// applied is what the FSM returns for an entry: the proposer's result.
type applied struct {
	seq uint64
	res any
	err error
}

// fsm is Raft's state machine: the command log. It applies what Raft
// commits in batches (raft.BatchingFSM), each in one store transaction
// (cmdlog.Log.AppendBatch): one fsync for up to maxAppendEntries entries.
type fsm struct {
	log     *cmdlog.Log
	onApply func(cmdlog.Entry)
	logger  *slog.Logger
	done    <-chan struct{} // closed when the member shuts down
	// onSnapshot, if set, learns the seq of each snapshot persisted.
	onSnapshot func(seq uint64)
	// onCommit, if set, learns of each batch Raft hands over the index of
	// its last entry, committed, before the batch is applied: the leader
	// tells its followers (commit notices, pipeline.go).
	onCommit func(index uint64)
}

var _ raft.BatchingFSM = (*fsm)(nil)

// storeRetry spaces the attempts to write entries the store failed to
// take (a full disk, say).
const storeRetry = time.Second

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	if f.onCommit != nil && len(logs) > 0 {
		f.onCommit(logs[len(logs)-1].Index)
	}
	out := make([]any, len(logs))
	var ps []cmdlog.Pending
	var at []int // ps[i] is the entry of logs[at[i]]
	for i, l := range logs {
		if l.Type != raft.LogCommand || l.Index <= f.log.Index() {
			// Not the directory's, or applied before this member restarted
			// (Raft does not know how far the state on disk goes).
			out[i] = applied{}
			continue
		}
		var p proposal
		if err := json.Unmarshal(l.Data, &p); err != nil {
			// Every member refuses it alike.
			out[i] = applied{err: errors.Join(errors.New("quorum: undecodable proposal"), err)}
			continue
		}
		ps = append(ps, cmdlog.Pending{At: p.At, Kind: p.Kind, Op: p.Op, Index: l.Index, Write: p.Write})
		at = append(at, i)
	}
	for done := 0; done < len(ps); {
		res, err := f.log.AppendBatch(ps[done:])
		for _, a := range res {
			if a.Err == nil && !a.Repeat && f.onApply != nil {
				f.onApply(a.Entry)
			}
			out[at[done]] = applied{seq: a.Entry.Seq, res: a.Res, err: a.Err}
			done++
		}
		if err == nil {
			break
		}
		// The machines accepted the entries but the store could not keep
		// them. Going on without them would make this member's state
		// differ from the others' for good: stall instead, until the store
		// takes them (Raft keeps the entries; a restart applies them again).
		f.logger.Error("the store refuses committed entries: applying stalls until it takes them", "index", ps[done].Index, "err", err)
		select {
		case <-f.done:
			for ; done < len(ps); done++ {
				out[at[done]] = applied{err: ErrClosed}
			}
		case <-time.After(storeRetry):
		}
	}
	return out
}

// Snapshot implements raft.FSM: it captures the state as of the last
// applied entry (Raft calls it between applies); Persist writes it out
// while applying goes on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.log.Snapshot()
	if err != nil {
		return nil, err
	}
	return &fsmSnapshot{s: s, onPersist: f.onSnapshot}, nil
}

// Restore implements raft.FSM: the state becomes the snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	h, err := f.log.Restore(rc)
	if err != nil {
		return err
	}
	f.logger.Info("installed a snapshot of the directory", "seq", h.Seq, "index", h.Index)
	return nil
}

type fsmSnapshot struct {
	s         *cmdlog.Snapshot
	onPersist func(seq uint64)
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if s.onPersist != nil {
		s.onPersist(s.s.Header.Seq)
	}
	return nil
}

func (s *fsmSnapshot) Release() { s.s.Close() }
