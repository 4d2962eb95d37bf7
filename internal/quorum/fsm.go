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
// which each member gives it as it appends it.
type proposal struct {
	At   int64           `json:"at"`
	Kind string          `json:"kind"`
	Op   json.RawMessage `json:"op"`
}

// applied is what the FSM returns for an entry: the proposer's result.
type applied struct {
	seq uint64
	res any
	err error
}

// fsm is Raft's state machine: the command log.
type fsm struct {
	log     *cmdlog.Log
	onApply func(cmdlog.Entry)
	logger  *slog.Logger
	done    <-chan struct{} // closed when the member shuts down
	// onSnapshot, if set, learns the seq of each snapshot persisted.
	onSnapshot func(seq uint64)
}

var _ raft.FSM = (*fsm)(nil)

// storeRetry spaces the attempts to write an entry the store failed to
// take (a full disk, say).
const storeRetry = time.Second

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if l.Index <= f.log.Index() {
		// Applied before this member restarted: Raft does not know how
		// far the state on disk goes.
		return applied{}
	}
	var p proposal
	if err := json.Unmarshal(l.Data, &p); err != nil {
		// Every member refuses it alike.
		return applied{err: errors.Join(errors.New("quorum: undecodable proposal"), err)}
	}
	for {
		e := cmdlog.Entry{At: p.At, Kind: p.Kind, Op: p.Op}
		res, err := f.log.Append(&e, l.Index)
		var se *cmdlog.StoreError
		if !errors.As(err, &se) {
			if err == nil && f.onApply != nil {
				f.onApply(e)
			}
			return applied{seq: e.Seq, res: res, err: err}
		}
		// The machine accepted the entry but the store could not keep it.
		// Going on without it would make this member's state differ from
		// the others' for good: stall instead, until the store takes it
		// (Raft keeps the entry; a restart applies it again).
		f.logger.Error("the store refuses a committed entry: applying stalls until it takes it", "index", l.Index, "err", err)
		select {
		case <-f.done:
			return applied{err: ErrClosed}
		case <-time.After(storeRetry):
		}
	}
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
