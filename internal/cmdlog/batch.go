package cmdlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/agentmesh/mesh/store"
)

// Group commit: a consensus engine hands the log its committed entries in
// batches (AppendBatch), which the log applies in as few store
// transactions as it can, one in the common case: one fsync for the lot,
// where Commit takes one per entry.
//
// Writes: an entry may name the client write it is an attempt of (Pending
// Write). The log remembers, in its replicated state, the writes it
// appended in the last WriteWindow with what applying them produced, so
// that a second attempt of one (a forwarding node that lost its leader
// and sent the write again to the next) is not applied again: it returns
// what the first produced. The decision reads only the state and the
// entries' own clocks, so every member takes it alike.

// WriteWindow is how long the log remembers a write: a forwarding node
// sends a write again only within half of it.
const WriteWindow = time.Minute

// Pending is a committed entry of a consensus engine, to be appended.
type Pending struct {
	At   int64
	Kind string
	Op   json.RawMessage
	// Index is the entry's place in the consensus engine's own log.
	Index uint64
	// Write names the client write the entry is an attempt of ("" for
	// none): an opaque id, the same on every attempt.
	Write string
}

// Applied is what appending a Pending produced.
type Applied struct {
	// Entry is the entry as appended (Seq 0 when refused).
	Entry Entry
	// Res and Err are the machine's result and refusal.
	Res any
	Err error
	// Repeat: the entry is another attempt of a write appended before, as
	// Entry.Seq: nothing was applied, Res is what the first produced
	// (JSON).
	Repeat bool
}

// Receipter is a result that keeps less for a repeated write than it
// returns (what the proposer reads of it, without the bulk).
type Receipter interface{ Receipt() any }

// Key layout of the writes remembered (part of the snapshot's state):
//
//	m/w/<write>            writeRecord
//	m/wa/<at 8B>/<write>   (empty): the records by age, to forget them
var (
	writePrefix    = []byte("m/w/")
	writeAgePrefix = []byte("m/wa/")
)

func writeKey(id string) []byte              { return store.Key("m", "w", id) }
func writeAgeKey(at int64, id string) []byte { return store.Key("m", "wa", store.U64(uint64(at)), id) }

type writeRecord struct {
	Seq uint64          `json:"seq"`
	At  int64           `json:"at"`
	Res json.RawMessage `json:"res,omitempty"`
}

// Bounds of Log.writesFrom.
const (
	unknownAt = math.MinInt64
	noWrites  = math.MaxInt64
)

// errStop ends a batch's transaction at a refused entry.
var errStop = errors.New("cmdlog: batch stops at a refused entry")

// AppendBatch applies ps in order as the next entries of the log (each
// gets the next sequence number) and records the consensus index of the
// last one. A refused entry changes nothing and takes no seq, as with
// Commit; the entries around it are applied all the same. It returns one
// Applied for each of ps, or, when the store fails, those applied before
// and a *StoreError: the caller offers the rest again.
func (l *Log) AppendBatch(ps []Pending) ([]Applied, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Applied, 0, len(ps))
	for len(out) < len(ps) {
		done, err := l.appendRun(ps[len(out):])
		out = append(out, done...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// run is what one transaction of a batch did.
type run struct {
	done    []Applied
	seq     uint64 // of the last entry applied
	index   uint64 // consensus index of the last entry applied, 0 for none
	stop    int    // the refused entry, if any
	refused error
	// writesFrom is Log.writesFrom once the run committed.
	writesFrom int64
	// filter is Log.writes once the run committed (built in its
	// transaction when the log had none), writes the run's changes to it.
	filter *writeFilter
	writes writeChanges
}

// appendRun applies a prefix of ps in one transaction: all of them, or
// those before the first refused entry (the refused entry alone when it
// is the first). A machine that refuses an entry may have written to the
// transaction already; the run is then applied again without it (the
// machines are deterministic: the entries before meet the same state).
func (l *Log) appendRun(ps []Pending) ([]Applied, error) {
	r, err := l.tryRun(ps)
	switch {
	case err != nil:
		return nil, &StoreError{err}
	case r.refused == nil:
		l.committed(r)
		return r.done, nil
	case r.stop == 0:
		return []Applied{{Err: r.refused}}, nil
	}
	if r, err = l.tryRun(ps[:r.stop]); err != nil || r.refused != nil {
		return nil, &StoreError{errors.Join(errors.New("cmdlog: a batch applied differently the second time"), err, r.refused)}
	}
	l.committed(r)
	return r.done, nil
}

// tryRun applies ps in one transaction, committed unless an entry is
// refused.
func (l *Log) tryRun(ps []Pending) (r run, err error) {
	err = l.db.Update(func(tx *store.Txn) error {
		r = run{seq: l.seq.Load(), writesFrom: l.writesFrom, filter: l.writes, writes: writeChanges{}}
		if r.filter == nil {
			var err error
			if r.filter, err = loadWriteFilter(tx); err != nil {
				return err
			}
		}
		var last int64
		newest := int64(noWrites) // the clock of the oldest write this run remembers
		for i, p := range ps {
			a, err := l.applyPending(tx, p, r.seq+1, &r)
			if err != nil {
				r.stop, r.refused = i, err
				return errStop
			}
			r.done = append(r.done, a)
			if !a.Repeat {
				r.seq = a.Entry.Seq
				if p.Write != "" {
					newest = min(newest, p.At)
				}
			}
			r.index, last = max(r.index, p.Index), max(last, p.At)
		}
		// Forget the writes past the window, if some may be (the scan
		// would find none otherwise: the state is the same either way).
		r.writesFrom = min(r.writesFrom, newest)
		if until := last - int64(WriteWindow); r.writesFrom < until {
			kept, err := forgetWrites(tx, until, 2*len(ps)+16, r.forgot)
			if err != nil {
				return err
			}
			r.writesFrom = kept
		}
		if r.index != 0 {
			if err := tx.Set(indexKey, []byte(store.U64(r.index))); err != nil {
				return err
			}
		}
		return tx.Set(seqKey, []byte(store.U64(r.seq)))
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return r, err
}

// applyPending applies p inside tx as entry seq, or finds it a repeat;
// r is the run it is part of.
func (l *Log) applyPending(tx *store.Txn, p Pending, seq uint64, r *run) (Applied, error) {
	var old *writeRecord
	if p.Write != "" && r.filter.mayHold(r.writes, p.Write) {
		var rec writeRecord
		switch err := tx.GetJSON(writeKey(p.Write), &rec); {
		case err == nil && p.At-rec.At < int64(WriteWindow):
			return Applied{Entry: Entry{Seq: rec.Seq, At: rec.At, Kind: p.Kind}, Res: rec.Res, Repeat: true}, nil
		case err == nil:
			old = &rec // remembered too long ago: a write of its own
		case !errors.Is(err, store.ErrNotFound):
			return Applied{}, err
		}
	}
	m, ok := l.machines[p.Kind]
	if !ok {
		return Applied{}, fmt.Errorf("%w: %q", ErrUnknownKind, p.Kind)
	}
	e := Entry{Seq: seq, At: p.At, Kind: p.Kind, Op: p.Op}
	res, err := m.Apply(tx, &e)
	if err != nil {
		return Applied{}, err
	}
	if err := tx.SetJSON(logKey(e.Seq), e); err != nil {
		return Applied{}, err
	}
	if p.Write != "" {
		if err := rememberWrite(tx, p, e.Seq, res, old); err != nil {
			return Applied{}, err
		}
		if old == nil {
			r.writes[r.filter.hash(p.Write)]++
		}
	}
	return Applied{Entry: e, Res: res}, nil
}

// Remembers reports whether the log appended an attempt of write id in
// the last WriteWindow (by this node's clock): another attempt of it is
// applied as nothing.
func (l *Log) Remembers(id string, now time.Time) (bool, error) {
	var rec writeRecord
	err := l.db.View(func(tx *store.Txn) error { return tx.GetJSON(writeKey(id), &rec) })
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return now.UnixNano()-rec.At < int64(WriteWindow), nil
}

// rememberWrite records that write p was applied as seq with res,
// replacing old, a record of the same id past its window.
func rememberWrite(tx *store.Txn, p Pending, seq uint64, res any, old *writeRecord) error {
	if old != nil {
		if err := tx.Delete(writeAgeKey(old.At, p.Write)); err != nil {
			return err
		}
	}
	if r, ok := res.(Receipter); ok {
		res = r.Receipt()
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if err := tx.SetJSON(writeKey(p.Write), writeRecord{Seq: seq, At: p.At, Res: raw}); err != nil {
		return err
	}
	return tx.Set(writeAgeKey(p.At, p.Write), nil)
}

// forgetWrites drops at most limit records of writes made before until,
// the oldest first, as every member does at the same entries, and tells
// forgot the id of each. It returns the clock of the oldest record it
// kept (noWrites when it kept none).
func forgetWrites(tx *store.Txn, until int64, limit int, forgot func(id string)) (kept int64, err error) {
	var old [][]byte
	kept = noWrites
	err = tx.Scan(writeAgePrefix, nil, func(k, _ []byte) (bool, error) {
		at, _ := store.ParseU64(string(k[len(writeAgePrefix) : len(writeAgePrefix)+8]))
		if int64(at) >= until || len(old) == limit {
			kept = int64(at)
			return false, nil
		}
		old = append(old, bytes.Clone(k))
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range old {
		id := string(k[len(writeAgePrefix)+9:])
		if err := tx.Delete(writeKey(id)); err != nil {
			return 0, err
		}
		forgot(id)
		if err := tx.Delete(k); err != nil {
			return 0, err
		}
	}
	return kept, nil
}

// committed finishes a run whose transaction committed: the machines
// learn of its entries in order, then the log's position moves.
func (l *Log) committed(r run) {
	for _, a := range r.done {
		if !a.Repeat {
			l.machines[a.Entry.Kind].Committed(&a.Entry, a.Res)
		}
	}
	if r.index != 0 {
		l.index.Store(r.index)
	}
	l.writesFrom = r.writesFrom
	r.filter.apply(r.writes)
	l.writes = r.filter
	l.seq.Store(r.seq)
	l.signal()
}

// forgot notes that the run dropped the record of write id.
func (r *run) forgot(id string) { r.writes[r.filter.hash(id)]-- }
