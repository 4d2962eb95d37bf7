package cmdlog

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
)

// Proposer orders writes: it gives an operation its place in the log,
// commits it and returns what applying it produced. A refused operation
// returns the Machine's error and is not logged. The local single writer
// and a consensus engine both satisfy it, so no handler changes when the
// log does.
type Proposer interface {
	Propose(ctx context.Context, kind string, at int64, op any) (any, error)
}

// Local is the single-writer Proposer of the directory node.
type Local struct {
	log *Log
	mu  sync.Mutex
	// OnCommit, if set, sees every committed entry in order, under the
	// writer's lock: it must not block.
	OnCommit func(Entry)
}

var _ Proposer = (*Local)(nil)

// NewLocal returns a Proposer that sequences writes into l.
func NewLocal(l *Log) *Local { return &Local{log: l} }

// Propose implements Proposer.
func (p *Local) Propose(ctx context.Context, kind string, at int64, op any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(op)
	if err != nil {
		return nil, fmt.Errorf("cmdlog: encode %s operation: %w", kind, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := Entry{Seq: p.log.Seq() + 1, At: at, Kind: kind, Op: raw}
	res, err := p.log.Commit(&e)
	if err == nil {
		NoteSeq(ctx, e.Seq)
		if p.OnCommit != nil {
			p.OnCommit(e)
		}
	}
	return res, err
}

type seqNoteKey struct{}

// WithSeqNote returns a ctx in which proposals note the entries they
// land in (NoteSeq), and what they noted: the highest seq, 0 while none
// did. A request served for another node tells it that seq, which it
// waits to hold before it answers its client (read your writes), rather
// than whatever the log holds by the time the answer is written.
func WithSeqNote(ctx context.Context) (context.Context, func() uint64) {
	n := new(atomic.Uint64)
	return context.WithValue(ctx, seqNoteKey{}, n), n.Load
}

// NoteSeq notes, in ctx's seq note if it has one, that a proposal made in
// ctx landed in (or, sent again, was found in) entry seq.
func NoteSeq(ctx context.Context, seq uint64) {
	n, ok := ctx.Value(seqNoteKey{}).(*atomic.Uint64)
	for ok {
		old := n.Load()
		ok = seq > old && !n.CompareAndSwap(old, seq)
	}
}

// ResultAs returns what a proposal produced as a T: the value a local log
// returns, or the JSON a proposer that forwards to a remote log brings back.
func ResultAs[T any](res any, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	switch v := res.(type) {
	case T:
		return v, nil
	case json.RawMessage:
		var out T
		if err := json.Unmarshal(v, &out); err != nil {
			return zero, fmt.Errorf("cmdlog: decode result: %w", err)
		}
		return out, nil
	}
	return zero, fmt.Errorf("cmdlog: result is a %T", res)
}

// Write names one client write across the attempts a node makes of it
// (sending it again to the next leader when it lost the first).
type Write struct {
	// ID names the write in the log, the same on every attempt: the log
	// applies it once (AppendBatch).
	ID string
	// Secret is known to the nodes that carry the write and never logged.
	// A handler draws from it what it would otherwise draw at random
	// (Draw), so that every attempt proposes the same operation.
	Secret []byte
}

type writeCtxKey struct{}

// WithWrite records in ctx that its proposals are attempts of w.
func WithWrite(ctx context.Context, w Write) context.Context {
	return context.WithValue(ctx, writeCtxKey{}, w)
}

// WriteOf returns the write recorded in ctx.
func WriteOf(ctx context.Context) (Write, bool) {
	w, ok := ctx.Value(writeCtxKey{}).(Write)
	return w, ok
}

// Draw fills b with bytes for purpose: from the secret of the write in
// ctx, the same on every attempt of it; at random without one.
func Draw(ctx context.Context, purpose string, b []byte) {
	w, ok := WriteOf(ctx)
	if !ok || len(w.Secret) == 0 {
		rand.Read(b)
		return
	}
	mac := hmac.New(sha256.New, w.Secret)
	for i := 0; i < len(b); i += sha256.Size {
		mac.Reset()
		fmt.Fprintf(mac, "%s/%d", purpose, i)
		copy(b[i:], mac.Sum(nil))
	}
}
