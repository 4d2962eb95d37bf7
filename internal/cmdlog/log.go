package cmdlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/mesh/store"
)

// Entry is one write in the log.
type Entry struct {
	// Seq is the entry's place in the log, assigned by the proposer.
	Seq uint64 `json:"seq"`
	// At is the proposer's clock in Unix nanoseconds: the only "now" a
	// Machine may use.
	At int64 `json:"at"`
	// Kind names the Machine that applies the entry.
	Kind string `json:"kind"`
	// Op is the operation, encoded by and for its Machine.
	Op json.RawMessage `json:"op"`
}

// Time returns At as a time.Time in UTC.
func (e *Entry) Time() time.Time { return time.Unix(0, e.At).UTC() }

// Machine applies the entries of one kind to state.
type Machine interface {
	// Apply changes state inside tx and returns what the change produced.
	// An error refuses the entry: nothing written in tx is kept. Apply must
	// be deterministic (see the package documentation).
	Apply(tx *store.Txn, e *Entry) (any, error)
	// Committed runs once the entry's transaction has committed, before the
	// entries of the next transaction are applied (to drop cached state,
	// for example), with res, what Apply returned for e in that
	// transaction. A transaction may hold several entries (AppendBatch):
	// Apply reads the state through tx, never through caches, and res is
	// the state as of e, which a later entry of the same transaction may
	// have changed (its own Committed follows).
	Committed(e *Entry, res any)
	// State lists the key prefixes that hold the machine's state: what a
	// snapshot of the log carries and installing one replaces. Keys the
	// machine keeps for this node alone must be outside them.
	State() [][]byte
	// Restored runs after a snapshot replaced the state (to drop cached
	// state).
	Restored()
}

// Log is the store's copy of the command log and the machines it feeds.
// Commits are serialised; reads of Seq and Changes are safe at any time.
type Log struct {
	db       *store.DB
	mu       sync.Mutex // serialises Commit
	seq      atomic.Uint64
	index    atomic.Uint64
	machines map[string]Machine
	// referrers are the machines that refer to entries of the change log.
	referrers []Referrer
	// writesFrom is at most the clock (At) of the oldest write the state
	// remembers (guarded by mu; noWrites when it remembers none, unknownAt
	// until a batch scanned them): AppendBatch skips looking for writes to
	// forget while none can be past the window.
	writesFrom int64
	// writes are the writes the state remembers (guarded by mu; nil until
	// a batch read them, after a start or a snapshot installed).
	writes *writeFilter

	// advanced is closed, and replaced, each time seq moves: Wait's signal.
	waitMu   sync.Mutex
	advanced chan struct{}
}

// Key layout of the log in the store.
//
//	l/<seq 8B>   Entry (the change log)
//	m/seq        last committed seq (8 bytes BE)
//	m/origin     did of the directory whose log this is
//	m/index      consensus index of the last committed entry (Append)
var (
	logPrefix = []byte("l/")
	seqKey    = []byte("m/seq")
	originKey = []byte("m/origin")
	indexKey  = []byte("m/index")
)

func logKey(seq uint64) []byte { return store.Key("l", store.U64(seq)) }

// Open loads the log's position from db.
func Open(db *store.DB) (*Log, error) {
	l := &Log{db: db, machines: map[string]Machine{}, advanced: make(chan struct{}), writesFrom: unknownAt}
	if err := recoverRestore(db); err != nil {
		return nil, fmt.Errorf("cmdlog: recovering an interrupted restore: %w", err)
	}
	err := db.View(func(tx *store.Txn) error {
		seq, err := GetU64(tx, seqKey)
		if err != nil {
			return err
		}
		index, err := GetU64(tx, indexKey)
		l.seq.Store(seq)
		l.index.Store(index)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cmdlog: open: %w", err)
	}
	return l, nil
}

// Handle registers m for entries of kind. Register every machine before
// the first Commit.
func (l *Log) Handle(kind string, m Machine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.machines[kind] = m
	if r, ok := m.(Referrer); ok {
		l.referrers = append(l.referrers, r)
	}
}

// DB is the store the log and its machines live in.
func (l *Log) DB() *store.DB { return l.db }

// Seq returns the sequence number of the last committed entry.
func (l *Log) Seq() uint64 { return l.seq.Load() }

// Commit applies e, which must carry the next sequence number, and appends
// it to the change log, in one transaction.
func (l *Log) Commit(e *Entry) (any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if want := l.seq.Load() + 1; e.Seq != want {
		return nil, fmt.Errorf("%w: seq %d, want %d", ErrOutOfOrder, e.Seq, want)
	}
	return l.commit(e)
}

// CommitBatch is Commit for es, entries of the next seqs in order, in one
// transaction: one fsync for the lot where Commit takes one each (a
// replica applies so what gossip and the change feed bring). When the
// transaction cannot take them all (a machine refuses one, or they are
// too large together for the store), each half is committed so, down to
// one entry at a time, committed by Commit. It returns how many it
// committed.
func (l *Log) CommitBatch(es []Entry) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range es {
		if want := l.seq.Load() + 1 + uint64(i); es[i].Seq != want {
			return 0, fmt.Errorf("%w: seq %d, want %d", ErrOutOfOrder, es[i].Seq, want)
		}
	}
	return l.commitRun(es)
}

// commitRun is CommitBatch under l.mu, its entries checked.
func (l *Log) commitRun(es []Entry) (int, error) {
	switch len(es) {
	case 0:
		return 0, nil
	case 1:
		if _, err := l.commit(&es[0]); err != nil {
			return 0, err
		}
		return 1, nil
	}
	res := make([]any, len(es))
	err := l.db.Update(func(tx *store.Txn) error {
		for i := range es {
			var refused, err error
			if res[i], refused, err = l.applyEntry(tx, &es[i]); refused != nil || err != nil {
				return errors.Join(refused, err)
			}
		}
		return tx.Set(seqKey, []byte(store.U64(es[len(es)-1].Seq)))
	})
	if err != nil {
		half := len(es) / 2
		n, err := l.commitRun(es[:half])
		if err != nil {
			return n, err
		}
		m, err := l.commitRun(es[half:])
		return n + m, err
	}
	for i := range es {
		l.machines[es[i].Kind].Committed(&es[i], res[i])
	}
	l.seq.Store(es[len(es)-1].Seq)
	l.signal()
	return len(es), nil
}

// applyEntry applies e inside tx and logs it: refused is the machine's
// refusal, err the store's failure.
func (l *Log) applyEntry(tx *store.Txn, e *Entry) (res any, refused, err error) {
	m, ok := l.machines[e.Kind]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKind, e.Kind), nil
	}
	if res, refused = m.Apply(tx, e); refused != nil {
		return nil, refused, nil
	}
	return res, nil, tx.SetJSON(logKey(e.Seq), e)
}

// Index is the consensus index of the last entry appended (AppendBatch): a
// consensus engine that hands a restarted node entries it had already
// applied skips those at or below it. 0 when entries came from Commit.
func (l *Log) Index() uint64 { return l.index.Load() }

// commit applies e under l.mu.
func (l *Log) commit(e *Entry) (any, error) {
	var res any
	var refused error
	err := l.db.Update(func(tx *store.Txn) error {
		var err error
		if res, refused, err = l.applyEntry(tx, e); refused != nil || err != nil {
			return errors.Join(refused, err)
		}
		return tx.Set(seqKey, []byte(store.U64(e.Seq)))
	})
	if refused != nil {
		return nil, refused
	}
	if err != nil {
		return nil, &StoreError{err}
	}
	l.machines[e.Kind].Committed(e, res)
	l.seq.Store(e.Seq)
	l.signal()
	return res, nil
}

// signal wakes the callers of Wait.
func (l *Log) signal() {
	l.waitMu.Lock()
	close(l.advanced)
	l.advanced = make(chan struct{})
	l.waitMu.Unlock()
}

// Wait blocks until the log holds seq, or ctx ends.
func (l *Log) Wait(ctx context.Context, seq uint64) error {
	for {
		l.waitMu.Lock()
		ch := l.advanced
		l.waitMu.Unlock()
		if l.Seq() >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Changes returns logged entries with seq > since, in order, encoded: at
// most limit of them and, beyond the first, at most maxBytes in all.
func (l *Log) Changes(since uint64, limit, maxBytes int) ([]json.RawMessage, error) {
	if since+1 < l.First() && since < l.Seq() {
		return nil, ErrCompacted
	}
	var out []json.RawMessage
	size := 0
	err := l.db.View(func(tx *store.Txn) error {
		return tx.Scan(logPrefix, logKey(since+1), func(_, v []byte) (bool, error) {
			if len(out) > 0 && size+len(v) > maxBytes {
				return false, nil
			}
			out = append(out, append(json.RawMessage(nil), v...))
			size += len(v)
			return len(out) < limit, nil
		})
	})
	return out, err
}

// BindOrigin records that this store holds the log of the directory named
// by did, and refuses a store that already holds another directory's log:
// two logs cannot be merged. A store without changes is bound anew.
func (l *Log) BindOrigin(did string) error {
	return l.db.Update(func(tx *store.Txn) error {
		cur, err := tx.Get(originKey)
		switch {
		case l.Seq() == 0 && (err == nil || errors.Is(err, store.ErrNotFound)):
			return tx.Set(originKey, []byte(did))
		case errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("cmdlog: the store holds %d changes of unknown origin", l.Seq())
		case err != nil:
			return err
		case string(cur) != did:
			return fmt.Errorf("%w: the store holds the log of %s, not of %s; use a fresh data directory", ErrOtherOrigin, cur, did)
		}
		return nil
	})
}

// Origin is the did of the directory whose log this store holds, empty
// while none is bound.
func (l *Log) Origin() (string, error) {
	var did string
	err := l.db.View(func(tx *store.Txn) error {
		v, err := tx.Get(originKey)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		did = string(v)
		return err
	})
	return did, err
}

// AdoptOrigin is BindOrigin for a replica that learns whose log it
// follows from the directory itself: a store not bound yet is bound to did
// even if it holds changes (fetched from that directory before it named
// its origin); one bound to another directory is refused.
func (l *Log) AdoptOrigin(did string) error {
	return l.db.Update(func(tx *store.Txn) error {
		cur, err := tx.Get(originKey)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return tx.Set(originKey, []byte(did))
		case err != nil:
			return err
		case string(cur) != did:
			return fmt.Errorf("%w: the store holds the log of %s, not of %s; use a fresh data directory", ErrOtherOrigin, cur, did)
		}
		return nil
	})
}

// GetU64 reads an 8-byte counter; a missing key reads as 0.
func GetU64(tx *store.Txn, key []byte) (uint64, error) {
	v, err := tx.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, ok := store.ParseU64(string(v))
	if !ok {
		return 0, fmt.Errorf("corrupt counter at %q", key)
	}
	return n, nil
}
