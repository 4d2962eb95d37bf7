package registryapi

import (
	"context"
	"sync"
)

// Log orders directory commands and applies them. The local implementation
// is a single writer; a replicated one (a consensus engine) satisfies the
// same interface, so no handler changes when the log does.
type Log interface {
	// Propose assigns cmd its place in the log, applies it and returns the
	// result. A refused command returns the Apply error and is not logged.
	Propose(ctx context.Context, cmd Command) (Result, error)
}

// LocalLog is the single-writer Log of a node that is its own directory.
type LocalLog struct {
	dir *Directory
	mu  sync.Mutex
	// OnCommit, if set, sees every committed command in order (under the
	// log's lock, so it must not block).
	OnCommit func(Command)
}

var _ Log = (*LocalLog)(nil)

// NewLocalLog returns a Log that sequences commands for dir.
func NewLocalLog(dir *Directory) *LocalLog { return &LocalLog{dir: dir} }

// Propose implements Log.
func (l *LocalLog) Propose(ctx context.Context, cmd Command) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cmd.Seq = l.dir.Seq() + 1
	res, err := l.dir.Commit(&cmd)
	if err == nil && l.OnCommit != nil {
		l.OnCommit(cmd)
	}
	return res, err
}
